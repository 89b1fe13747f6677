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
}

fn default_flush_interval_ms() -> u64 {
    500
}
