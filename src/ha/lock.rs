//! The lock: membership in a consumer group on a one-partition topic; the member the
//! partition is assigned to leads. Kafka's group coordinator decides, so two instances
//! never both believe they lead for longer than a session timeout, and the
//! transactional producer's fencing covers that window.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::{oneshot, watch};
use tracing::debug;

use super::HaConfig;
use crate::kafka::{consumer_config, KafkaClientError, KafkaConfig, TopicCreator};

/// Why the lock group cannot be joined or asked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot join the lock group {group} on topic {topic}: {reason} (check kafka.bootstrap_servers and that this user may use consumer group {group})")]
    Join {
        group: String,
        topic: String,
        reason: String,
    },
    #[error("cannot create the lock topic: {0}")]
    Topic(#[from] KafkaClientError),
    #[error("the lock's consumer thread stopped")]
    Stopped,
}

/// Requests to the thread that owns the consumer.
enum Request {
    /// Prove membership of the current generation with a synchronous offset commit
    /// while owning the topic's partition.
    Confirm(String, oneshot::Sender<Result<(), String>>),
    /// Subscribe to exactly these lock topics: a pool's sources added or removed. The
    /// watches of topics new to the consumer come with them.
    Subscribe {
        topics: Vec<String>,
        added: Vec<(String, watch::Sender<bool>)>,
        reply: oneshot::Sender<Result<(), String>>,
    },
}

/// Who joins a lock group, and for which lock topics (one partition each: a
/// standby's one lock, or a pool's one per source).
pub struct LockGroup {
    pub group: String,
    pub topics: Vec<String>,
    /// The member's `client.id`, in the group's description.
    pub instance: String,
    pub session_timeout_ms: u64,
}

/// This instance's membership in a lock group.
pub struct Lock {
    /// One watch per lock topic: true while its partition is assigned to this instance.
    leading: Mutex<BTreeMap<String, watch::Receiver<bool>>>,
    group: String,
    requests: Mutex<Option<mpsc::Sender<Request>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// One lock topic of a group this instance joined: the right to lead one source.
#[derive(Clone)]
pub struct Lease {
    lock: Arc<Lock>,
    topic: String,
}

/// How often the consumer is polled: rebalances are served from poll.
const POLL: Duration = Duration::from_millis(100);

impl Lock {
    /// `[ha]`'s lock: creates the lock topic if missing and joins the group; leadership
    /// comes later, through [`Lease::watch`].
    pub fn join(
        kafka: &KafkaConfig,
        ha: &HaConfig,
        transactional_id: &str,
    ) -> Result<Lease, LockError> {
        let group = LockGroup {
            group: ha.group(transactional_id),
            topics: vec![ha.lock_topic.clone()],
            instance: ha.instance_name(),
            session_timeout_ms: ha.session_timeout_ms,
        };
        let lock = Arc::new(Self::join_group(kafka, &group)?);
        Ok(Lease {
            lock,
            topic: ha.lock_topic.clone(),
        })
    }

