//! Process-wide metrics in a Prometheus registry; clones update the same values. The
//! registry and the counters the stages bump live here; `/ready` and the instance's
//! role, the `/status` cache and librdkafka's statistics each in their own file.

mod kafka_stats;
mod readiness;
mod status_cache;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use prometheus_client::metrics::gauge::Gauge as FloatGaugeBase;

use super::role::RoleState;
use super::{Progress, Status};
use crate::checkpoint::Checkpoint;
use crate::position::Position;
use crate::source::RowOp;

type Labels = Vec<(&'static str, String)>;
type IntGauge = Gauge<i64, AtomicI64>;
type FloatGauge = FloatGaugeBase<f64, AtomicU64>;
type FloatCounter = Counter<f64, AtomicU64>;

/// Why the pipeline restarted, as the `reason` label of `restarts_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartReason {
    /// The binlog connection or a query failed.
    Source,
    /// Another replica with the same server id took the binlog stream.
    ServerIdConflict,
    /// Kafka did not acknowledge (or the producer failed).
    Delivery,
    /// A delivery report claimed success without an offset.
    UnprovenDelivery,
    /// Topic creation or its leader wait failed.
    Topic,
    /// The schema registry failed.
    Registry,
}

impl RestartReason {
    /// Every reason, so each series exists (at 0) from the start.
    pub const ALL: [RestartReason; 6] = [
        RestartReason::Source,
        RestartReason::ServerIdConflict,
        RestartReason::Delivery,
        RestartReason::UnprovenDelivery,
        RestartReason::Topic,
        RestartReason::Registry,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RestartReason::Source => "source",
            RestartReason::ServerIdConflict => "server_id_conflict",
            RestartReason::Delivery => "delivery",
            RestartReason::UnprovenDelivery => "unproven_delivery",
            RestartReason::Topic => "topic",
            RestartReason::Registry => "registry",
        }
    }
}

struct Inner {
    registry: Registry,
    transactions: Counter,
    events_routed: Family<Labels, Counter>,
    events_acked: Counter,
    deliveries_unproven: Counter,
    events_ignored: Family<Labels, Counter>,
    events_invalid: Family<Labels, Counter>,
    checkpoint_writes: Counter,
    kafka_transactions: Counter,
    leader: IntGauge,
    standby_ready: IntGauge,
    takeovers: Counter,
    takeover_seconds: FloatGauge,
    lock_losses: Counter,
    fenced: Counter,
    restarts: Family<Labels, Counter>,
    restarts_total: AtomicU64,
    server_id_conflicts: Counter,
    delivery_errors: Family<Labels, Counter>,
    dead_letters: Family<Labels, Counter>,
    in_flight: IntGauge,
    delivery_stall_seconds: FloatGauge,
    ready: IntGauge,
    reader_file_index: IntGauge,
    reader_offset: IntGauge,
    reader_blocked_seconds: FloatCounter,
    transaction_records: Histogram,
    producer_queue_messages: IntGauge,
    producer_queue_bytes: IntGauge,
    broker_rtt_seconds: Family<Labels, FloatGauge>,
    broker_up: Family<Labels, IntGauge>,
    connected: IntGauge,
    unmatched_patterns: IntGauge,
    lag_ms: IntGauge,
    bytes_behind: IntGauge,
    checkpoint_age_seconds: IntGauge,
    checkpoint_offset: IntGauge,
    checkpoint_file_index: IntGauge,
    runway_seconds: IntGauge,
    retention_seconds: IntGauge,
    settings_problems: IntGauge,
    routed_to_sent: Histogram,
    sent_to_acked: Histogram,
    progress: Progress,
    /// `/ready` fails once undelivered records waited this long without a delivery.
    ready_max_stall_ms: AtomicU64,
    state: Mutex<State>,
}

