//! Every metric the router exposes, declared once: its field, type, name, labels and
//! help. The registry is built from this table, and tests compare it with what
//! `/metrics` shows and with the metric table of docs/monitoring.md.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use super::optional::OptionalGauge;
use std::sync::atomic::{AtomicI64, AtomicU64};

use prometheus_client::metrics::gauge::Gauge;

pub(super) type Labels = Vec<(&'static str, String)>;
pub(super) type IntGauge = Gauge<i64, AtomicI64>;
pub(super) type FloatGauge = Gauge<f64, AtomicU64>;
pub(super) type FloatCounter = Counter<f64, AtomicU64>;

/// What kind of series a metric is (its `# TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up; exposed with a `_total` suffix.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in buckets.
    Histogram,
}

/// One row of the catalog.
#[derive(Debug, Clone, Copy)]
pub struct MetricDef {
    /// The name after the `outbox_router_` prefix (counters without `_total`).
    pub name: &'static str,
    /// Its type.
    pub kind: MetricKind,
    /// Its label names.
    pub labels: &'static [&'static str],
    /// Its `# HELP` text (the doc line of its field).
    pub help: &'static str,
}

impl MetricDef {
    /// The name as a scrape shows it.
    pub fn exposed_name(&self) -> String {
        match self.kind {
            MetricKind::Counter => format!("outbox_router_{}_total", self.name),
            _ => format!("outbox_router_{}", self.name),
        }
    }
}

/// Gauges whose single series is left out while the value is unknown (never a sentinel
/// such as -1, which would break `max()` and alert thresholds).
pub const ABSENT_WHILE_UNKNOWN: &[&str] = &[
    "lag_seconds",
    "binlog_bytes_behind",
    "retention_runway_seconds",
    "binlog_retention_seconds",
];

