//! Process-wide metrics in a Prometheus registry; clones update the same values. Every
//! metric is declared once in `catalog.rs`; the calls the stages make live here; `/ready` and the instance's
//! role, the `/status` cache and librdkafka's statistics each in their own file.

mod catalog;
mod kafka_stats;
mod optional;
mod readiness;
mod router_state;
mod status_cache;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use catalog::{Labels, Registered};
pub use catalog::{MetricDef, MetricKind, ABSENT_WHILE_UNKNOWN, CATALOG};
pub use kafka_stats::Produced;

use super::role::RoleState;
use super::{Progress, Status};
use crate::checkpoint::Checkpoint;
use crate::position::Position;
use crate::source::RowOp;

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
    /// Every metric of the catalog.
    m: Registered,
    restarts_total: AtomicU64,
    /// Dead letters over every topic (the fleet report's figure).
    dead_letters_total: AtomicU64,
    /// Sum (µs) and count of the producer-to-acknowledgement times: the histogram
    /// keeps only buckets readable.
    acked_after_us: AtomicU64,
    acked_after_count: AtomicU64,
    progress: Progress,
    /// The source server's clock, which binlog commit times are in.
    server_clock: super::ServerClock,
    /// `/ready` fails once undelivered records waited this long without a delivery.
    ready_max_stall_ms: AtomicU64,
    state: Mutex<State>,
    /// Starting, standby or running, as it changes (for the run lock).
    router_state: tokio::sync::watch::Sender<super::RouterState>,
    /// This source's traces, when tracing is on.
    traces: std::sync::OnceLock<super::traces::Traces>,
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
    /// When the oldest parked event was written (ms since epoch), if one is.
    parked_since_ms: Option<i64>,
}

/// The counters the fleet report turns into figures and rates.
#[derive(Debug, Clone, Copy, Default)]
pub struct ConsoleFigures {
    /// Records acknowledged.
    pub acked: u64,
    /// Sum and count of the producer-to-acknowledgement times (seconds, per
    /// transaction).
    pub ack_sum_secs: f64,
    pub ack_count: u64,
    /// Rows sent to a dead-letter topic.
    pub dead_letters: u64,
    pub parked_aggregates: u64,
    pub parked_events: u64,
}

/// Shared metrics handle.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

impl Default for Metrics {
    fn default() -> Self {
        Self::with_registry(Registry::with_prefix("outbox_router"))
    }
}

impl Metrics {
    /// A pool's source's metrics: every series carries `source="NAME"`.
    pub fn for_source(name: &str) -> Self {
        let label = (
            std::borrow::Cow::Borrowed("source"),
            std::borrow::Cow::Owned(name.to_string()),
        );
        Self::with_registry(Registry::with_prefix_and_labels(
            "outbox_router",
            std::iter::once(label),
        ))
    }