/// What the status endpoint reports, kept beside the metrics.
#[derive(Default)]
struct State {
    checkpoint: Option<Checkpoint>,
    status: Option<Status>,
    /// End of the last transaction the reader routed.
    reader: Option<Position>,
    /// Leader, standby or single.
    role: RoleState,
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
            kafka_transactions: reg!("kafka_transactions", "Kafka transactions committed (exactly-once mode), each with its checkpoint marker", Counter::default()),
            leader: reg!("leader", "1 while this instance streams: the leader under [ha], or the only instance", IntGauge::default()),
            standby_ready: reg!("standby_ready", "1 while this standby could take over: it reached the source and Kafka at its last check (ha.standby_check_secs)", IntGauge::default()),
            takeovers: reg!("takeovers", "Times this instance took the lock and started streaming", Counter::default()),
            takeover_seconds: reg!("takeover_seconds", "The last takeover: from being assigned the lock until the binlog stream was connected", FloatGauge::default()),
            lock_losses: reg!("lock_losses", "Times this leader lost the lock (session timeout, cut off from Kafka) and went back to standby", Counter::default()),
            fenced: reg!("fenced", "Times this instance's transactional producer was fenced by a newer one with the same transactional.id (it then stops)", Counter::default()),
            restarts: reg!("restarts", "Pipeline restarts after transient errors, by reason", Family::default()),
            restarts_total: AtomicU64::new(0),
            server_id_conflicts: reg!("server_id_conflicts", "Times another replica with this source.server_id took the binlog stream (MariaDB 4052, MySQL 1236)", Counter::default()),
            delivery_errors: reg!("delivery_errors", "Records Kafka did not acknowledge, by librdkafka error code (no_offset: success reported without an offset)", Family::default()),
            dead_letters: reg!("dead_letters", "Invalid rows sent to a dead-letter topic, by topic", Family::default()),
            in_flight: reg!("in_flight_records", "Records read from the binlog and not yet acknowledged by Kafka, wherever they wait inside the router", IntGauge::default()),
            delivery_stall_seconds: reg!("delivery_stall_seconds", "How long undelivered records have waited without any acknowledgement (0: nothing waits)", FloatGauge::default()),
            ready: reg!("ready", "1 while /ready answers 200: streaming and delivering", IntGauge::default()),
            reader_file_index: reg!("reader_file_index", "Numeric suffix of the binlog file the reader has routed up to", IntGauge::default()),
            reader_offset: reg!("reader_offset", "Offset in that file just past the last transaction routed", IntGauge::default()),
            reader_blocked_seconds: reg!("reader_blocked_seconds", "Time the reader waited because the pipeline was full (backpressure from Kafka)", FloatCounter::default()),
            transaction_records: reg!("transaction_records", "Records per transaction that had outbox rows", Histogram::new(exponential_buckets(1.0, 4.0, 12))),
            producer_queue_messages: reg!("kafka_producer_queue_messages", "Messages in librdkafka's producer queues (statistics.interval.ms)", IntGauge::default()),
            producer_queue_bytes: reg!("kafka_producer_queue_bytes", "Bytes in librdkafka's producer queues (statistics.interval.ms)", IntGauge::default()),
            broker_rtt_seconds: reg!("kafka_broker_rtt_seconds", "Broker round-trip time from librdkafka's statistics, by broker and quantile (avg, p99)", Family::default()),
            broker_up: reg!("kafka_broker_up", "1 while librdkafka's connection to the broker is UP", Family::default()),
            connected: reg!("connected", "1 while the binlog stream is connected", IntGauge::default()),
            unmatched_patterns: reg!("outbox_patterns_unmatched", "outbox.tables patterns that match no table on the server", IntGauge::default()),
            lag_ms: reg!("lag_milliseconds", "Now minus the commit time of the last acknowledged transaction, 0 when caught up", IntGauge::default()),
            bytes_behind: reg!("binlog_bytes_behind", "Binlog bytes between the checkpoint and the server's current position", IntGauge::default()),
            checkpoint_age_seconds: reg!("checkpoint_age_seconds", "Seconds since the checkpoint was last written", IntGauge::default()),
            checkpoint_offset: reg!("checkpoint_offset", "Offset of the checkpoint in its binlog file", IntGauge::default()),
            checkpoint_file_index: reg!("checkpoint_file_index", "Numeric suffix of the checkpoint's binlog file", IntGauge::default()),
            runway_seconds: reg!("retention_runway_seconds", "Seconds until the binlog file holding the checkpoint may be purged (-1: no expiry)", IntGauge::default()),
            retention_seconds: reg!("binlog_retention_seconds", "The server's binlog retention (0: none; also 0 on RDS / Aurora with binlog retention hours NULL, which server_settings_problems counts)", IntGauge::default()),
            settings_problems: reg!("server_settings_problems", "Server settings the router depends on that are wrong right now (global binlog_format, binlog_row_image, binlog_row_metadata, log_bin; RDS / Aurora binlog retention hours NULL), checked every monitor.interval_secs", IntGauge::default()),
            routed_to_sent: reg!("routed_to_sent_seconds", "Per transaction: routed until its records are handed to the producer (queueing in the router)", Histogram::new(exponential_buckets(0.0001, 2.0, 18))),
            sent_to_acked: reg!("sent_to_acked_seconds", "Per transaction: handed to the producer until Kafka acknowledged all its records", Histogram::new(exponential_buckets(0.0001, 2.0, 18))),
            progress: Progress::default(),
            ready_max_stall_ms: AtomicU64::new(60_000),
            registry,
            state: Mutex::new(State::default()),
        };
        let build_info = Family::<Labels, IntGauge>::default();
        build_info
            .get_or_create(&vec![
                ("version", env!("CARGO_PKG_VERSION").to_string()),
                ("librdkafka", rdkafka::util::get_rdkafka_version().1),
            ])
            .set(1);
        // Series that exist from the start, at 0: `rate()` and alerts see the first
        // increase, and a scrape shows every documented metric.
        let label = |k: &'static str, v: &str| vec![(k, v.to_string())];
        for reason in RestartReason::ALL {
            inner
                .restarts
                .get_or_create(&label("reason", reason.as_str()))
                .inc_by(0);
        }
        for reason in ["update", "delete"] {
            inner
                .events_ignored
                .get_or_create(&label("reason", reason))
                .inc_by(0);
        }
        for policy in ["fail", "dead-letter", "skip"] {
            inner
                .events_invalid
                .get_or_create(&label("policy", policy))
                .inc_by(0);
        }
        // The outage code: records that waited message.timeout.ms for a broker.
        inner
            .delivery_errors
            .get_or_create(&label("code", "MessageTimedOut"))
            .inc_by(0);
        let mut inner = inner;
        inner.registry.register(
            "build_info",
            "Always 1; the labels say which build runs",
            build_info,
        );
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
    /// Counts ignored rows of one operation.
    pub fn ignored(&self, op: RowOp, n: u64) {
        let reason = match op {
            RowOp::Update => "update",
            RowOp::Delete => "delete",
            RowOp::Insert => return,
        };
        self.0
            .events_ignored
            .get_or_create(&vec![("reason", reason.to_string())])
            .inc_by(n);
    }
    /// Counts an invalid row handled by `policy`.
    pub fn invalid(&self, policy: &str) {
        self.0
            .events_invalid
            .get_or_create(&vec![("policy", policy.to_string())])
            .inc();
    }
    /// Counts a restart and why.
    pub fn restart(&self, reason: RestartReason) {
        self.0
            .restarts
            .get_or_create(&vec![("reason", reason.as_str().to_string())])
            .inc();
        self.0.restarts_total.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts a committed Kafka transaction.
    pub fn kafka_transaction_committed(&self) {
        self.0.kafka_transactions.inc();
    }
    /// Counts a server-id conflict; returns how many there were.
    pub fn server_id_conflict(&self) -> u64 {
        self.0.server_id_conflicts.inc() + 1
    }
    /// The per-code counter of failed deliveries, for the sink's delivery callback.
    pub fn delivery_errors(&self) -> Family<Labels, Counter> {
        self.0.delivery_errors.clone()
    }
    /// Makes the dead-letter series of `topic` exist (at 0) before its first row.
    pub fn expect_dead_letters(&self, topic: &str) {
        self.0
            .dead_letters
            .get_or_create(&vec![("topic", topic.to_string())])
            .inc_by(0);
    }
    /// Counts a row sent to the dead-letter `topic`.
    pub fn dead_letter(&self, topic: &str) {
        self.0
            .dead_letters
            .get_or_create(&vec![("topic", topic.to_string())])
            .inc();
    }
    /// What the router holds undelivered (shared with the pipeline and the sink).
    pub fn progress(&self) -> &Progress {
        &self.0.progress
    }
    /// The reader routed a transaction ending at `end` with `records` records.
    pub fn read(&self, end: Option<&Position>, commit_time_ms: i64, records: usize) {
        let i = &self.0;
        i.progress.routed(commit_time_ms, records);
        // A streamed part of a large transaction: its records count, its end is not one.
        let Some(end) = end else {
            return;
        };
        i.transactions.inc();
        if records > 0 {
            i.transaction_records.observe(records as f64);
        }
        i.reader_file_index.set(end.file.index() as i64);
        i.reader_offset.set(end.offset as i64);
        i.state.lock().expect("metrics state").reader = Some(end.clone());
    }
    /// The reader waited `secs` for room in the pipeline.
    pub fn reader_blocked(&self, secs: f64) {
        self.0.reader_blocked_seconds.inc_by(secs);
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
    /// The registry in Prometheus text format.
    pub fn encode(&self) -> String {
        let i = &self.0;
        // Read at scrape time: a stall must show before the next observation.
        i.in_flight.set(i.progress.records() as i64);
        i.delivery_stall_seconds
            .set(i.progress.stalled_for().as_secs_f64());
        i.ready.set(i64::from(self.readiness().is_ok()));
        if let Some(lag) = self.held_lag_ms() {
            i.lag_ms.set(lag);
        }
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
            restarts: i.restarts_total.load(Ordering::Relaxed),
            deliveries_unproven: i.deliveries_unproven.get(),
        }
    }
}
