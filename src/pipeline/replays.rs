//! Replays asked on the control topic, carried out by the source's leader: an ask sent
//! to any instance's console reaches whichever instance leads, and is answered there
//! with a `ReplayRecord` naming it. One at a time, oldest first, while this instance
//! leads; an ask whose leader stopped before answering is carried out by the next one
//! (a replay sends duplicates on purpose, so a second partial run harms nothing), and
//! one that no leader took up for `ASK_FRESH` is answered "not carried out", never run
//! late.

use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::control::{follower, Follower};
use crate::config::Config;
use crate::kafka::KafkaConfig;
use crate::monitor::control::{self, ReplayAsk, ReplayRecord};

/// How long an ask waits for a leader before it is answered "not carried out".
pub const ASK_FRESH: Duration = Duration::from_secs(600);

/// Carries out a replay for a source (given by the binary: the operator commands know
/// the outbox tables; the pipeline does not depend on them).
pub trait Replayer: Send + Sync {
    fn replay<'a>(
        &'a self,
        config: &'a Config,
        ask: &'a ReplayAsk,
    ) -> BoxFuture<'a, Result<ReplayDone, String>>;
}

/// What a replay did.
#[derive(Debug, Clone)]
pub struct ReplayDone {
    /// The replay's id: the replay header of every record it sent.
    pub id: String,
    /// Records sent and acknowledged.
    pub count: u64,
    /// As its audit entry says it.
    pub outcome: String,
}

/// What a leader does for the fleet beside streaming.
#[derive(Clone, Default)]
pub struct LeaderDuties {
    /// Replays asked on the control topic (`None`: not carried out here).
    pub replayer: Option<Arc<dyn Replayer>>,
    /// The process's traces, when `[monitor.tracing]` is on: the events a leader streams
    /// get spans.
    pub tracing: Option<Arc<crate::monitor::traces::Tracing>>,
}

/// A source's replays asked on the control topic.
#[derive(Clone)]
pub struct Replays {
    follower: Arc<Follower>,
    kafka: KafkaConfig,
    topic: String,
    source: String,
    instance: String,
    replayer: Arc<dyn Replayer>,
}

impl Replays {
    /// `source`'s asks on `topic`, carried out by `replayer` as `instance`.
    pub fn follow(
        kafka: &KafkaConfig,
        topic: &str,
        source: &str,
        instance: &str,
        replayer: Arc<dyn Replayer>,
    ) -> Self {
        Self {
            follower: follower(kafka, topic),
            kafka: kafka.clone(),
            topic: topic.to_string(),
            source: source.to_string(),
            instance: instance.to_string(),
            replayer,
        }
    }

    /// Carries out the source's unanswered asks, oldest first, until `stop` (and then
    /// never returns: the caller's other branch ends the leadership).
    pub async fn carry_out(&self, config: &Config, stop: &CancellationToken) -> Infallible {
        let mut known = self.follower.known.clone();
        // Answered here but perhaps not read back yet: never carried out twice.
        let mut done: HashSet<String> = HashSet::new();
        loop {
            let next = {
                let k = known.borrow_and_update();
                k.caught_up
                    .then(|| {
                        k.asks
                            .values()
                            .find(|a| a.source == self.source && !done.contains(&a.id))
                            .cloned()
                    })
                    .flatten()
            };
            match next {
                Some(ask) => {
                    done.insert(ask.id.clone());
                    tokio::select! {
                        () = self.one(config, &ask) => {}
                        _ = stop.cancelled() => {}
                    }
                }
                None => tokio::select! {
                    changed = known.changed() => if changed.is_err() { break },
                    _ = stop.cancelled() => break,
                },
            }
            if stop.is_cancelled() {
                break;
            }
        }
        std::future::pending().await
    }

    /// Carries out `ask` (or says why not) and answers it on the control topic.
    async fn one(&self, config: &Config, ask: &ReplayAsk) {
        let age = humantime::parse_rfc3339(&ask.at)
            .ok()
            .and_then(|at| at.elapsed().ok())
            .unwrap_or_default();
        let (id, count, outcome) = if age > ASK_FRESH {
            warn!(ask = %ask.id, by = %ask.by, asked_at = %ask.at, "a replay asked on the control topic waited longer than {} s for a leader: answered, not carried out", ASK_FRESH.as_secs());
            let outcome = format!("not carried out: asked at {}, {} s before a leader took it up (at most {} s); ask again if it is still wanted", ask.at, age.as_secs(), ASK_FRESH.as_secs());
            (String::new(), 0, outcome)
        } else {
            info!(ask = %ask.id, by = %ask.by, reason = %ask.reason, "carrying out a replay asked on the control topic");
            match self.replayer.replay(config, ask).await {
                Ok(done) => {
                    info!(ask = %ask.id, replay = %done.id, count = done.count, outcome = %done.outcome, "replay carried out");
                    (done.id, done.count, done.outcome)
                }
                Err(why) => {
                    warn!(ask = %ask.id, error = %why, "a replay asked on the control topic failed");
                    (String::new(), 0, format!("failed: {why}"))
                }
            }
        };
        let answer = ReplayRecord {
            action: "replay".into(),
            source: ask.source.clone(),
            by: ask.by.clone(),
            reason: ask.reason.clone(),
            at: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            id,
            event_ids: ask.which.event_ids.clone(),
            window: ask.window.clone(),
            count,
            outcome,
            ask: Some(ask.id.clone()),
            leader: Some(self.instance.clone()),
        };
        for attempt in 1..=3 {
            match control::write(&self.kafka, &self.topic, &answer).await {
                Ok(_) => return,
                Err(why) => {
                    warn!(topic = %self.topic, ask = %ask.id, attempt, error = %why, "the answer to a replay ask is not on the control topic yet (the replay's own audit trail has it)");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
            }
        }
    }
}
