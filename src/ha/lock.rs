//! The lock: membership in a consumer group on a one-partition topic; the member the
//! partition is assigned to leads. Kafka's group coordinator decides, so two instances
//! never both believe they lead for longer than a session timeout, and the
//! transactional producer's fencing covers that window.

use std::sync::mpsc::{self, TryRecvError};
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::{oneshot, watch};
use tracing::debug;

use super::HaConfig;
use crate::kafka::{consumer_config, KafkaClientError, KafkaConfig, TopicCreator};
use crate::sink::DeliveryConfig;

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
    /// Prove membership of the current generation with a synchronous offset commit.
    Confirm(oneshot::Sender<Result<(), String>>),
}

/// This instance's membership in the lock group.
pub struct Lock {
    leading: watch::Receiver<bool>,
    requests: Option<mpsc::Sender<Request>>,
    thread: Option<JoinHandle<()>>,
}

/// How often the consumer is polled: rebalances are served from poll.
const POLL: Duration = Duration::from_millis(100);

impl Lock {
    /// Creates the lock topic if missing and joins the group; leadership comes later,
    /// through [`Lock::watch`].
    pub fn join(
        kafka: &KafkaConfig,
        ha: &HaConfig,
        delivery: &DeliveryConfig,
    ) -> Result<Self, LockError> {
        let group = ha.group(delivery);
        let topic = ha.lock_topic.clone();
        let failed = |reason: String| LockError::Join {
            group: group.clone(),
            topic: topic.clone(),
            reason,
        };
        TopicCreator::new(kafka)?.ensure_compacted(&topic, "lock")?;
        let mut c = consumer_config(kafka);
        c.set("group.id", &group)
            .set("client.id", ha.instance_name())
            // Sticky: a standby joining or leaving never moves the lock off its leader.
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set("session.timeout.ms", ha.session_timeout_ms.to_string())
            .set(
                "heartbeat.interval.ms",
                (ha.session_timeout_ms / 5).max(100).to_string(),
            )
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "latest");
        let consumer: BaseConsumer = c.create().map_err(|e| failed(e.to_string()))?;
        consumer
            .subscribe(&[&topic])
            .map_err(|e| failed(e.to_string()))?;
        let (leading_tx, leading) = watch::channel(false);
        let (requests, inbox) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("ha-lock".into())
            .spawn({
                let topic = topic.clone();
                move || hold(consumer, topic, leading_tx, inbox)
            })
            .map_err(|e| failed(e.to_string()))?;
        Ok(Self {
            leading,
            requests: Some(requests),
            thread: Some(thread),
        })
    }

    /// True while the lock partition is assigned to this instance.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Asks the group coordinator whether this instance is still a member of the
    /// current generation (an assignment seen locally may be stale after a pause).
    pub async fn confirm(&self) -> Result<(), String> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .as_ref()
            .ok_or("the lock was released")?
            .send(Request::Confirm(reply))
            .map_err(|_| LockError::Stopped.to_string())?;
        answer.await.map_err(|_| LockError::Stopped.to_string())?
    }

    /// Leaves the group, so a standby gets the lock at once rather than after the
    /// session timeout; waits up to `timeout` for the coordinator to hear it.
    pub async fn release(mut self, timeout: Duration) {
        drop(self.requests.take());
        if let Some(thread) = self.thread.take() {
            let joined = tokio::task::spawn_blocking(move || thread.join());
            let _ = tokio::time::timeout(timeout, joined).await;
        }
    }
}

/// Polls the consumer, publishes whether it owns the lock partition and answers
/// requests, until the `Lock` is dropped; then closes the consumer (leaving the group).
fn hold(
    consumer: BaseConsumer,
    topic: String,
    leading: watch::Sender<bool>,
    inbox: mpsc::Receiver<Request>,
) {
    loop {
        if let Some(Err(e)) = consumer.poll(POLL) {
            debug!(error = %e, "lock consumer");
        }
        let owns = owns_lock(&consumer, &topic);
        leading.send_if_modified(|l| std::mem::replace(l, owns) != owns);
        match inbox.try_recv() {
            Ok(Request::Confirm(reply)) => {
                let _ = reply.send(confirm(&consumer, &topic));
            }
            Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => break,
        }
    }
    leading.send_replace(false);
    // Dropping closes the consumer: it leaves the group and the lock moves on.
    drop(consumer);
}

fn owns_lock(consumer: &BaseConsumer, topic: &str) -> bool {
    !consumer.assignment_lost()
        && consumer
            .assignment()
            .is_ok_and(|a| a.find_partition(topic, 0).is_some())
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
