//! The control topic (`monitor.control_topic`) as this process knows it: one follower
//! per Kafka client settings and topic for every source of the process (a pool of 200
//! sources reads it once, not 200 times), from its start and as it grows. What it keeps
//! is what a leader acts on: each source's newest pause or resume (`pause`), and the
//! replays asked and not answered yet (`replays`). The console's other records are its
//! audit trail only.

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::Offset;
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::warn;

use crate::kafka::{KafkaConfig, Tailed};
use crate::monitor::control::{PauseRecord, ReplayAsk, ReplayRecord};

/// What this process knows of the control topic.
#[derive(Debug, Clone, Default)]
pub(super) struct Known {
    /// The topic was read to its end once: what is below is the fleet's.
    pub(super) caught_up: bool,
    /// The newest pause or resume of each source.
    pub(super) current: BTreeMap<String, PauseRecord>,
    /// Replays asked and not answered, by their offset (oldest first).
    pub(super) asks: BTreeMap<i64, ReplayAsk>,
    /// Why the topic cannot be read, while it cannot.
    pub(super) unreadable: Option<String>,
    /// It cannot be read for good (refused, not failing): an operator must act.
    pub(super) refused: bool,
}

/// One consumer of a control topic for every source of the process that follows it;
/// it stops with the last handle.
pub(super) struct Follower {
    pub(super) known: watch::Receiver<Known>,
    _stop: DropGuard,
}

/// The followers running, by the Kafka client settings and topic they read with: a
/// source of other credentials has a follower of its own (ACLs are per user).
static FOLLOWERS: LazyLock<Mutex<HashMap<String, Weak<Follower>>>> =
    LazyLock::new(Default::default);

/// The process's follower of `topic` (started here when there is none).
pub(super) fn follower(kafka: &KafkaConfig, topic: &str) -> Arc<Follower> {
    let key = format!(
        "{}\u{0}{:?}\u{0}{topic}",
        kafka.bootstrap_servers, kafka.properties
    );
    let mut followers = FOLLOWERS.lock().expect("control topic followers");
    followers.retain(|_, f| f.strong_count() > 0);
    match followers.get(&key).and_then(Weak::upgrade) {
        Some(f) => f,
        None => {
            let f = Arc::new(Follower::start(kafka, topic));
            followers.insert(key, Arc::downgrade(&f));
            f
        }
    }
}

impl Follower {
    /// Follows `topic` from its start until the last handle is dropped, after making
    /// sure it exists: a missing topic would read as no answer, not as "no pause".
    fn start(kafka: &KafkaConfig, topic: &str) -> Self {
        let (tx, known) = watch::channel(Known::default());
        let stop = CancellationToken::new();
        let guard = stop.clone().drop_guard();
        let (kafka, topic) = (kafka.clone(), topic.to_string());
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
                        Tailed::Record(m) => record(&tx, &name, m),
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
            _stop: guard,
        }
    }
}

/// A record of the control topic: a pause or resume (keyed by its source) is the
/// source's state from now on; a replay asked waits for its answer (`replay/…`, naming
/// the ask); releases of parked aggregates (`parked/…`) are the audit trail only.
fn record(tx: &watch::Sender<Known>, topic: &str, m: &BorrowedMessage<'_>) {
    let Some(key) = m.key().and_then(|k| std::str::from_utf8(k).ok()) else {
        return;
    };
    let payload = m.payload().unwrap_or_default();
    let passed_over = |what: &str| warn!(%topic, offset = m.offset(), key, "a control record under a {what} key that does not read as one: passed over");
    if key.starts_with("replay-ask/") {
        match serde_json::from_slice::<ReplayAsk>(payload) {
            Ok(ask) => tx.send_modify(|k| {
                k.asks.insert(m.offset(), ask);
            }),
            Err(_) => passed_over("replay ask's"),
        }
    } else if key.starts_with("replay/") {
        // Answers of replays run before asks existed name none.
        if let Ok(ReplayRecord { ask: Some(ask), .. }) = serde_json::from_slice(payload) {
            tx.send_if_modified(|k| {
                let before = k.asks.len();
                k.asks.retain(|_, a| a.id != ask);
                k.asks.len() != before
            });
        }
    } else if key.starts_with("parked/") {
    } else {
        match serde_json::from_slice::<PauseRecord>(payload) {
            Ok(record) if record.source == key => tx.send_modify(|k| {
                k.current.insert(key.to_string(), record);
            }),
            _ => passed_over("source's"),
        }
    }
}
