//! End-to-end tests against the real local MariaDB and Kafka (`scripts/services up`).
//! Each test has its own database, topics, replica server id and checkpoint store.

mod archive;
mod avro;
mod bad_input;
mod binlog_shapes;
mod checkpoint_torture;
mod claim_check;
mod cloudevents;
mod cluster;
mod compressed;
mod console;
#[cfg(feature = "failpoints")]
mod crash;
mod debezium_cutover;
mod event_router;
#[cfg(feature = "failpoints")]
mod exactly_once;
mod failover;
mod fleet;
mod fresh_broker;
mod handover;
mod import;
mod large;
mod managed;
mod monitoring;
mod ops;
mod outage;
mod parking;
mod pool;
mod rows;
mod secured_kafka;
mod security;
mod signals;
mod silent_paths;
mod standby;
mod stream;
mod topics;
mod traces;
mod util;
