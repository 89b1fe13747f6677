//! `[delivery]`: at-least-once or exactly-once, and the Kafka transactions of
//! exactly-once mode.

use serde::Deserialize;

/// How records are delivered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeliveryMode {
    /// Idempotent producer; after a crash the records since the checkpoint come again
    /// with the same event ids.
    #[default]
    AtLeastOnce,
    /// Transactional producer: each Kafka transaction holds whole binlog transactions
    /// and the checkpoint of the last one; `read_committed` consumers see every event
    /// once.
    ExactlyOnce,
}

/// `[delivery]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryConfig {
    /// `at-least-once` (default) or `exactly-once`.
    #[serde(default)]
    pub mode: DeliveryMode,
    /// The producer's `transactional.id`, stable per source (exactly-once); also the
    /// key of this source's checkpoint record.
    #[serde(default)]
    pub transactional_id: String,
    /// Compacted topic holding the checkpoint records (exactly-once).
    #[serde(default = "default_checkpoint_topic")]
    pub checkpoint_topic: String,
    /// Commit a Kafka transaction after this many records…
    #[serde(default = "default_commit_max_records")]
    pub commit_max_records: usize,
    /// …or this many milliseconds after it began, whichever comes first.
    #[serde(
        default = "default_commit_max_ms",
        deserialize_with = "crate::units::millis"
    )]
    pub commit_max_ms: u64,
    /// While a backlog is read (binlog transactions more than 2 s old keep coming), a
    /// transaction stays open up to this long instead: commits are a fixed cost per
    /// transaction, and records that wait behind a backlog gain nothing from small ones.
    /// Unset: `commit_backlog_ms()`.
    #[serde(default, deserialize_with = "crate::units::millis_opt")]
    pub commit_backlog_ms: Option<u64>,
    /// …and holds at most this many records (never fewer than `commit_max_records`)…
    #[serde(default = "default_commit_backlog_max_records")]
    pub commit_backlog_max_records: usize,
    /// …and this many bytes of records.
    #[serde(
        default = "default_commit_backlog_max_bytes",
        deserialize_with = "crate::units::bytes"
    )]
    pub commit_backlog_max_bytes: usize,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        toml::from_str("").expect("delivery defaults")
    }
}

impl DeliveryConfig {
    /// True in exactly-once mode.
    pub fn exactly_once(&self) -> bool {
        self.mode == DeliveryMode::ExactlyOnce
    }

    /// What is wrong with these settings, if anything.
    pub fn check(&self) -> Result<(), String> {
        if self.exactly_once() && self.transactional_id.trim().is_empty() {
            return Err("delivery.mode = \"exactly-once\" needs delivery.transactional_id (stable per source, e.g. \"outbox-router-orders\")".into());
        }
        if self.commit_max_records == 0 {
            return Err("delivery.commit_max_records must be at least 1".into());
        }
        Ok(())
    }

    /// How long a backlog's transaction may stay open: as set, else 5 s.
    pub fn commit_backlog_ms(&self) -> u64 {
        self.commit_backlog_ms.unwrap_or(DEFAULT_COMMIT_BACKLOG_MS)
    }

    /// An unset `commit_backlog_ms` within half the producer's `transaction.timeout.ms`
    /// (as `check_against_transaction_timeout` requires): a short timeout set for
    /// other reasons shortens the default instead of refusing it. A value set is kept,
    /// and refused there when it does not fit.
    pub fn fit_to_transaction_timeout(&mut self, timeout_ms: u64) {
        if self.commit_backlog_ms.is_none() {
            let fits = (timeout_ms / 2).max(self.commit_max_ms);
            self.commit_backlog_ms = Some(DEFAULT_COMMIT_BACKLOG_MS.min(fits));
        }
    }

    /// What is wrong with these settings given the producer's effective
    /// `transaction.timeout.ms`: a Kafka transaction allowed to stay open longer than
    /// half of it would be aborted by the coordinator once drain and commit are added,
    /// and the router would read the same backlog again and again.
    pub fn check_against_transaction_timeout(&self, timeout_ms: u64) -> Result<(), String> {
        if !self.exactly_once() {
            return Ok(());
        }
        for (key, value) in [
            ("commit_max_ms", self.commit_max_ms),
            ("commit_backlog_ms", self.commit_backlog_ms()),
        ] {
            if value.saturating_mul(2) > timeout_ms {
                return Err(format!(
                    "delivery.{key} = {value} ms keeps a Kafka transaction open longer than half the producer's transaction.timeout.ms ({timeout_ms} ms): the transaction coordinator would abort it (drain and commit come on top) and the router would read the same stretch again after every abort. Lower delivery.{key}, or raise kafka.properties.\"transaction.timeout.ms\" (the brokers cap it at transaction.max.timeout.ms, 15 minutes by default)"
                ));
            }
        }
        Ok(())
    }
}

fn default_checkpoint_topic() -> String {
    "outbox-router.checkpoints".into()
}
fn default_commit_max_records() -> usize {
    10_000
}
fn default_commit_max_ms() -> u64 {
    100
}
fn default_commit_backlog_max_records() -> usize {
    // A second of the fastest backlog measured (300k records/s) fits three times over.
    1_000_000
}
fn default_commit_backlog_max_bytes() -> usize {
    512 << 20
}
/// Every commit drains the producer (nothing is sent until all of the transaction is
/// acknowledged) and costs 80-800 ms of a backlog's pipe: one-second transactions kept
/// exactly-once at 66-87 % of at-least-once (BENCHMARKS round 20), five-second ones
/// lose that once in five. Kafka Connect's exactly-once sources commit every
/// `offset.flush.interval.ms` (60 s) by default.
const DEFAULT_COMMIT_BACKLOG_MS: u64 = 5_000;
