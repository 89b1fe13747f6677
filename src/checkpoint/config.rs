//! `[checkpoint]`: where progress is stored and how often.

use std::path::PathBuf;

use serde::Deserialize;

/// Checkpoint store settings.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Directory of the embedded checkpoint store.
    pub dir: PathBuf,
    /// Milliseconds between durable checkpoint writes (a crash re-sends at most this much).
    #[serde(
        default = "default_flush_interval_ms",
        deserialize_with = "crate::units::millis"
    )]
    pub flush_interval_ms: u64,
    /// At-least-once mode: this router's name on Kafka. `run --init` / `checkpoint init`
    /// then record its first start on `delivery.checkpoint_topic`, and refuse to create
    /// the store again: a lost volume cannot start over at `source.start`. (Exactly-once
    /// mode records under `delivery.transactional_id`.)
    #[serde(default)]
    pub name: Option<String>,
}

fn default_flush_interval_ms() -> u64 {
    500
}