/// Declares the registered metrics' struct, how it is registered, and `CATALOG`, from
/// one table: `/// help` `field: Type [= constructor] => Kind "name" [labels];`.
macro_rules! catalog {
    ($(#[doc = $help:literal] $field:ident: $ty:ty $(= $make:expr)? => $kind:ident $name:literal [$($label:literal),*];)*) => {
        /// The metrics, registered.
        pub(super) struct Registered {
            $(#[doc = $help] pub(super) $field: $ty,)*
        }

        impl Registered {
            /// Registers every metric of the catalog in `registry`.
            pub(super) fn register(registry: &mut Registry) -> Self {
                Self {
                    $($field: {
                        let metric: $ty = catalog!(@make $($make)?);
                        registry.register($name, $help.trim(), metric.clone());
                        metric
                    },)*
                }
            }
        }

        /// Every metric, in registration order.
        pub const CATALOG: &[MetricDef] = &[
            $(MetricDef { name: $name, kind: MetricKind::$kind, labels: &[$($label),*], help: $help },)*
        ];
    };
    (@make) => { Default::default() };
    (@make $make:expr) => { $make };
}

catalog! {
    /// Committed transactions read from the binlog
    transactions: Counter => Counter "transactions" [];
    /// Records handed to the sink, by topic
    events_routed: Family<Labels, Counter> => Counter "events_routed" ["topic"];
    /// Records acknowledged by the sink
    events_acked: Counter => Counter "events_acked" [];
    /// Delivery reports of success without an offset (librdkafka's implicit acknowledgements); each is re-sent from the checkpoint, never counted as acknowledged
    deliveries_unproven: Counter => Counter "deliveries_unproven" [];
    /// Outbox rows ignored, by reason (update, delete)
    events_ignored: Family<Labels, Counter> => Counter "events_ignored" ["reason"];
    /// Outbox rows that could not be records, by policy (fail, dead-letter, skip, park)
    events_invalid: Family<Labels, Counter> => Counter "events_invalid" ["policy"];
    /// Durable checkpoint writes
    checkpoint_writes: Counter => Counter "checkpoint_writes" [];
    /// Kafka transactions committed (exactly-once mode), each with its checkpoint marker
    kafka_transactions: Counter => Counter "kafka_transactions" [];
    /// 1 while this instance streams: the leader under [ha], or the only instance
    leader: IntGauge => Gauge "leader" [];
    /// 1 while this source is stopped by a failure of its own (its file does not load, its first start or lock topic is refused, or it stopped with an error and is retried); the cause is in /status
    source_failed: IntGauge => Gauge "source_failed" [];
    /// 1 while an operator's pause holds this source (the console's or the API's pause; who and why in /status): nothing streams, the position stays at the checkpoint
    paused: IntGauge => Gauge "paused" [];
    /// 1 while this standby could take over: it reached the source and Kafka at its last check (ha.standby_check_secs)
    standby_ready: IntGauge => Gauge "standby_ready" [];
    /// Times this instance took the lock and started streaming
    takeovers: Counter => Counter "takeovers" [];
    /// The last takeover: from being assigned the lock until the binlog stream was connected
    takeover_seconds: FloatGauge => Gauge "takeover_seconds" [];
    /// Times this leader lost the lock (session timeout, cut off from Kafka) and went back to standby
    lock_losses: Counter => Counter "lock_losses" [];
    /// Times this instance's transactional producer was fenced by a newer one with the same transactional.id (it then stops)
    fenced: Counter => Counter "fenced" [];
    /// Pipeline restarts after transient errors, by reason
    restarts: Family<Labels, Counter> => Counter "restarts" ["reason"];
    /// Times another replica with this source.server_id took the binlog stream (MariaDB 4052, MySQL 1236)
    server_id_conflicts: Counter => Counter "server_id_conflicts" [];
    /// Records Kafka did not acknowledge, by librdkafka error code (no_offset: success reported without an offset)
    delivery_errors: Family<Labels, Counter> => Counter "delivery_errors" ["code"];
    /// Invalid rows sent to a dead-letter topic, by topic
    dead_letters: Family<Labels, Counter> => Counter "dead_letters" ["topic"];
    /// Aggregates held back on the parking topic (on_invalid = "park"), as this leader read them at its start and parked since
    parked_aggregates: IntGauge => Gauge "parked_aggregates" [];
    /// Events waiting on the parking topic
    parked_events: IntGauge => Gauge "parked_events" [];
    /// Seconds since the oldest parked event was written, 0 when nothing is parked
    parked_oldest_seconds: IntGauge => Gauge "parked_oldest_seconds" [];
    /// Records read from the binlog and not yet acknowledged by Kafka, wherever they wait inside the router
    in_flight: IntGauge => Gauge "in_flight_records" [];
    /// How long undelivered records have waited without any acknowledgement (0: nothing waits)
    delivery_stall_seconds: FloatGauge => Gauge "delivery_stall_seconds" [];
    /// 1 while /ready answers 200: streaming and delivering
    ready: IntGauge => Gauge "ready" [];
    /// Numeric suffix of the binlog file the reader has routed up to
    reader_file_index: IntGauge => Gauge "reader_file_index" [];
    /// Offset in that file just past the last transaction routed
    reader_offset: IntGauge => Gauge "reader_offset" [];
    /// Time the reader waited because the pipeline was full (backpressure from Kafka)
    reader_blocked_seconds: FloatCounter => Counter "reader_blocked_seconds" [];
    /// Records per transaction that had outbox rows
    transaction_records: Histogram = Histogram::new(exponential_buckets(1.0, 4.0, 12)) => Histogram "transaction_records" [];
    /// Messages in librdkafka's producer queues (statistics.interval.ms)
    producer_queue_messages: IntGauge => Gauge "kafka_producer_queue_messages" [];
    /// Bytes in librdkafka's producer queues (statistics.interval.ms)
    producer_queue_bytes: IntGauge => Gauge "kafka_producer_queue_bytes" [];
    /// Values the claim check wrote to its bucket
    claim_check_objects: Counter => Counter "claim_check_objects" [];
    /// Bytes the claim check wrote to its bucket
    claim_check_bytes: Counter => Counter "claim_check_bytes" [];
    /// Event spans sent to the OpenTelemetry collector (exported) or lost on the way (dropped: the queue was full, or the collector did not take them), by outcome
    trace_spans: Family<Labels, Counter> => Counter "trace_spans" ["outcome"];
    /// Time to write one value to the claim check's bucket, retries included
    claim_check_put_seconds: Histogram = Histogram::new(exponential_buckets(0.001, 2.0, 16)) => Histogram "claim_check_put_seconds" [];
    /// Records the current producer has sent to the brokers (statistics.interval.ms)
    produce_records: IntGauge => Gauge "kafka_produce_records" [];
    /// Produce requests the current producer has sent (statistics.interval.ms)
    produce_requests: IntGauge => Gauge "kafka_produce_requests" [];
    /// Mean broker round-trip time over librdkafka's last statistics window, by broker
    broker_rtt_avg: Family<Labels, FloatGauge> => Gauge "kafka_broker_rtt_avg_seconds" ["broker"];
    /// 99th percentile of the broker round-trip time over librdkafka's last statistics window, by broker
    broker_rtt_p99: Family<Labels, FloatGauge> => Gauge "kafka_broker_rtt_p99_seconds" ["broker"];
    /// 1 while librdkafka's connection to the broker is UP
    broker_up: Family<Labels, IntGauge> => Gauge "kafka_broker_up" ["broker"];
    /// 1 while the binlog stream is connected
    connected: IntGauge => Gauge "connected" [];
    /// outbox.tables patterns that match no table on the server
    unmatched_patterns: IntGauge => Gauge "outbox_patterns_unmatched" [];
    /// Now minus the commit time of the oldest transaction not yet acknowledged, 0 when caught up; absent while unknown
    lag: OptionalGauge<f64> => Gauge "lag_seconds" [];
    /// Binlog bytes between the checkpoint and the server's current position; absent while unknown
    bytes_behind: OptionalGauge<i64> => Gauge "binlog_bytes_behind" [];
    /// Seconds since the checkpoint was last written
    checkpoint_age_seconds: IntGauge => Gauge "checkpoint_age_seconds" [];
    /// Offset of the checkpoint in its binlog file
    checkpoint_offset: IntGauge => Gauge "checkpoint_offset" [];
    /// Numeric suffix of the checkpoint's binlog file
    checkpoint_file_index: IntGauge => Gauge "checkpoint_file_index" [];
    /// Seconds until the binlog file holding the checkpoint may be purged; absent when nothing expires it or it is not known yet
    runway_seconds: OptionalGauge<i64> => Gauge "retention_runway_seconds" [];
    /// The server's binlog retention; absent when binlogs never expire; 0 on RDS / Aurora with binlog retention hours NULL (purged within minutes), which server_settings_problems also counts
    retention_seconds: OptionalGauge<i64> => Gauge "binlog_retention_seconds" [];
    /// Server settings the router depends on that are wrong right now (global binlog_format, binlog_row_image, binlog_row_metadata, log_bin; RDS / Aurora binlog retention hours NULL), checked every monitor.interval_secs
    settings_problems: IntGauge => Gauge "server_settings_problems" [];
    /// Per transaction: routed until its records are handed to the producer (queueing in the router)
    routed_to_sent: Histogram = Histogram::new(exponential_buckets(0.0001, 2.0, 18)) => Histogram "routed_to_sent_seconds" [];
    /// Per transaction: handed to the producer until Kafka acknowledged all its records
    sent_to_acked: Histogram = Histogram::new(exponential_buckets(0.0001, 2.0, 18)) => Histogram "sent_to_acked_seconds" [];
    /// Always 1; the labels say which build runs
    build_info: Family<Labels, IntGauge> => Gauge "build_info" ["version", "librdkafka"];
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::monitor::Metrics;

    /// Name (as exposed) and label names.
    type Documented = BTreeSet<(String, Vec<String>)>;

    fn catalog() -> Documented {
        CATALOG
            .iter()
            .map(|m| {
                let labels = m.labels.iter().map(|l| l.to_string()).collect();
                (m.exposed_name(), labels)
            })
            .collect()
    }

    #[test]
    fn a_scrape_shows_every_metric_of_the_catalog_with_its_type_and_help() {
        let text = Metrics::default().encode();
        for m in CATALOG {
            let family = format!("outbox_router_{}", m.name);
            let kind = match m.kind {
                MetricKind::Counter => "counter",
                MetricKind::Gauge => "gauge",
                MetricKind::Histogram => "histogram",
            };
            let type_line = format!("# TYPE {family} {kind}");
            // A labelled family shows once its first series exists (a topic, a broker); a
            // value not known yet is left out.
            let may_be_absent = !m.labels.is_empty() || ABSENT_WHILE_UNKNOWN.contains(&m.name);
            if may_be_absent && !text.contains(&format!("# TYPE {family} ")) {
                continue;
            }
            assert!(text.contains(&type_line), "{type_line} missing\n{text}");
            let help_line = format!("# HELP {family} {}", m.help.trim());
            assert!(text.contains(&help_line), "{help_line} missing");
        }
        let names: BTreeSet<String> = CATALOG
            .iter()
            .map(|m| format!("outbox_router_{}", m.name))
            .collect();
        for family in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
            let name = family.split(' ').next().unwrap();
            assert!(names.contains(name), "{name} is outside the catalog");
        }
    }

    #[test]
    fn the_docs_metric_table_documents_exactly_the_catalog() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/monitoring.md"))
                .unwrap();
        let table = readme
            .split("<!-- metrics -->")
            .nth(1)
            .expect("docs/monitoring.md marks its metrics table with <!-- metrics -->");
        let documented: Documented = table
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .map(|name| match name.split_once('{') {
                Some((name, labels)) => (
                    name.to_string(),
                    labels
                        .trim_end_matches('}')
                        .split(',')
                        .map(str::to_string)
                        .collect(),
                ),
                None => (name.to_string(), Vec::new()),
            })
            .collect();
        let code = catalog();
        let undocumented: Vec<_> = code.difference(&documented).collect();
        let stale: Vec<_> = documented.difference(&code).collect();
        assert!(
            undocumented.is_empty() && stale.is_empty(),
            "in the catalog, not in docs/monitoring.md (or with other labels): {undocumented:?}; \
             in docs/monitoring.md, not in the catalog: {stale:?}"
        );
    }
}

#[cfg(test)]
mod unknown_values {
    use crate::monitor::Metrics;

    /// A value the router does not know is no series at all; a known one is a plain
    /// series in base units.
    #[test]
    fn unknown_values_are_left_out_and_known_ones_are_plain_series() {
        let metrics = Metrics::default();
        let text = metrics.encode();
        for name in super::ABSENT_WHILE_UNKNOWN {
            assert!(
                !text.contains(&format!("outbox_router_{name} ")),
                "{name} before it is known:\n{text}"
            );
        }
        metrics.set_optional_gauges(Some(1.5), Some(10), Some(3600), Some(7200));
        let text = metrics.encode();
        for line in [
            "outbox_router_lag_seconds 1.5",
            "outbox_router_binlog_bytes_behind 10",
            "outbox_router_retention_runway_seconds 3600",
            "outbox_router_binlog_retention_seconds 7200",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
        metrics.set_optional_gauges(None, None, None, None);
        let text = metrics.encode();
        for name in super::ABSENT_WHILE_UNKNOWN {
            assert!(
                !text.contains(&format!("outbox_router_{name} ")),
                "{name} once unknown again"
            );
        }
    }
}
