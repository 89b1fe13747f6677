//! Reading what a topic holds from a point in time to its end, as a `read_committed`
//! consumer sees it: `reconcile` compares it with the outbox table, so it asks Kafka
//! (ListOffsets by timestamp, then the records), never the router's bookkeeping.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::{KafkaClientError, KafkaConfig};
use crate::progress::CommandProgress;

/// A partition that makes no progress this long stops the scan.
const STALL: Duration = Duration::from_secs(60);

/// A consumer closed in the background when dropped (`close_in_background`).
struct Detached(Option<BaseConsumer<super::Reader>>);

impl Drop for Detached {
    fn drop(&mut self) {
        if let Some(consumer) = self.0.take() {
            super::close_in_background(consumer);
        }
    }
}

/// What a scan read.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scanned {
    /// Partitions read.
    pub partitions: usize,
    /// Records handed to the caller.
    pub records: u64,
}

/// Calls `each` with every record of `topics` (all partitions; `each` gets the topic's
/// index) from the first one with a timestamp at or after `since_ms` up to the end each
/// partition had when the scan started. A topic that does not exist holds nothing. One
/// consumer reads them all: each request covers every partition. `task` names the
/// progress it reports.
pub fn scan(
    cfg: &KafkaConfig,
    task: &'static str,
    topics: &[String],
    since_ms: i64,
    mut each: impl FnMut(usize, &BorrowedMessage<'_>),
) -> Result<Scanned, KafkaClientError> {
    let failed = |reason: String| KafkaClientError::ReadBack {
        topic: topics.join(","),
        reason,
    };
    let mut c = super::consumer_config(cfg);
    c.set("group.id", "outbox-router-reconcile")
        // A topic that does not exist is read as empty, never created by the lookup.
        .set("allow.auto.create.topics", "false")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        // Hundreds of partitions are read at once: bound what is fetched ahead (librdkafka
        // defaults: 1 MB a partition, 64 MB queued).
        .set("fetch.message.max.bytes", "262144")
        .set("queued.max.messages.kbytes", "16384");
    let consumer = |isolation: &str| -> Result<BaseConsumer<super::Reader>, KafkaClientError> {
        c.clone()
            .set("isolation.level", isolation)
            .create_with_context(super::Reader("topic scan"))
            .map_err(|e| failed(e.to_string()))
    };
    let reader = Detached(Some(consumer("read_committed")?));
    let reader = reader.0.as_ref().expect("set above");
    let mut all = TopicPartitionList::new();
    let mut scanned = Scanned::default();
    for topic in topics {
        let metadata = reader
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .map_err(|e| failed(format!("metadata of {topic}: {e}")))?;
        let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
            continue;
        };
        if t.error()
            .is_some_and(|e| RDKafkaErrorCode::from(e) == RDKafkaErrorCode::UnknownTopicOrPartition)
        {
            continue;
        }
        for p in t.partitions() {
            all.add_partition_offset(topic, p.id(), Offset::End)
                .map_err(|e| failed(e.to_string()))?;
            scanned.partitions += 1;
        }
    }
    if all.count() == 0 {
        return Ok(scanned);
    }
    // The end as written, not the last stable offset a read_committed query answers
    // (an open transaction elsewhere would hide our records behind it).
    let ends_list = Detached(Some(consumer("read_uncommitted")?))
        .0
        .as_ref()
        .expect("set above")
        .offsets_for_times(all.clone(), Duration::from_secs(30))
        .map_err(|e| failed(format!("end offsets: {e}")))?;
    let mut ends: HashMap<(String, i32), i64> = HashMap::new();
    let mut by_time = TopicPartitionList::new();
    for e in ends_list.elements() {
        if let Offset::Offset(end) = e.offset() {
            if end > 0 {
                ends.insert((e.topic().to_string(), e.partition()), end);
                by_time
                    .add_partition_offset(e.topic(), e.partition(), Offset::Offset(since_ms))
                    .map_err(|e| failed(e.to_string()))?;
            }
        }
    }
    if ends.is_empty() {
        return Ok(scanned);
    }
    let starts = reader
        .offsets_for_times(by_time, Duration::from_secs(30))
        .map_err(|e| failed(format!("offsets for time {since_ms}: {e}")))?;
    let mut assign = TopicPartitionList::new();
    // Offsets to read (transaction markers included: an upper bound of the records).
    let mut total = 0u64;
    for e in starts.elements() {
        let key = (e.topic().to_string(), e.partition());
        // No record at or after the time: nothing to read there.
        match e.offset() {
            Offset::Offset(start) if start < ends[&key] => {
                total += (ends[&key] - start) as u64;
                assign
                    .add_partition_offset(e.topic(), e.partition(), Offset::Offset(start))
                    .map_err(|e| failed(e.to_string()))?;
            }
            _ => {
                ends.remove(&key);
            }
        }
    }
    reader.assign(&assign).map_err(|e| failed(e.to_string()))?;
    let index: HashMap<&str, usize> = topics
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    let mut report = CommandProgress::new(task, Some(total));
    let mut progress = Instant::now();
    let mut checked = Instant::now();
    while !ends.is_empty() {
        match reader.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                progress = Instant::now();
                scanned.records += 1;
                report.add(1);
                let key = (m.topic().to_string(), m.partition());
                let next = m.offset() + 1;
                if let Some(&i) = index.get(m.topic()) {
                    each(i, &m);
                }
                if ends.get(&key).is_some_and(|end| next >= *end) {
                    ends.remove(&key);
                }
                continue;
            }
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => return Err(failed(e.to_string())),
        }
        // The position also steps over control records and aborted transactions, which
        // are never handed out: a partition ending in them is done at its position.
        if checked.elapsed() >= Duration::from_millis(100) {
            checked = Instant::now();
            let positions = reader.position().map_err(|e| failed(e.to_string()))?;
            for e in positions.elements() {
                if let Offset::Offset(at) = e.offset() {
                    let key = (e.topic().to_string(), e.partition());
                    if ends.get(&key).is_some_and(|end| at >= *end) {
                        ends.remove(&key);
                    }
                }
            }
        }
        if progress.elapsed() > STALL {
            return Err(failed(format!(
                "partitions {:?} made no progress for {} s (an open transaction on them hides what follows until it is decided)",
                ends.keys().collect::<Vec<_>>(),
                STALL.as_secs()
            )));
        }
    }
    report.finish();
    Ok(scanned)
}
