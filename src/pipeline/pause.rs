//! An operator's pause: a fact of the fleet, on the control topic (`monitor.control_topic`,
//! one partition, kept forever: the newest record per source is its state, and every
//! record is the console's audit trail of who paused and resumed what, when and why).
//! Every instance of a source follows it from its start (one consumer per process, for
//! all its sources); the leader stops streaming when its source is paused —
//! drained, every record read acknowledged and checkpointed, so the position stays
//! exactly where the stream stopped — and starts again from that checkpoint on a resume.
//! An instance that takes over reads the topic to its end before it streams: a paused
//! source stays paused across a takeover.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::control::{follower, Follower, Known};
use super::PipelineError;
use crate::kafka::KafkaConfig;
use crate::monitor::control::PauseRecord;

/// A source's pause as the control topic says it, kept current by the process's
/// follower of that topic.
#[derive(Clone)]
pub struct Pauses {
    follower: Arc<Follower>,
    topic: String,
    source: String,
}

impl Pauses {
    /// `source`'s pauses on `topic`, followed from its start by the process's follower
    /// of it (started here when there is none).
    pub fn follow(kafka: &KafkaConfig, topic: &str, source: &str) -> Self {
        Self {
            follower: follower(kafka, topic),
            topic: topic.to_string(),
            source: source.to_string(),
        }
    }

    /// The source's newest record when it is a pause.
    fn paused(&self, k: &Known) -> Option<PauseRecord> {
        k.current.get(&self.source).filter(|p| p.paused).cloned()
    }

    /// The pause in force, once the topic was read to its end; waits for that (until
    /// `stop`: then `Ok(None)`). A topic that cannot be read is logged while it lasts;
    /// one refused for good (authorization) is an error naming the fix.
    pub async fn in_force(
        &self,
        stop: &CancellationToken,
    ) -> Result<Option<Option<PauseRecord>>, PipelineError> {
        let mut known = self.follower.known.clone();
        let mut warned = false;
        loop {
            {
                let k = known.borrow_and_update();
                if k.caught_up {
                    return Ok(Some(self.paused(&k)));
                }
                if let (true, Some(why)) = (k.refused, &k.unreadable) {
                    return Err(PipelineError::ControlTopic {
                        topic: self.topic.clone(),
                        reason: why.clone(),
                    });
                }
                if let (Some(why), false) = (&k.unreadable, warned) {
                    warn!(reason = %why, "cannot read the control topic: not streaming until it is read (an operator's pause must not be missed)");
                    warned = true;
                }
            }
            tokio::select! {
                changed = known.changed() => if changed.is_err() { return Ok(None) },
                _ = stop.cancelled() => return Ok(None),
            }
        }
    }

    /// Waits until the source is resumed (or `stop`).
    pub async fn until_resumed(&self, stop: &CancellationToken) {
        let mut known = self.follower.known.clone();
        tokio::select! {
            _ = known.wait_for(|k| self.paused(k).is_none()) => {}
            _ = stop.cancelled() => {}
        }
    }

    /// Waits until the source is paused; the pause.
    pub async fn until_paused(&self) -> Option<PauseRecord> {
        let mut known = self.follower.known.clone();
        let k = known.wait_for(|k| self.paused(k).is_some()).await.ok()?;
        self.paused(&k)
    }
}
