//! Reading exactly-once mode's commit markers back: the newest record of one key on the
//! compacted checkpoint topic, as a `read_committed` consumer sees it (a marker of an
//! aborted or still open transaction is never returned).

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

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
    let mut c = ClientConfig::new();
    for (k, v) in &cfg.properties {
        c.set(k, v);
    }
    c.set("bootstrap.servers", &cfg.bootstrap_servers)
        .set("group.id", "outbox-router-checkpoint-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .set("log_level", "3");
    let consumer: BaseConsumer = c.create().map_err(|e| failed(e.to_string()))?;
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
                Some(Err(KafkaError::PartitionEOF(_))) => break,
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
