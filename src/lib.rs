//! outbox-router: a transactional-outbox CDC connector.
//!
//! It tails a MySQL / MariaDB binlog as a replica, turns every committed INSERT on an
//! outbox table into a Kafka record, and durably checkpoints how far it got.
//!
//! The modules follow the data flow:
//!
//! ```text
//! source/      binlog stream → committed transactions with end positions
//! outbox/      row → OutboxEvent (column mapping, what is ignored, what is invalid)
//! route        OutboxEvent → Kafka record (topic template, key, headers, value)
//! sink/        Kafka producer (idempotent, acks=all) or stdout for dry runs
//! checkpoint/  durable store of the last fully acknowledged position
//! pipeline     wiring: bounded channels, in-flight window, ordered acks, restarts
//! monitor/     counters and health (beside the flow)
//! config       typed TOML configuration
//! ```

/// Aborts the process at a named fault-injection point when the `FAILPOINTS`
/// environment variable enables it, like a `kill -9` there. Compiled in only with the
/// `failpoints` feature; a no-op otherwise.
macro_rules! crash_point {
    ($name:literal) => {
        fail::fail_point!($name, |_| $crate::crash_at($name))
    };
}

/// The crash a `crash_point!` performs: no destructors, no flushes.
#[doc(hidden)]
pub fn crash_at(name: &str) -> ! {
    eprintln!("failpoint {name}: aborting the process");
    std::process::abort()
}

pub mod bytes_json;
pub mod checkpoint;
pub mod config;
pub mod import;
pub mod monitor;
pub mod outbox;
pub mod pattern;
pub mod pipeline;
pub mod position;
pub mod recover;
pub mod route;
pub mod secret;
pub mod sink;
pub mod source;
pub mod validate;
