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

/// When a read that waits says why.
const WARN_AFTER: Duration = Duration::from_secs(5);

/// The newest committed marker of `key` on `topic`'s only partition; `None` when the
/// topic or the key has none.
///
/// Called after `init_transactions`, so every transaction of ours is decided. The
/// partition's end is asked with `read_uncommitted`: a `read_committed` query answers
/// the last stable offset, which another producer's open transaction on a shared
/// checkpoint topic holds back — below our newest markers. The read then goes on until
/// the position passes that end, waiting for such a transaction to be decided.
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
        // Each fetch at the end (while another producer's transaction holds the stable
        // offset back) would otherwise sit out the default 500 ms.
        .set("fetch.wait.max.ms", "20");
    let consumer = |isolation: &str| -> Result<BaseConsumer<Quiet>, SinkError> {
        c.clone()
            .set("isolation.level", isolation)
            .create_with_context(Quiet)
            .map_err(|e| failed(e.to_string()))
    };
    let deadline = Instant::now() + READ_DEADLINE;
    let (low, end) =
        match consumer("read_uncommitted")?.fetch_watermarks(topic, 0, Duration::from_secs(10)) {
            Ok(w) => w,
            Err(e) if e.rdkafka_error_code() == Some(RDKafkaErrorCode::UnknownTopicOrPartition) => {
                return Ok(None)
            }
            Err(e) => return Err(failed(format!("watermarks: {e}"))),
        };
    if end <= low {
        return Ok(None);
    }
    let reader = consumer("read_committed")?;
    let (warn_at, mut warned) = (Instant::now() + WARN_AFTER, false);
    // Each commit adds a marker and a transaction control record; other sources'
    // markers may be in between. Look back a little, then further.
    for back in [512, 16_384, i64::MAX] {
        let start = end.saturating_sub(back).max(low);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Offset(start))
            .map_err(|e| failed(e.to_string()))?;
        reader.assign(&tpl).map_err(|e| failed(e.to_string()))?;
        let mut newest = None;
        // The position steps over control records and aborted records too, so it
        // reaches `end` even when the partition ends in a commit marker.
        while !position_reached(&reader, topic, end) {
            if !warned && Instant::now() > warn_at {
                warned = true;
                tracing::warn!(topic, end, position = ?position(&reader, topic), "still reading the commit markers: another producer's transaction open on the checkpoint topic hides what follows it; waiting until it commits or aborts");
            }
            if Instant::now() > deadline {
                return Err(failed(format!(
                    "partition 0 not read up to offset {end} within {} s: a transaction another producer holds open on it hides what follows (one left open by a dead producer is aborted after its transaction.timeout.ms; a checkpoint topic per router avoids the wait)",
                    READ_DEADLINE.as_secs()
                )));
            }
            match reader.poll(Duration::from_millis(100)) {
                Some(Err(e)) => return Err(failed(e.to_string())),
                Some(Ok(m)) if m.key() == Some(key.as_bytes()) => {
                    newest = m.payload().map(<[u8]>::to_vec);
                }
                None | Some(Ok(_)) => {}
            }
        }
        if newest.is_some() || start == low {
            return Ok(newest);
        }
    }
    Ok(None)
}

/// Reports client errors through the log, once each.
struct Quiet;

impl ClientContext for Quiet {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::error!(%error, reason, "checkpoint topic reader");
    }
}

impl ConsumerContext for Quiet {}

/// The consumer's position on partition 0, when it has one.
fn position(consumer: &BaseConsumer<Quiet>, topic: &str) -> Option<i64> {
    let tpl = consumer.position().ok()?;
    match tpl.find_partition(topic, 0)?.offset() {
        Offset::Offset(n) => Some(n),
        _ => None,
    }
}

/// Whether the consumer's position on partition 0 is at or past `end` (an unknown
/// position, before anything was read, is not).
fn position_reached(consumer: &BaseConsumer<Quiet>, topic: &str, end: i64) -> bool {
    position(consumer, topic).is_some_and(|n| n >= end)
}