    fn with_registry(mut registry: Registry) -> Self {
        let m = Registered::register(&mut registry);
        m.build_info
            .get_or_create(&vec![
                ("version", env!("CARGO_PKG_VERSION").to_string()),
                ("librdkafka", rdkafka::util::get_rdkafka_version().1),
            ])
            .set(1);
        let inner = Inner {
            m,
            restarts_total: AtomicU64::new(0),
            dead_letters_total: AtomicU64::new(0),
            acked_after_us: AtomicU64::new(0),
            acked_after_count: AtomicU64::new(0),
            progress: Progress::default(),
            server_clock: super::ServerClock::default(),
            ready_max_stall_ms: AtomicU64::new(60_000),
            registry,
            state: Mutex::new(State::default()),
            router_state: tokio::sync::watch::channel(super::RouterState::Starting).0,
            traces: std::sync::OnceLock::new(),
        };
        // Series that exist from the start, at 0: `rate()` and alerts see the first
        // increase, and a scrape shows every documented metric.
        let label = |k: &'static str, v: &str| vec![(k, v.to_string())];
        for reason in RestartReason::ALL {
            inner
                .m
                .restarts
                .get_or_create(&label("reason", reason.as_str()))
                .inc_by(0);
        }
        for reason in ["update", "delete"] {
            inner
                .m
                .events_ignored
                .get_or_create(&label("reason", reason))
                .inc_by(0);
        }
        for policy in ["fail", "dead-letter", "skip"] {
            inner
                .m
                .events_invalid
                .get_or_create(&label("policy", policy))
                .inc_by(0);
        }
        for outcome in ["exported", "dropped"] {
            inner
                .m
                .trace_spans
                .get_or_create(&label("outcome", outcome))
                .inc_by(0);
        }
        // The outage code: records that waited message.timeout.ms for a broker.
        inner
            .m
            .delivery_errors
            .get_or_create(&label("code", "MessageTimedOut"))
            .inc_by(0);
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
        self.0.m.routed_to_sent.observe(secs);
    }
    /// Times a transaction from the producer's hands to Kafka's acknowledgement.
    pub fn sent_to_acked(&self, secs: f64) {
        self.0.m.sent_to_acked.observe(secs);
        let i = &self.0;
        i.acked_after_us
            .fetch_add((secs * 1e6) as u64, Ordering::Relaxed);
        i.acked_after_count.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts records handed to the sink for one topic.
    pub fn routed(&self, topic: &str, n: u64) {
        self.0
            .m
            .events_routed
            .get_or_create(&vec![("topic", topic.to_string())])
            .inc_by(n);
    }
    /// Counts acknowledged records.
    pub fn acked(&self, n: u64) {
        self.0.m.events_acked.inc_by(n);
    }
    /// The counter of unproven deliveries, for the sink's delivery callback.
    pub fn deliveries_unproven(&self) -> Counter {
        self.0.m.deliveries_unproven.clone()
    }
    /// Counts ignored rows of one operation.
    pub fn ignored(&self, op: RowOp, n: u64) {
        let reason = match op {
            RowOp::Update => "update",
            RowOp::Delete => "delete",
            RowOp::Insert => return,
        };
        self.0
            .m
            .events_ignored
            .get_or_create(&vec![("reason", reason.to_string())])
            .inc_by(n);
    }
    /// Counts an invalid row handled by `policy`.
    pub fn invalid(&self, policy: &str) {
        self.0
            .m
            .events_invalid
            .get_or_create(&vec![("policy", policy.to_string())])
            .inc();
    }
    /// Counts a restart and why.
    pub fn restart(&self, reason: RestartReason) {
        self.0
            .m
            .restarts
            .get_or_create(&vec![("reason", reason.as_str().to_string())])
            .inc();
        self.0.restarts_total.fetch_add(1, Ordering::Relaxed);
    }
    /// Counts a committed Kafka transaction.
    pub fn kafka_transaction_committed(&self) {
        self.0.m.kafka_transactions.inc();
    }
    /// Counts a server-id conflict; returns how many there were.
    pub fn server_id_conflict(&self) -> u64 {
        self.0.m.server_id_conflicts.inc() + 1
    }
    /// The per-code counter of failed deliveries, for the sink's delivery callback.
    pub fn delivery_errors(&self) -> Family<Labels, Counter> {
        self.0.m.delivery_errors.clone()
    }
    /// The series of spans with `outcome` (`exported`, `dropped`).
    pub fn trace_spans(&self, outcome: &str) -> Counter {
        self.0
            .m
            .trace_spans
            .get_or_create(&vec![("outcome", outcome.to_string())])
            .clone()
    }
    /// Traces this source's events (set once, at start, when tracing is on).
    pub fn trace_with(&self, traces: super::traces::Traces) {
        let _ = self.0.traces.set(traces);
    }
    /// This source's traces, when tracing is on.
    pub fn traces(&self) -> Option<&super::traces::Traces> {
        self.0.traces.get()
    }
    /// Makes the dead-letter series of `topic` exist (at 0) before its first row.
    pub fn expect_dead_letters(&self, topic: &str) {
        self.0
            .m
            .dead_letters
            .get_or_create(&vec![("topic", topic.to_string())])
            .inc_by(0);
    }
    /// Counts a row sent to the dead-letter `topic`.
    pub fn dead_letter(&self, topic: &str) {
        self.0
            .m
            .dead_letters
            .get_or_create(&vec![("topic", topic.to_string())])
            .inc();
        self.0.dead_letters_total.fetch_add(1, Ordering::Relaxed);
    }
    /// The source server's clock (set at each connect): what binlog commit times are
    /// compared with.
    pub fn server_clock(&self) -> &super::ServerClock {
        &self.0.server_clock
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
        i.m.transactions.inc();
        if records > 0 {
            i.m.transaction_records.observe(records as f64);
        }
        i.m.reader_file_index.set(end.file.index() as i64);
        i.m.reader_offset.set(end.offset as i64);
        i.state.lock().expect("metrics state").reader = Some(end.clone());
    }
    /// The claim check wrote a value of `bytes` in `secs`.
    pub fn claim_checked(&self, bytes: u64, secs: f64) {
        self.0.m.claim_check_objects.inc();
        self.0.m.claim_check_bytes.inc_by(bytes);
        self.0.m.claim_check_put_seconds.observe(secs);
    }
    /// The reader waited `secs` for room in the pipeline.
    pub fn reader_blocked(&self, secs: f64) {
        self.0.m.reader_blocked_seconds.inc_by(secs);
    }
    /// What is parked: aggregates, events, and when the oldest event was written.
    pub fn set_parked(&self, aggregates: u64, events: u64, oldest_ms: Option<i64>) {
        let m = &self.0.m;
        m.parked_aggregates.set(aggregates as i64);
        m.parked_events.set(events as i64);
        self.0.state.lock().expect("metrics state").parked_since_ms = oldest_ms;
        self.refresh_parked_age();
    }
    /// The oldest parked event's age as of now (each status observation calls it).
    pub(crate) fn refresh_parked_age(&self) {
        let since = self.0.state.lock().expect("metrics state").parked_since_ms;
        let age = since.map_or(0, |ms| (crate::checkpoint::now_ms() - ms).max(0) / 1000);
        self.0.m.parked_oldest_seconds.set(age);
    }
    /// Sets how many table patterns match no table.
    pub fn set_unmatched_patterns(&self, n: usize) {
        self.0.m.unmatched_patterns.set(n as i64);
    }
    /// Marks the binlog stream connected or not.
    pub fn set_connected(&self, connected: bool) {
        self.0.m.connected.set(i64::from(connected));
        // A source that streams has no failure of its own.
        if connected {
            self.set_failure(None);
        }
    }
    /// True while the binlog stream is connected.
    pub fn is_connected(&self) -> bool {
        self.0.m.connected.get() == 1
    }
    /// The registry in Prometheus text format.
    pub fn encode(&self) -> String {
        let i = &self.0;
        // Read at scrape time: a stall must show before the next observation.
        i.m.in_flight.set(i.progress.records() as i64);
        i.m.delivery_stall_seconds
            .set(i.progress.stalled_for().as_secs_f64());
        i.m.ready.set(i64::from(self.readiness().is_ok()));
        if let Some(lag) = self.held_lag_ms() {
            i.m.lag.set(Some(lag as f64 / 1000.0));
        }
        let mut out = String::new();
        encode(&mut out, &self.0.registry).expect("writing to a String cannot fail");
        out
    }
    /// What the fleet report shows of this source.
    pub fn console_figures(&self) -> ConsoleFigures {
        let m = &self.0.m;
        ConsoleFigures {
            acked: m.events_acked.get(),
            ack_sum_secs: self.0.acked_after_us.load(Ordering::Relaxed) as f64 / 1e6,
            ack_count: self.0.acked_after_count.load(Ordering::Relaxed),
            dead_letters: self.0.dead_letters_total.load(Ordering::Relaxed),
            parked_aggregates: m.parked_aggregates.get().max(0) as u64,
            parked_events: m.parked_events.get().max(0) as u64,
        }
    }
    /// Counter values.
    pub fn snapshot(&self) -> Snapshot {
        let i = &self.0;
        let ignored = |r: &str| {
            i.m.events_ignored
                .get_or_create(&vec![("reason", r.to_string())])
                .get()
        };
        Snapshot {
            transactions: i.m.transactions.get(),
            events_acked: i.m.events_acked.get(),
            ignored_updates: ignored("update"),
            ignored_deletes: ignored("delete"),
            checkpoints_written: i.m.checkpoint_writes.get(),
            restarts: i.restarts_total.load(Ordering::Relaxed),
            deliveries_unproven: i.m.deliveries_unproven.get(),
        }
    }
}
