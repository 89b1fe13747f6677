//! Reading compacted topics back: exactly-once mode's commit markers (the newest record
//! of one key on the checkpoint topic) and Kafka Connect's stored offsets, as a
//! `read_committed` consumer sees them (a record of an aborted or still open
//! transaction is never returned).

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::{KafkaClientError, KafkaConfig, Reader};

/// How long the topic may take to answer in all.
const READ_DEADLINE: Duration = Duration::from_secs(60);

/// When a read that waits says why.
const WARN_AFTER: Duration = Duration::from_secs(5);

/// The newest committed marker of `key` on `topic`'s only partition; `None` when the
/// topic or the key has none.
pub fn last(
    cfg: &KafkaConfig,
    topic: &str,
    key: &str,
) -> Result<Option<Vec<u8>>, KafkaClientError> {
    Ok(newest(cfg, topic, 0, |k| k == key.as_bytes())?.and_then(|r| r.value))
}

/// The newest record of a compacted topic's partition.
#[derive(Debug)]
pub struct Newest {
    /// Its key.
    pub key: Vec<u8>,
    /// Its value; `None` for a tombstone (the key was deleted).
    pub value: Option<Vec<u8>>,
}

/// What one partition of a compacted topic holds for some keys.
#[derive(Debug)]
pub struct KeysRead {
    /// The newest record of each key asked for, in the order asked.
    pub newest: Vec<Option<Newest>>,
    /// The partition's log start offset: above 0, records were deleted from its head
    /// (`DeleteRecords`, or retention on a `compact,delete` topic).
    pub log_start: i64,
}

/// The newest record on `partition` of `topic` whose key `wanted` accepts, as a
/// `read_committed` consumer sees it; `None` when the topic, the partition or such a
/// record does not exist.
pub fn newest(
    cfg: &KafkaConfig,
    topic: &str,
    partition: i32,
    wanted: impl Fn(&[u8]) -> bool,
) -> Result<Option<Newest>, KafkaClientError> {
    let read = read_keys(cfg, topic, partition, 1, |k| wanted(k).then_some(0))?;
    Ok(read.and_then(|mut r| r.newest.pop().flatten()))
}

/// The newest record of each of `keys` on `partition` of `topic`; `None` when the topic
/// or the partition does not exist.
pub fn newest_of_keys(
    cfg: &KafkaConfig,
    topic: &str,
    partition: i32,
    keys: &[&[u8]],
) -> Result<Option<KeysRead>, KafkaClientError> {
    read_keys(cfg, topic, partition, keys.len(), |k| {
        keys.iter().position(|wanted| *wanted == k)
    })
}

