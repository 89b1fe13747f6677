//! What a source needs before it may run, each check its own source's: a build that
//! honours its Kafka properties, and a lock topic the broker accepts.

use anyhow::{Context, Result};
use tracing::warn;

use super::PoolSource;

/// `items` split into those `check` passes and those it fails, with why.
pub(super) fn partition_failing<T>(
    items: Vec<T>,
    check: impl Fn(&T) -> Result<(), String>,
) -> (Vec<T>, Vec<(T, String)>) {
    let (mut ok, mut failed) = (Vec::new(), Vec::new());
    for item in items {
        match check(&item) {
            Ok(()) => ok.push(item),
            Err(why) => failed.push((item, why)),
        }
    }
    (ok, failed)
}

/// The sources whose lock topic exists or could be created, and those whose lock topic
/// the broker refuses for good (an ACL, a name colliding with another topic's, such as
/// `shop.eu` and `shop_eu`). A transient failure keeps the source: the join retries.
pub(super) fn lockable(
    kafka: &crate::kafka::KafkaConfig,
    sources: Vec<PoolSource>,
) -> (Vec<PoolSource>, Vec<(PoolSource, String)>) {
    let creator = match crate::kafka::TopicCreator::new(kafka) {
        Ok(creator) => creator,
        // The join says why, and retries.
        Err(_) => return (sources, Vec::new()),
    };
    partition_failing(sources, |s| {
        match creator.ensure_compacted(&s.lock_topic, "lock") {
            Err(e) if !e.is_transient() => Err(format!("its lock topic {}: {e}", s.lock_topic)),
            _ => Ok(()),
        }
    })
}

/// What a source needs before it may run: a build that honours its Kafka properties;
/// its secrets referenced, or said to be written in.
pub(super) fn prepare(source: &PoolSource) -> Result<()> {
    for key in &source.config.inline_secrets {
        warn!(source = %source.name, key = %key, "a secret is written into the source's file: reference it as \"${{env:VARIABLE}}\" or \"${{file:PATH}}\"");
    }
    crate::kafka::check_properties(&source.config.kafka)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("source {}: kafka.properties", source.name))
}
