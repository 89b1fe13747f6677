//! Reading exactly-once mode's commit markers back: the newest record of one key on the
//! compacted checkpoint topic, as a `read_committed` consumer sees it (a marker of an
//! aborted or still open transaction is never returned).

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::{KafkaConfig, SinkError};

/// How long the topic may take to answer in all.
const READ_DEADLINE: Duration = Duration::from_secs(60);

/// The newest committed marker of `key` on `topic`'s only partition; `None` when the
/// topic or the key has none.
pub(super) fn last(
    cfg: &KafkaConfig,
    topic: &str,
    key: &str,
) -> Result<Option<Vec<u8>>, SinkError> {
    let failed = |reason: String| SinkError::Markers {
        topic: topic.to_string(),
        reason,
    };
    let mut c = super::consumer_config(cfg);
    c.set("group.id", "outbox-router-checkpoint-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        // The reader waits for the end of the partition (repeatedly, while another
        // producer's transaction holds the stable offset back): do not let each fetch
        // at the end sit out the default 500 ms.
        .set("fetch.wait.max.ms", "20");
    let consumer: BaseConsumer<QuietEof> = c
        .create_with_context(QuietEof)
        .map_err(|e| failed(e.to_string()))?;
    let deadline = Instant::now() + READ_DEADLINE;
    let (low, high) = match consumer.fetch_watermarks(topic, 0, Duration::from_secs(10)) {
        Ok(w) => w,
        Err(e) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::UnknownTopicOrPartition) => {
            return Ok(None)
        }
        Err(e) => return Err(failed(format!("watermarks: {e}"))),
    };
    if high <= low {
        return Ok(None);
    }
    // Each commit adds a marker and a transaction control record; other sources'
    // markers may be in between. Look back a little, then further.
    for back in [512, 16_384, i64::MAX] {
        let start = high.saturating_sub(back).max(low);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Offset(start))
            .map_err(|e| failed(e.to_string()))?;
        consumer.assign(&tpl).map_err(|e| failed(e.to_string()))?;
        let mut newest = None;
        loop {
            if Instant::now() > deadline {
                return Err(failed(format!(
                    "no end of partition 0 within {} s (a transaction left open by a dead producer is aborted after its transaction.timeout.ms)",
                    READ_DEADLINE.as_secs()
                )));
            }
            match consumer.poll(Duration::from_millis(500)) {
                None => continue,
                // read_committed ends at the last stable offset: a transaction another
                // producer still has open on the partition holds it back, and with it
                // any newer marker of ours. It ends within its transaction timeout.
                Some(Err(KafkaError::PartitionEOF(_)))
                    if stable_up_to(&consumer, topic) >= high =>
                {
                    break
                }
                Some(Err(KafkaError::PartitionEOF(_))) => continue,
                Some(Err(e)) => return Err(failed(e.to_string())),
                Some(Ok(m)) => {
                    if m.key() == Some(key.as_bytes()) {
                        newest = m.payload().map(<[u8]>::to_vec);
                    }
                }
            }
        }
        if newest.is_some() || start == low {
            return Ok(newest);
        }
    }
    Ok(None)
}

/// Reports client errors except the end of the partition, which this reader waits for.
struct QuietEof;

impl ClientContext for QuietEof {
    fn error(&self, error: KafkaError, reason: &str) {
        if !matches!(error, KafkaError::PartitionEOF(_))
            && error.rdkafka_error_code() != Some(RDKafkaErrorCode::PartitionEOF)
        {
            tracing::error!(%error, reason, "checkpoint topic reader");
        }
    }
}

impl ConsumerContext for QuietEof {}

/// Where the consumer stands on partition 0 (`i64::MAX` when it cannot tell).
fn stable_up_to(consumer: &BaseConsumer<QuietEof>, topic: &str) -> i64 {
    consumer
        .position()
        .ok()
        .and_then(|tpl| tpl.find_partition(topic, 0).map(|p| p.offset()))
        .map_or(i64::MAX, |offset| match offset {
            Offset::Offset(n) => n,
            _ => i64::MAX,
        })
}
