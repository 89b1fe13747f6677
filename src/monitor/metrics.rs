//! Process-wide metrics in a Prometheus registry; clones update the same values.

use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use super::Status;
use crate::checkpoint::Checkpoint;
use crate::source::RowOp;

type Labels = Vec<(&'static str, String)>;
type IntGauge = Gauge<i64, AtomicI64>;

struct Inner {
    registry: Registry,
    transactions: Counter,
    events_routed: Family<Labels, Counter>,
    events_acked: Counter,
    deliveries_unproven: Counter,
    events_ignored: Family<Labels, Counter>,
    events_invalid: Family<Labels, Counter>,
    checkpoint_writes: Counter,
    restarts: Counter,
    in_flight: IntGauge,
    connected: IntGauge,
    unmatched_patterns: IntGauge,
    lag_ms: IntGauge,
    bytes_behind: IntGauge,
    checkpoint_age_seconds: IntGauge,
    checkpoint_offset: IntGauge,
    checkpoint_file_index: IntGauge,
    runway_seconds: IntGauge,
    retention_seconds: IntGauge,
    routed_to_sent: Histogram,
    sent_to_acked: Histogram,
    state: Mutex<State>,
}

/// What the status endpoint reports, kept beside the metrics.
#[derive(Default)]
struct State {
    checkpoint: Option<Checkpoint>,
    status: Option<Status>,
}

/// Shared metrics handle.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("outbox_router");
        macro_rules! reg {
            ($name:literal, $help:literal, $m:expr) => {{
                let m = $m;
                registry.register($name, $help, m.clone());
                m
            }};
        }
        let inner = Inner {
            transactions: reg!("transactions", "Committed transactions read from the binlog", Counter::default()),
            events_routed: reg!("events_routed", "Records handed to the sink, by topic", Family::default()),
            events_acked: reg!("events_acked", "Records acknowledged by the sink", Counter::default()),
            deliveries_unproven: reg!("deliveries_unproven", "Delivery reports of success without an offset (librdkafka's implicit acknowledgements); each is re-sent from the checkpoint, never counted as acknowledged", Counter::default()),
            events_ignored: reg!("events_ignored", "Outbox rows ignored, by reason (update, delete)", Family::default()),
            events_invalid: reg!("events_invalid", "Outbox rows that could not be records, by policy (fail, dead-letter, skip)", Family::default()),
            checkpoint_writes: reg!("checkpoint_writes", "Durable checkpoint writes", Counter::default()),
            restarts: reg!("restarts", "Pipeline restarts after transient errors", Counter::default()),
            in_flight: reg!("in_flight_records", "Records sent but not yet acknowledged", IntGauge::default()),
            connected: reg!("connected", "1 while the binlog stream is connected", IntGauge::default()),
            unmatched_patterns: reg!("outbox_patterns_unmatched", "outbox.tables patterns that match no table on the server", IntGauge::default()),
            lag_ms: reg!("lag_milliseconds", "Now minus the commit time of the last acknowledged transaction, 0 when caught up", IntGauge::default()),
            bytes_behind: reg!("binlog_bytes_behind", "Binlog bytes between the checkpoint and the server's current position", IntGauge::default()),
            checkpoint_age_seconds: reg!("checkpoint_age_seconds", "Seconds since the checkpoint was last written", IntGauge::default()),
            checkpoint_offset: reg!("checkpoint_offset", "Offset of the checkpoint in its binlog file", IntGauge::default()),
            checkpoint_file_index: reg!("checkpoint_file_index", "Numeric suffix of the checkpoint's binlog file", IntGauge::default()),
            runway_seconds: reg!("retention_runway_seconds", "Seconds until the binlog file holding the checkpoint may be purged (-1: no expiry)", IntGauge::default()),
            retention_seconds: reg!("binlog_retention_seconds", "The server's binlog retention (0: none)", IntGauge::default()),
            routed_to_sent: reg!("routed_to_sent_seconds", "Per transaction: routed until its records are handed to the producer (queueing in the router)", Histogram::new(exponential_buckets(0.0001, 2.0, 18))),
            sent_to_acked: reg!("sent_to_acked_seconds", "Per transaction: handed to the producer until Kafka acknowledged all its records", Histogram::new(exponential_buckets(0.0001, 2.0, 18))),
            registry,
            state: Mutex::new(State::default()),
        };
        Self(Arc::new(inner))
    }
}

/// Counter values, for the log line at shutdown and for tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Snapshot {
    /// Committed transactions read.
    pub transactions: u64,
    /// Records acknowledged.
    pub events_acked: u64,
    /// UPDATE rows ignored.
    pub ignored_updates: u64,
    /// DELETE rows ignored.
    pub ignored_deletes: u64,
    /// Durable checkpoint writes.
    pub checkpoints_written: u64,
    /// Restarts after transient errors.
    pub restarts: u64,
    /// Delivery reports of success without an offset (not counted as acknowledged).
    pub deliveries_unproven: u64,
}