/// The newest record of each of `slots` keys (`slot_of` says which key is whose), as a
/// `read_committed` consumer sees them.
///
/// The exactly-once resume calls it after `init_transactions`, so every transaction of
/// ours is decided. The partition's end is asked with `read_uncommitted`: a
/// `read_committed` query answers the last stable offset, which another producer's open
/// transaction on a shared topic holds back — below our newest records. The read then
/// goes on until the position passes that end, waiting for such a transaction to be
/// decided.
fn read_keys(
    cfg: &KafkaConfig,
    topic: &str,
    partition: i32,
    slots: usize,
    slot_of: impl Fn(&[u8]) -> Option<usize>,
) -> Result<Option<KeysRead>, KafkaClientError> {
    let failed = |reason: String| KafkaClientError::ReadBack {
        topic: topic.to_string(),
        reason,
    };
    let mut c = super::consumer_config(cfg);
    c.set("enable.auto.commit", "false")
        // Each fetch at the end (while another producer's transaction holds the stable
        // offset back) would otherwise sit out the default 500 ms.
        .set("fetch.wait.max.ms", "20");
    let consumer =
        |isolation: &str, group: bool| -> Result<BaseConsumer<Reader>, KafkaClientError> {
            let mut c = c.clone();
            // rust-rdkafka's `assign` needs a group; asking the watermarks does not, and a
            // consumer with a group takes 100-200 ms to close — a restart's whole read was
            // 330 ms, 300 of them closing.
            if group {
                c.set("group.id", "outbox-router-checkpoint-reader");
            }
            c.set("isolation.level", isolation)
                .create_with_context(Reader("checkpoint topic"))
                .map_err(|e| failed(e.to_string()))
        };
    let deadline = Instant::now() + READ_DEADLINE;
    let (low, end) = match consumer("read_uncommitted", false)?.fetch_watermarks(
        topic,
        partition,
        Duration::from_secs(10),
    ) {
        Ok(w) => w,
        Err(e) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::UnknownTopicOrPartition) => {
            return Ok(None)
        }
        Err(e) => return Err(failed(format!("watermarks: {e}"))),
    };
    let nothing = || (0..slots).map(|_| None).collect::<Vec<Option<Newest>>>();
    if end <= low {
        return Ok(Some(KeysRead {
            newest: nothing(),
            log_start: low,
        }));
    }
    let reader = ClosedAside(Some(consumer("read_committed", true)?));
    let (warn_at, mut warned) = (Instant::now() + WARN_AFTER, false);
    // Each commit adds a marker and a transaction control record; other sources'
    // markers may be in between. Look back a little, then further.
    for back in [512, 16_384, i64::MAX] {
        let start = end.saturating_sub(back).max(low);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(start))
            .map_err(|e| failed(e.to_string()))?;
        reader.assign(&tpl).map_err(|e| failed(e.to_string()))?;
        let mut found = nothing();
        // The position steps over control records and aborted records too, so it
        // reaches `end` even when the partition ends in a commit marker.
        while !position_reached(&reader, topic, partition, end) {
            if !warned && Instant::now() > warn_at {
                warned = true;
                tracing::warn!(topic, partition, end, position = ?position(&reader, topic, partition), "still reading: another producer's transaction open on the topic hides what follows it; waiting until it commits or aborts");
            }
            if Instant::now() > deadline {
                return Err(failed(format!(
                    "partition {partition} not read up to offset {end} within {} s: a transaction another producer holds open on it hides what follows (one left open by a dead producer is aborted after its transaction.timeout.ms; a checkpoint topic per router avoids the wait)",
                    READ_DEADLINE.as_secs()
                )));
            }
            // Short: the position steps over the partition's last control record (a
            // commit's) without a message to wake a poll, which would sit out its
            // whole timeout — 100 ms of every restart.
            match reader.poll(Duration::from_millis(5)) {
                Some(Err(e)) => return Err(failed(e.to_string())),
                Some(Ok(m)) => {
                    if let Some(slot) = m.key().and_then(&slot_of) {
                        found[slot] = Some(Newest {
                            key: m.key().unwrap_or_default().to_vec(),
                            value: m.payload().map(<[u8]>::to_vec),
                        });
                    }
                }
                None => {}
            }
        }
        if found.iter().all(Option::is_some) || start == low {
            return Ok(Some(KeysRead {
                newest: found,
                log_start: low,
            }));
        }
    }
    unreachable!("the last look back starts at the log start")
}

/// A consumer closed on a thread of its own when dropped: its group's close (nothing to
/// commit, no partitions to give back) takes 100-200 ms the caller need not wait for.
struct ClosedAside(Option<BaseConsumer<Reader>>);

impl std::ops::Deref for ClosedAside {
    type Target = BaseConsumer<Reader>;

    fn deref(&self) -> &Self::Target {
        self.0.as_ref().expect("taken only when dropped")
    }
}

impl Drop for ClosedAside {
    fn drop(&mut self) {
        if let Some(consumer) = self.0.take() {
            std::thread::spawn(move || drop(consumer));
        }
    }
}

/// The consumer's position on `partition`, when it has one.
fn position(consumer: &BaseConsumer<Reader>, topic: &str, partition: i32) -> Option<i64> {
    let tpl = consumer.position().ok()?;
    match tpl.find_partition(topic, partition)?.offset() {
        Offset::Offset(n) => Some(n),
        _ => None,
    }
}

/// Whether the consumer's position on `partition` is at or past `end` (an unknown
/// position, before anything was read, is not).
fn position_reached(
    consumer: &BaseConsumer<Reader>,
    topic: &str,
    partition: i32,
    end: i64,
) -> bool {
    position(consumer, topic, partition).is_some_and(|n| n >= end)
}
