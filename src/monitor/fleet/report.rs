//! One instance's report of one source, as it goes on the status topic: who runs it,
//! in which role and state, and the figures an operator watches.

use serde::{Deserialize, Serialize};

use crate::monitor::status::Live;
use crate::monitor::{Metrics, Role, RouterState, Verdict};

/// What a source is doing on the instance that reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceState {
    /// Started, before its first observation (or waiting for its first start).
    Starting,
    /// Streaming (a leader or single instance) or ready to take over (a standby).
    Running,
    /// Stopped cleanly: the instance left.
    Stopped,
    /// Stopped by a failure of its own (`cause` says which).
    Failed,
    /// Paused by an operator (`cause` says who, when and why): its leader streams
    /// nothing, its position stays at the checkpoint.
    Paused,
}

/// One source on one instance, at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceReport {
    /// The source's name (a pool's source file, or a single router's `monitor.name`).
    pub source: String,
    /// The reporting instance.
    pub instance: String,
    /// Its lock group, if it has one.
    #[serde(default)]
    pub group: Option<String>,
    pub role: Role,
    pub state: SourceState,
    /// Why it failed, or why it is not ready.
    #[serde(default)]
    pub cause: Option<String>,
    /// When this report was made (ms since the epoch, the reporting instance's clock).
    pub at_ms: i64,
    /// How often the instance reports: a report older than a few of these is stale.
    pub interval_secs: u64,
    #[serde(default)]
    pub verdict: Option<Verdict>,
    #[serde(default)]
    pub reasons: Vec<String>,
    #[serde(default)]
    pub lag_ms: Option<i64>,
    #[serde(default)]
    pub bytes_behind: Option<u64>,
    #[serde(default)]
    pub runway_secs: Option<i64>,
    #[serde(default)]
    pub retention_secs: Option<u64>,
    /// Events acknowledged per second since the previous report.
    #[serde(default)]
    pub events_per_sec: f64,
    /// Mean time from the producer's hands to Kafka's acknowledgement since the
    /// previous report (ms), when anything was acknowledged.
    #[serde(default)]
    pub ack_latency_ms: Option<f64>,
    /// The durable checkpoint (file:offset and GTID state).
    #[serde(default)]
    pub checkpoint: Option<String>,
    /// Where the reader has routed up to.
    #[serde(default)]
    pub reader_position: Option<String>,
    /// Records read and not yet acknowledged.
    #[serde(default)]
    pub in_flight: usize,
    /// Rows sent to a dead-letter topic since the instance started.
    #[serde(default)]
    pub dead_letters: u64,
    #[serde(default)]
    pub parked_aggregates: u64,
    #[serde(default)]
    pub parked_events: u64,
}

/// Counters a report turns into rates: the previous report's.
#[derive(Debug, Clone, Copy, Default)]
pub struct Previous {
    at_ms: i64,
    acked: u64,
    ack_sum_secs: f64,
    ack_count: u64,
}

/// Who reports: the instance, its group and its reporting interval.
#[derive(Debug, Clone)]
pub struct Reporter {
    pub instance: String,
    pub group: Option<String>,
    pub interval_secs: u64,
}

impl SourceReport {
    /// `source` as `metrics` show it now; `previous` turns counters into rates and is
    /// moved on. `stopping`: the instance is leaving.
    pub fn of(
        reporter: &Reporter,
        source: &str,
        metrics: &Metrics,
        previous: &mut Previous,
        stopping: bool,
    ) -> Self {
        let at_ms = crate::checkpoint::now_ms();
        let live = metrics.live();
        let status = metrics.status();
        let figures = metrics.console_figures();
        let elapsed = (at_ms - previous.at_ms).max(1) as f64 / 1000.0;
        let acked = figures.acked.saturating_sub(previous.acked);
        let events_per_sec = match previous.at_ms {
            0 => 0.0,
            _ => acked as f64 / elapsed,
        };
        let ack_count = figures.ack_count.saturating_sub(previous.ack_count);
        let ack_latency_ms = (ack_count > 0)
            .then(|| (figures.ack_sum_secs - previous.ack_sum_secs) * 1000.0 / ack_count as f64);
        *previous = Previous {
            at_ms,
            acked: figures.acked,
            ack_sum_secs: figures.ack_sum_secs,
            ack_count: figures.ack_count,
        };
        let state = state_of(metrics, &live, stopping);
        let cause = (live.paused.clone())
            .or(live.failure.clone())
            .or(live.not_ready_reason.clone());
        let standby = live.role == Role::Standby;
        // A standby's figures are its last lead's, or none: only the leader's count.
        let status = status.filter(|_| !standby);
        Self {
            source: source.to_string(),
            instance: reporter.instance.clone(),
            group: reporter.group.clone(),
            role: live.role,
            state,
            cause,
            at_ms,
            interval_secs: reporter.interval_secs,
            verdict: status.as_ref().map(|s| s.verdict),
            reasons: status
                .as_ref()
                .map(|s| s.reasons.clone())
                .unwrap_or_default(),
            lag_ms: status.as_ref().and_then(|s| s.lag_ms),
            bytes_behind: status.as_ref().and_then(|s| s.bytes_behind),
            runway_secs: status.as_ref().and_then(|s| s.runway_secs),
            retention_secs: status.as_ref().and_then(|s| s.retention_secs),
            events_per_sec,
            ack_latency_ms,
            checkpoint: metrics.checkpoint().map(|c| c.position.to_string()),
            reader_position: live.reader_position.clone(),
            in_flight: live.in_flight_records,
            dead_letters: figures.dead_letters,
            parked_aggregates: figures.parked_aggregates,
            parked_events: figures.parked_events,
        }
    }

    /// The record's key: one per source and instance, so compaction keeps each
    /// instance's newest report of each source.
    pub fn key(&self) -> String {
        format!("{}@{}", self.source, self.instance)
    }

    /// Streams (or is the one that would): a leader's or a single router's report.
    pub fn leads(&self) -> bool {
        self.role != Role::Standby && self.state != SourceState::Stopped
    }

    /// The report is older than three reporting intervals (and a few seconds for
    /// clocks): its instance stopped reporting.
    pub fn stale(&self, now_ms: i64) -> bool {
        now_ms - self.at_ms > (3 * self.interval_secs as i64 + 5) * 1000
    }

    /// What changes the fleet view at once (a report goes out without waiting for the
    /// interval).
    pub fn shape(&self) -> (Role, SourceState) {
        (self.role, self.state)
    }

    /// The shape a report of `metrics` would have now.
    pub fn shape_of(metrics: &Metrics) -> (Role, SourceState) {
        let live = metrics.live();
        (live.role, state_of(metrics, &live, false))
    }
}

fn state_of(metrics: &Metrics, live: &Live, stopping: bool) -> SourceState {
    match (stopping, &live.failure, *metrics.router_state().borrow()) {
        (true, _, _) => SourceState::Stopped,
        (false, _, _) if live.paused.is_some() => SourceState::Paused,
        (false, Some(_), _) => SourceState::Failed,
        (false, None, RouterState::Starting) => SourceState::Starting,
        (false, None, RouterState::Stopped) => SourceState::Stopped,
        (false, None, _) => SourceState::Running,
    }
}