    /// Creates the group's lock topics if missing and joins it; which of them this
    /// instance leads comes later, through each [`Lease::watch`].
    pub fn join_group(kafka: &KafkaConfig, spec: &LockGroup) -> Result<Self, LockError> {
        let failed = |reason: String| LockError::Join {
            group: spec.group.clone(),
            topic: spec.topics.join(", "),
            reason,
        };
        let creator = TopicCreator::new(kafka)?;
        for topic in &spec.topics {
            creator.ensure_compacted(topic, "lock")?;
        }
        let mut c = consumer_config(kafka);
        c.set("group.id", &spec.group)
            .set("client.id", &spec.instance)
            // Sticky: a member joining or leaving never moves a lock off its leader.
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set("session.timeout.ms", spec.session_timeout_ms.to_string())
            .set(
                "heartbeat.interval.ms",
                (spec.session_timeout_ms / 5).max(100).to_string(),
            )
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "latest");
        let consumer: BaseConsumer = c.create().map_err(|e| failed(e.to_string()))?;
        let topics: Vec<&str> = spec.topics.iter().map(String::as_str).collect();
        consumer
            .subscribe(&topics)
            .map_err(|e| failed(e.to_string()))?;
        let (senders, leading): (BTreeMap<_, _>, BTreeMap<_, _>) = spec
            .topics
            .iter()
            .map(|t| {
                let (tx, rx) = watch::channel(false);
                ((t.clone(), tx), (t.clone(), rx))
            })
            .unzip();
        let (requests, inbox) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("ha-lock".into())
            .spawn(move || hold(consumer, senders, inbox))
            .map_err(|e| failed(e.to_string()))?;
        Ok(Self {
            leading: Mutex::new(leading),
            group: spec.group.clone(),
            requests: Mutex::new(Some(requests)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Asks the group coordinator whether this instance is still a member of the
    /// current generation and owns `topic`'s partition (an assignment seen locally may
    /// be stale after a pause).
    async fn confirm(&self, topic: &str) -> Result<(), String> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .lock()
            .expect("lock requests")
            .as_ref()
            .ok_or("the lock was released")?
            .send(Request::Confirm(topic.to_string(), reply))
            .map_err(|_| LockError::Stopped.to_string())?;
        answer.await.map_err(|_| LockError::Stopped.to_string())?
    }

    /// Subscribes to exactly `topics` (creating the new ones): a pool's sources added
    /// or removed. A removed source must have stopped first; the group's cooperative
    /// rebalance leaves every other topic where it is.
    pub async fn resubscribe(
        &self,
        kafka: &KafkaConfig,
        topics: &[String],
    ) -> Result<(), LockError> {
        let failed = |reason: String| LockError::Join {
            group: self.group.clone(),
            topic: topics.join(", "),
            reason,
        };
        // Tests refuse a reload's subscription (`lock.resubscribe_refused`) the way an
        // unreachable coordinator would.
        fail::fail_point!("lock.resubscribe_refused", |_| Err(failed(
            "refused (failpoint)".into()
        )));
        let known: Vec<String> = self
            .leading
            .lock()
            .expect("lock watches")
            .keys()
            .cloned()
            .collect();
        let new: Vec<&String> = topics.iter().filter(|t| !known.contains(t)).collect();
        if !new.is_empty() {
            let creator = TopicCreator::new(kafka)?;
            for topic in &new {
                creator.ensure_compacted(topic, "lock")?;
            }
        }
        let (added, receivers): (Vec<_>, Vec<_>) = new
            .iter()
            .map(|t| {
                let (tx, rx) = watch::channel(false);
                (((*t).clone(), tx), ((*t).clone(), rx))
            })
            .unzip();
        let (reply, answer) = oneshot::channel();
        self.requests
            .lock()
            .expect("lock requests")
            .as_ref()
            .ok_or_else(|| failed("the lock was released".into()))?
            .send(Request::Subscribe {
                topics: topics.to_vec(),
                added,
                reply,
            })
            .map_err(|_| LockError::Stopped)?;
        answer
            .await
            .map_err(|_| LockError::Stopped)?
            .map_err(failed)?;
        let mut leading = self.leading.lock().expect("lock watches");
        leading.retain(|t, _| topics.contains(t));
        leading.extend(receivers);
        Ok(())
    }

    /// Leaves the group, so other members get the locks at once rather than after the
    /// session timeout; waits up to `timeout` for the coordinator to hear it.
    pub async fn release(&self, timeout: Duration) {
        drop(self.requests.lock().expect("lock requests").take());
        let thread = self.thread.lock().expect("lock thread").take();
        if let Some(thread) = thread {
            let joined = tokio::task::spawn_blocking(move || thread.join());
            let _ = tokio::time::timeout(timeout, joined).await;
        }
    }
}

impl Lease {
    /// `topic`'s lease in `lock`, which must have joined with it.
    pub fn of(lock: &Arc<Lock>, topic: &str) -> Option<Self> {
        let known = lock
            .leading
            .lock()
            .expect("lock watches")
            .contains_key(topic);
        known.then(|| Self {
            lock: lock.clone(),
            topic: topic.to_string(),
        })
    }

    /// True while the lock partition is assigned to this instance.
    pub fn watch(&self) -> watch::Receiver<bool> {
        let leading = self.lock.leading.lock().expect("lock watches");
        match leading.get(&self.topic) {
            Some(watch) => watch.clone(),
            // Unsubscribed: never ours again.
            None => watch::channel(false).1,
        }
    }

    /// The lock topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Asks the group coordinator whether this instance is still a member of the
    /// current generation and owns the lock (an assignment seen locally may be stale
    /// after a pause).
    pub async fn confirm(&self) -> Result<(), String> {
        self.lock.confirm(&self.topic).await
    }

    /// Leaves the group (every lease of it): see [`Lock::release`].
    pub async fn release(&self, timeout: Duration) {
        self.lock.release(timeout).await
    }
}

/// Polls the consumer, publishes which lock partitions it owns and answers requests,
/// until the `Lock` is released or dropped; then closes the consumer (leaving the group).
fn hold(
    consumer: BaseConsumer,
    mut leading: BTreeMap<String, watch::Sender<bool>>,
    inbox: mpsc::Receiver<Request>,
) {
    loop {
        if let Some(Err(e)) = consumer.poll(POLL) {
            debug!(error = %e, "lock consumer");
        }
        // One copy of the assignment for every lock topic: a pool's lock thread looks at
        // tens of them ten times a second.
        let assigned = assigned_locks(&consumer);
        for (topic, leads) in &leading {
            let owns = assigned
                .as_ref()
                .is_some_and(|a| a.find_partition(topic, 0).is_some());
            leads.send_if_modified(|l| std::mem::replace(l, owns) != owns);
        }
        match inbox.try_recv() {
            Ok(Request::Confirm(topic, reply)) => {
                let _ = reply.send(confirm(&consumer, &topic));
            }
            Ok(Request::Subscribe {
                topics,
                added,
                reply,
            }) => {
                for (topic, leads) in &leading {
                    if !topics.contains(topic) {
                        leads.send_replace(false);
                    }
                }
                leading.retain(|t, _| topics.contains(t));
                leading.extend(added);
                let names: Vec<&str> = topics.iter().map(String::as_str).collect();
                let _ = reply.send(consumer.subscribe(&names).map_err(|e| e.to_string()));
            }
            Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => break,
        }
    }
    for leads in leading.values() {
        leads.send_replace(false);
    }
    // Dropping closes the consumer: it leaves the group and the locks move on.
    drop(consumer);
}

/// The lock partitions assigned to this instance, unless the assignment was lost.
fn assigned_locks(consumer: &BaseConsumer) -> Option<TopicPartitionList> {
    match consumer.assignment_lost() {
        true => None,
        false => consumer.assignment().ok(),
    }
}

fn owns_lock(consumer: &BaseConsumer, topic: &str) -> bool {
    assigned_locks(consumer).is_some_and(|a| a.find_partition(topic, 0).is_some())
}

/// An offset commit checks the member id and generation: it fails once the coordinator
/// has moved on without us.
fn confirm(consumer: &BaseConsumer, topic: &str) -> Result<(), String> {
    if !owns_lock(consumer, topic) {
        return Err("the lock partition is not assigned to this instance".into());
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(0))
        .map_err(|e| e.to_string())?;
    consumer
        .commit(&tpl, CommitMode::Sync)
        .map_err(|e| format!("the group coordinator did not confirm membership: {e}"))
}
