//! An operator's pause: a fact of the fleet, on the control topic (`monitor.control_topic`,
//! one partition, kept forever: the newest record per source is its state, and every
//! record is the console's audit trail of who paused and resumed what, when and why). Every instance of a source
//! follows it from its start; the leader stops streaming when its source is paused —
//! drained, every record read acknowledged and checkpointed, so the position stays
//! exactly where the stream stopped — and starts again from that checkpoint on a resume.
//! An instance that takes over reads the topic to its end before it streams: a paused
//! source stays paused across a takeover.

use std::ops::ControlFlow;
use std::time::Duration;

use rdkafka::message::Message;
use rdkafka::Offset;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::PipelineError;
use crate::kafka::{KafkaConfig, Tailed};
use crate::monitor::control::PauseRecord;

/// What this instance knows of its source's pause.
#[derive(Debug, Clone, Default)]
struct Known {
    /// The topic was read to its end once: `current` is the fleet's.
    caught_up: bool,
    /// The newest record for the source, if any.
    current: Option<PauseRecord>,
    /// Why the topic cannot be read, while it cannot.
    unreadable: Option<String>,
    /// It cannot be read for good (refused, not failing): an operator must act.
    refused: bool,
}

/// A source's pause as the control topic says it, kept current by a follower.
#[derive(Clone)]
pub struct Pauses {
    known: watch::Receiver<Known>,
    topic: String,
}

impl Pauses {
    /// Follows `topic` for `source` from its start until `stop`, after making sure
    /// it exists: a missing topic would read as no answer, not as "no pause".
    pub fn follow(kafka: &KafkaConfig, topic: &str, source: &str, stop: CancellationToken) -> Self {
        let (tx, known) = watch::channel(Known::default());
        let followed = topic.to_string();
        let (kafka, topic, source) = (kafka.clone(), topic.to_string(), source.to_string());
        tokio::spawn(async move {
            loop {
                let (k, t) = (kafka.clone(), topic.clone());
                let made = tokio::task::spawn_blocking(move || {
                    crate::kafka::TopicCreator::new(&k)
                        .and_then(|c| c.ensure_kept_forever(&t, "control"))
                })
                .await;
                match made {
                    Ok(Ok(())) => break,
                    Ok(Err(e)) => tx.send_modify(|k| {
                        k.refused = !e.is_transient();
                        k.unreadable = Some(e.to_string());
                    }),
                    Err(e) => tx.send_modify(|k| k.unreadable = Some(e.to_string())),
                }
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                }
            }
            let name = topic.clone();
            crate::kafka::tail(
                &kafka,
                &topic,
                "outbox-router-control",
                Offset::Beginning,
                stop,
                move |t| {
                    match t {
                        Tailed::CaughtUp => {
                            tx.send_if_modified(|k| {
                                let changed = !k.caught_up || k.unreadable.is_some();
                                k.caught_up = true;
                                k.unreadable = None;
                                changed
                            });
                        }
                        Tailed::Failed(why) => tx.send_modify(|k| {
                            k.refused = why.contains("uthorization");
                            k.unreadable = Some(why);
                        }),
                        Tailed::Record(m) if m.key() == Some(source.as_bytes()) => {
                            match m.payload().map(serde_json::from_slice::<PauseRecord>) {
                                Some(Ok(record)) => tx.send_modify(|k| k.current = Some(record)),
                                _ => {
                                    warn!(topic = %name, offset = m.offset(), "a control record for this source that is not a pause or resume: passed over")
                                }
                            }
                        }
                        Tailed::Record(_) => {}
                    }
                    match tx.is_closed() {
                        true => ControlFlow::Break(()),
                        false => ControlFlow::Continue(()),
                    }
                },
            );
        });
        Self {
            known,
            topic: followed,
        }
    }

    /// The pause in force, once the topic was read to its end; waits for that (until
    /// `stop`: then `Ok(None)`). A topic that cannot be read is logged while it lasts;
    /// one refused for good (authorization) is an error naming the fix.
    pub async fn in_force(
        &self,
        stop: &CancellationToken,
    ) -> Result<Option<Option<PauseRecord>>, PipelineError> {
        let mut known = self.known.clone();
        let mut warned = false;
        loop {
            {
                let k = known.borrow_and_update();
                if k.caught_up {
                    return Ok(Some(k.current.clone().filter(|p| p.paused)));
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
        let mut known = self.known.clone();
        tokio::select! {
            _ = known.wait_for(|k| !k.current.as_ref().is_some_and(|p| p.paused)) => {}
            _ = stop.cancelled() => {}
        }
    }

    /// Waits until the source is paused; the pause.
    pub async fn until_paused(&self) -> Option<PauseRecord> {
        let mut known = self.known.clone();
        let k = known
            .wait_for(|k| k.current.as_ref().is_some_and(|p| p.paused))
            .await
            .ok()?;
        k.current.clone()
    }
}
