//! The Kafka side of the sink: the producer that is the sink, its delivery proof, the
//! transactions of exactly-once mode, and the topic its commit markers go to. The
//! Kafka clients every part of the router shares are in `crate::kafka`.

mod checkpoint_topic;
mod delivery;
mod fleet_records;
mod polled;
mod producer;
mod transactions;

pub use checkpoint_topic::{
    ensure_checkpoint_topic, first_start_key, first_start_of, fleet_checkpoint_topic, fleet_key,
    marker_history, note_fleet_checkpoint_topic, send_first_start_record, MarkerHistory,
};
pub use fleet_records::{FencingWriter, FleetRecord};
pub use producer::KafkaSink;
