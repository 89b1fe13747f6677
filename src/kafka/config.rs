//! `[kafka]`: the brokers, the client properties every Kafka client of the router
//! shares, and topic creation.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Kafka producer settings.
#[derive(Clone, Deserialize)]
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
#[derive(Debug, Clone, Deserialize)]
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
