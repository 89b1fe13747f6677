//! Following one partition-0 topic of the router's own from an offset, on a thread of
//! its own: every record, each time the end is reached, and read failures (retried
//! each second) go to the caller until it says stop or `stop` fires. The console's
//! status board and a source's pause follow their topics this way.

use std::ops::ControlFlow;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::{Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;

use super::KafkaConfig;

/// What a follower is told.
pub enum Tailed<'a> {
    Record(&'a BorrowedMessage<'a>),
    /// The end of the partition as it was when asked: everything before is read.
    CaughtUp,
    /// The topic cannot be read now (the consumer, the assignment or a fetch failed).
    Failed(String),
}

/// Follows partition 0 of `topic` from `from` as consumer group `group` (no offsets
/// are committed) until `each` breaks or `stop` fires.
pub fn tail(
    kafka: &KafkaConfig,
    topic: &str,
    group: &str,
    from: Offset,
    stop: CancellationToken,
    mut each: impl FnMut(Tailed<'_>) -> ControlFlow<()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let mut c = super::consumer_config(kafka);
    c.set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        // Made by its writers, never by a follower's lookup.
        .set("allow.auto.create.topics", "false");
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = match c.create() {
            Ok(c) => c,
            Err(e) => {
                let _ = each(Tailed::Failed(e.to_string()));
                return;
            }
        };
        let mut tpl = TopicPartitionList::new();
        if let Err(e) = tpl
            .add_partition_offset(&topic, 0, from)
            .and_then(|()| consumer.assign(&tpl))
        {
            let _ = each(Tailed::Failed(e.to_string()));
            return;
        }
        while !stop.is_cancelled() {
            let flow = match consumer.poll(Duration::from_millis(250)) {
                None => ControlFlow::Continue(()),
                Some(Err(KafkaError::PartitionEOF(_))) => each(Tailed::CaughtUp),
                Some(Err(e)) => {
                    let flow = each(Tailed::Failed(super::without_values(&e)));
                    std::thread::sleep(Duration::from_secs(1));
                    flow
                }
                Some(Ok(m)) => each(Tailed::Record(&m)),
            };
            if flow.is_break() {
                break;
            }
        }
        super::close_in_background(consumer);
    })
}
