//! Following one partition-0 topic of the router's own from an offset, on a thread of
//! its own: every record, each time the end is reached, and read failures (retried
//! each second) go to the caller until it says stop or `stop` fires. The console's
//! status board and a source's pause follow their topics this way.

use std::ops::ControlFlow;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
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
        .set("allow.auto.create.topics", "false")
        // A start that retention passed before the first fetch reads from what is left,
        // never from the end (which would pass over records silently).
        .set("auto.offset.reset", "earliest")
        // Small topics of small records: librdkafka's read-ahead defaults (64 MB queued,
        // 1 MB a fetch) cost a process about 10 MB of resident memory for each.
        .set("queued.max.messages.kbytes", "2048")
        .set("fetch.message.max.bytes", "262144");
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer<super::Reader> =
            match c.create_with_context(super::Reader("followed topic")) {
                Ok(c) => c,
                Err(e) => {
                    let _ = each(Tailed::Failed(e.to_string()));
                    return;
                }
            };
        // The partition's range as it is now, asked for (one ListOffsets) before the
        // assignment: the start is then a concrete offset (a logical one is looked up
        // again by the fetcher, which cost about half a second on every start — and a
        // router reads its control topic to the end before it streams), and the end
        // says when everything there was is read: at its last record, or at once when
        // there is none. The end-of-partition event still counts, should the last
        // offset not be a record (compacted away, a transaction marker).
        let range = consumer
            .fetch_watermarks(&topic, 0, Duration::from_secs(5))
            .ok();
        let start = match (from, range) {
            (Offset::Beginning, Some((low, _))) => Offset::Offset(low),
            (Offset::End, Some((_, high))) => Offset::Offset(high),
            (from, _) => from,
        };
        let mut tpl = TopicPartitionList::new();
        if let Err(e) = tpl
            .add_partition_offset(&topic, 0, start)
            .and_then(|()| consumer.assign(&tpl))
        {
            let _ = each(Tailed::Failed(e.to_string()));
            return;
        }
        let mut last = match (start, range) {
            (Offset::Offset(at), Some((_, high))) if high <= at => {
                if each(Tailed::CaughtUp).is_break() {
                    super::close_in_background(consumer);
                    return;
                }
                None
            }
            (_, Some((_, high))) => Some(high - 1),
            _ => None,
        };
        while !stop.is_cancelled() {
            let flow = match consumer.poll(Duration::from_millis(250)) {
                None => ControlFlow::Continue(()),
                Some(Err(KafkaError::PartitionEOF(_))) => each(Tailed::CaughtUp),
                Some(Err(e)) => {
                    let flow = each(Tailed::Failed(super::without_values(&e)));
                    std::thread::sleep(Duration::from_secs(1));
                    flow
                }
                Some(Ok(m)) => match each(Tailed::Record(&m)) {
                    ControlFlow::Continue(()) if last.is_some_and(|l| m.offset() >= l) => {
                        last = None;
                        each(Tailed::CaughtUp)
                    }
                    flow => flow,
                },
            };
            if flow.is_break() {
                break;
            }
        }
        super::close_in_background(consumer);
    })
}
