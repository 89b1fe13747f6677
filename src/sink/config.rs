//! `[kafka]`: the producer's brokers and properties, and topic creation; `[delivery]`:
//! at-least-once or exactly-once.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Kafka producer settings.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Broker list.
    #[serde(default = "default_bootstrap")]
    pub bootstrap_servers: String,
    /// librdkafka properties passed through unchanged (e.g. `compression.type`,
    /// `security.protocol`, `sasl.password`). `acks` and `enable.idempotence` are fixed.
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// Creating missing topics through the admin client.
    #[serde(default)]
    pub topics: TopicsConfig,
}

/// Topic creation: on by default, with the broker's defaults unless a rule matches.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicsConfig {
    /// Create a topic the first time a record goes to it, if it does not exist.
    #[serde(default = "default_true")]
    pub create: bool,
    /// Settings per topic pattern (`*`, `?`); the first matching rule applies.
    #[serde(default, rename = "rule")]
    pub rules: Vec<TopicRule>,
}

impl Default for TopicsConfig {
    fn default() -> Self {
        Self {
            create: true,
            rules: Vec::new(),
        }
    }
}

/// Partitions, replication and configs for topics matching a pattern.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicRule {
    /// Topic name pattern, e.g. `outbox.event.*`.
    pub pattern: String,
    /// Partitions (-1: broker default).
    #[serde(default = "default_minus_one")]
    pub partitions: i32,
    /// Replication factor (-1: broker default).
    #[serde(default = "default_minus_one")]
    pub replication_factor: i32,
    /// Topic configs, e.g. `{ "retention.ms" = "604800000" }`.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
}

fn default_true() -> bool {
    true
}

fn default_minus_one() -> i32 {
    -1
}

impl KafkaConfig {
    /// The producer's record size limit (librdkafka `message.max.bytes`).
    pub fn max_message_bytes(&self) -> usize {
        self.properties
            .get("message.max.bytes")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000)
    }
}

impl std::fmt::Debug for KafkaConfig {
    /// Secret properties (`sasl.password`, …) show as `***`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let properties: BTreeMap<&str, &str> = self
            .properties
            .iter()
            .map(|(k, v)| match crate::secret::is_secret_key(k) {
                true => (k.as_str(), "***"),
                false => (k.as_str(), v.as_str()),
            })
            .collect();
        f.debug_struct("KafkaConfig")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("properties", &properties)
            .field("topics", &self.topics)
            .finish()
    }
}

impl Default for KafkaConfig {
    fn default() -> Self {
        Self {
            bootstrap_servers: default_bootstrap(),
            properties: BTreeMap::new(),
            topics: TopicsConfig::default(),
        }
    }
}

fn default_bootstrap() -> String {
    "127.0.0.1:9092".into()
}

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
    #[serde(
        default = "default_commit_backlog_ms",
        deserialize_with = "crate::units::millis"
    )]
    pub commit_backlog_ms: u64,
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
            ("commit_backlog_ms", self.commit_backlog_ms),
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
fn default_commit_backlog_ms() -> u64 {
    // 10,000-record transactions kept exactly-once at 16-22 % of at-least-once on a
    // 300-partition backlog; one-second ones commit in 10-50 ms (drain and EndTxn).
    1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_secret_properties() {
        let cfg = KafkaConfig {
            properties: [
                ("sasl.username", "alice"),
                ("sasl.password", "alice-secret"),
                ("ssl.key.password", "key-secret"),
                ("sasl.oauthbearer.client.secret", "oidc-secret"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            ..KafkaConfig::default()
        };
        let text = format!("{cfg:?}");
        assert!(text.contains("alice"), "{text}");
        for secret in ["alice-secret", "key-secret", "oidc-secret"] {
            assert!(!text.contains(secret), "{text}");
        }
    }
}