impl Metrics {
    /// Times a transaction from routing to the producer's hands.
    pub fn routed_to_sent(&self, secs: f64) {
        self.0.routed_to_sent.observe(secs);
    }
    /// Times a transaction from the producer's hands to Kafka's acknowledgement.
    pub fn sent_to_acked(&self, secs: f64) {
        self.0.sent_to_acked.observe(secs);
    }
    /// Counts a committed transaction read.
    pub fn transaction(&self) {
        self.0.transactions.inc();
    }
    /// Counts records handed to the sink for one topic.
    pub fn routed(&self, topic: &str, n: u64) {
        self.0
            .events_routed
            .get_or_create(&vec![("topic", topic.to_string())])
            .inc_by(n);
    }
    /// Counts acknowledged records.
    pub fn acked(&self, n: u64) {
        self.0.events_acked.inc_by(n);
    }
    /// The counter of unproven deliveries, for the sink's delivery callback.
    pub fn deliveries_unproven(&self) -> Counter {
        self.0.deliveries_unproven.clone()
    }
    /// Counts ignored rows; returns the new total for that operation.
    pub fn ignored(&self, op: RowOp, n: u64) -> u64 {
        let reason = match op {
            RowOp::Update => "update",
            RowOp::Delete => "delete",
            RowOp::Insert => return 0,
        };
        self.0
            .events_ignored
            .get_or_create(&vec![("reason", reason.to_string())])
            .inc_by(n)
            + n
    }
    /// Counts an invalid row handled by `policy`.
    pub fn invalid(&self, policy: &str) {
        self.0
            .events_invalid
            .get_or_create(&vec![("policy", policy.to_string())])
            .inc();
    }
    /// Counts a restart.
    pub fn restart(&self) {
        self.0.restarts.inc();
    }
    /// Records a durable checkpoint write.
    pub fn checkpoint_written(&self, checkpoint: &Checkpoint) {
        self.0.checkpoint_writes.inc();
        self.set_checkpoint(checkpoint);
    }
    /// Publishes the current durable checkpoint (e.g. the one found at start).
    pub fn set_checkpoint(&self, checkpoint: &Checkpoint) {
        self.0
            .checkpoint_offset
            .set(checkpoint.position.offset as i64);
        self.0
            .checkpoint_file_index
            .set(checkpoint.position.file.index() as i64);
        self.0.checkpoint_age_seconds.set(0);
        self.0.state.lock().expect("metrics state").checkpoint = Some(checkpoint.clone());
    }
    /// Sets the number of unacknowledged records.
    pub fn set_in_flight(&self, n: usize) {
        self.0.in_flight.set(n as i64);
    }
    /// Sets how many table patterns match no table.
    pub fn set_unmatched_patterns(&self, n: usize) {
        self.0.unmatched_patterns.set(n as i64);
    }
    /// Marks the binlog stream connected or not.
    pub fn set_connected(&self, connected: bool) {
        self.0.connected.set(i64::from(connected));
    }
    /// True while the binlog stream is connected.
    pub fn is_connected(&self) -> bool {
        self.0.connected.get() == 1
    }
    /// The last durable checkpoint.
    pub fn checkpoint(&self) -> Option<Checkpoint> {
        self.0
            .state
            .lock()
            .expect("metrics state")
            .checkpoint
            .clone()
    }
    /// Publishes a freshly observed status in gauges and for `/status`.
    pub fn set_status(&self, status: &Status) {
        let i = &self.0;
        i.lag_ms.set(status.lag_ms.unwrap_or(0));
        i.bytes_behind
            .set(status.bytes_behind.map_or(0, |b| b as i64));
        i.runway_seconds.set(status.runway_secs.unwrap_or(-1));
        i.retention_seconds
            .set(status.retention_secs.unwrap_or(0) as i64);
        if let Some(age) = status.checkpoint_age_secs {
            i.checkpoint_age_seconds.set(age);
        }
        i.state.lock().expect("metrics state").status = Some(status.clone());
    }
    /// The last observed status.
    pub fn status(&self) -> Option<Status> {
        self.0.state.lock().expect("metrics state").status.clone()
    }
    /// The registry in Prometheus text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.0.registry).expect("writing to a String cannot fail");
        out
    }
    /// Counter values.
    pub fn snapshot(&self) -> Snapshot {
        let i = &self.0;
        let ignored = |r: &str| {
            i.events_ignored
                .get_or_create(&vec![("reason", r.to_string())])
                .get()
        };
        Snapshot {
            transactions: i.transactions.get(),
            events_acked: i.events_acked.get(),
            ignored_updates: ignored("update"),
            ignored_deletes: ignored("delete"),
            checkpoints_written: i.checkpoint_writes.get(),
            restarts: i.restarts.get(),
            deliveries_unproven: i.deliveries_unproven.get(),
        }
    }
}
