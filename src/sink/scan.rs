//! Reading what a topic holds from a point in time to its end, as a `read_committed`
//! consumer sees it: `reconcile` compares it with the outbox table, so it asks Kafka
//! (ListOffsets by timestamp, then the records), never the router's bookkeeping.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, DefaultConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::{KafkaConfig, SinkError};

/// A partition that makes no progress this long stops the scan.
const STALL: Duration = Duration::from_secs(60);

/// What a scan read.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scanned {
    /// Partitions read.
    pub partitions: usize,
    /// Records handed to the caller.
    pub records: u64,
}

/// Calls `each` with every record of `topic` (all partitions) from the first one with a
/// timestamp at or after `since_ms` up to the end each partition had when the scan
/// started. A topic that does not exist holds nothing.
pub fn scan(
    cfg: &KafkaConfig,
    topic: &str,
    since_ms: i64,
    mut each: impl FnMut(&BorrowedMessage<'_>),
) -> Result<Scanned, SinkError> {
    let failed = |reason: String| SinkError::ReadBack {
        topic: topic.to_string(),
        reason,
    };
    let mut c = super::consumer_config(cfg);
    c.set("group.id", "outbox-router-reconcile")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true");
    let consumer = |isolation: &str| -> Result<BaseConsumer, SinkError> {
        c.clone()
            .set("isolation.level", isolation)
            .create_with_context(DefaultConsumerContext)
            .map_err(|e| failed(e.to_string()))
    };
    let reader = consumer("read_committed")?;
    let metadata = match reader.fetch_metadata(Some(topic), Duration::from_secs(10)) {
        Ok(m) => m,
        Err(e) => return Err(failed(format!("metadata: {e}"))),
    };
    let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Ok(Scanned::default());
    };
    if t.error()
        .is_some_and(|e| RDKafkaErrorCode::from(e) == RDKafkaErrorCode::UnknownTopicOrPartition)
    {
        return Ok(Scanned::default());
    }
    let partitions: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    // The end as written, not the last stable offset a read_committed query answers
    // (an open transaction elsewhere would hide our records behind it).
    let ends_reader = consumer("read_uncommitted")?;
    let mut ends = HashMap::new();
    let mut by_time = TopicPartitionList::new();
    for &p in &partitions {
        let (low, high) = ends_reader
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .map_err(|e| failed(format!("watermarks of partition {p}: {e}")))?;
        if high > low {
            ends.insert(p, high);
            by_time
                .add_partition_offset(topic, p, Offset::Offset(since_ms))
                .map_err(|e| failed(e.to_string()))?;
        }
    }
    let mut scanned = Scanned {
        partitions: partitions.len(),
        records: 0,
    };
    if ends.is_empty() {
        return Ok(scanned);
    }
    let starts = reader
        .offsets_for_times(by_time, Duration::from_secs(10))
        .map_err(|e| failed(format!("offsets for time {since_ms}: {e}")))?;
    let mut assign = TopicPartitionList::new();
    for e in starts.elements() {
        // No record at or after the time: nothing to read there.
        if let Offset::Offset(start) = e.offset() {
            if start < ends[&e.partition()] {
                assign
                    .add_partition_offset(topic, e.partition(), Offset::Offset(start))
                    .map_err(|e| failed(e.to_string()))?;
                continue;
            }
        }
        ends.remove(&e.partition());
    }
    reader.assign(&assign).map_err(|e| failed(e.to_string()))?;
    let mut progress = Instant::now();
    let mut checked = Instant::now();
    while !ends.is_empty() {
        match reader.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                progress = Instant::now();
                scanned.records += 1;
                let (p, next) = (m.partition(), m.offset() + 1);
                each(&m);
                if ends.get(&p).is_some_and(|end| next >= *end) {
                    ends.remove(&p);
                }
                continue;
            }
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => return Err(failed(e.to_string())),
        }
        // The position also steps over control records and aborted transactions, which
        // are never handed out: a partition ending in them is done at its position.
        if checked.elapsed() >= Duration::from_millis(200) {
            checked = Instant::now();
            let positions = reader.position().map_err(|e| failed(e.to_string()))?;
            for e in positions.elements() {
                if let Offset::Offset(at) = e.offset() {
                    if ends.get(&e.partition()).is_some_and(|end| at >= *end) {
                        ends.remove(&e.partition());
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
    Ok(scanned)
}
