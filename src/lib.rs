//! outbox-router: a transactional-outbox CDC connector.
//!
//! It tails a MySQL / MariaDB binlog as a replica, turns every committed INSERT on an
//! outbox table into a Kafka record, and durably checkpoints how far it got.
//!
//! The modules follow the data flow; each stage's folder holds its settings
//! (`config.rs`) beside its runtime, and only acknowledgements run back against it:
//!
//! ```text
//! position/    where in a binlog: Position, GTID states, TableName (shared by all)
//! source/      binlog stream → committed transactions with end positions
//!              (config, connect, reader, boundary, server queries, table snapshots)
//! outbox/      row → OutboxEvent (column mapping, rules, what is ignored or invalid)
//! route/       OutboxEvent → Kafka record (topic, key, headers, JSON / Avro value),
//!              and ordered parking (a bad event's aggregate held back, in order)
//! sink/        Kafka producer (idempotent, acks=all, delivery proof, exactly-once
//!              transactions and their commit markers), or stdout
//! checkpoint/  durable store of the last fully acknowledged position, and its writer
//! pipeline/    the wiring: start position, read loop, acker (the acknowledgement
//!              path back from the sink to the checkpoint), supervisor and restarts
//! monitor/     beside the flow: metrics, progress, status verdict, HTTP endpoints
//! kafka/       beside the flow: [kafka], client configuration, admin (topics), the
//!              consumers that read topics back, the reachability probe
//! ha/          beside the flow: hot standby's lock (which instance streams)
//! config/      the file: the stages' sections composed, loaded, checked (with the
//!              sections of the wiring and the operator commands, which are no stage)
//! ops/         operator commands beside the flow: validate, import, recover, prune,
//!              replay, reconcile, parked (and the audit trail)
//! pool/        many sources over many instances: the pool file, one lock topic per
//!              source, each source run as a standby pair's member (`pipeline`)
//! secret/      beside the flow: values never printed (`${env:}` / `${file:}`
//!              references, redaction)
//! stop.rs      a stop asked while a command's work runs, honoured within a bound
//! progress.rs  an operator command's progress: a bar on a terminal, else log lines
//! cli/         the command line the binary runs: one file per subcommand
//! ```
//!
//! Imports follow the arrows: a stage uses earlier stages' types, `monitor` and `kafka`
//! (which use none of the later ones); `config` composes the stages' sections; `pipeline` and
//! `ops` use everything. The floors, top first — a module imports only from floors below
//! its own (`tests/layout.rs` reads this list and checks every import against it, and
//! that no file imports one that imports it back):
//!
//! ```text
//! floor 8: cli
//! floor 7: ops pool
//! floor 6: pipeline
//! floor 5: config
//! floor 4: sink
//! floor 3: route
//! floor 2: outbox monitor ha
//! floor 1: checkpoint source kafka
//! floor 0: position pattern civil units secret stop progress bytes_json cause_chain
//! ```
//!
//! The binary (`main.rs`) is `cli`'s thin caller, so what only the library uses is
//! `pub(crate)` and the compiler finds what nothing uses: `pipeline`, `ops`, `sink`,
//! `ha`, `secret`, `units`, `bytes_json`. The modules left `pub` are the ones the
//! integration tests, benchmarks and fuzz targets reach into.

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

pub(crate) mod bytes_json;
mod cause_chain;
pub mod checkpoint;
pub mod civil;
pub mod cli;
pub mod config;
pub(crate) mod ha;
pub mod kafka;
pub mod monitor;
pub(crate) mod ops;
pub mod outbox;
pub mod pattern;
pub(crate) mod pipeline;
pub(crate) mod pool;
pub mod position;
pub(crate) mod progress;
pub mod route;
pub(crate) mod secret;
pub(crate) mod sink;
pub mod source;
pub(crate) mod stop;
pub(crate) mod units;

pub use cause_chain::cause_chain;
