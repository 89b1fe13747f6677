//! The checkpoint topic, read and written outside any transaction: exactly-once mode's
//! newest commit marker, and the first-start records of `checkpoint init` / `run --init`.

use std::time::Duration;

use rdkafka::producer::FutureProducer;

use crate::kafka::{client_config, KafkaConfig, TopicCreator};
use crate::sink::{DeliveryConfig, SinkError};

/// The newest commit marker of `delivery.transactional_id`, read with
/// `read_committed`: where exactly-once mode resumes.
fn last_marker(cfg: &KafkaConfig, delivery: &DeliveryConfig) -> Result<Option<Vec<u8>>, SinkError> {
    Ok(crate::kafka::last(
        cfg,
        &delivery.checkpoint_topic,
        &delivery.transactional_id,
    )?)
}

/// What the checkpoint topic holds for `delivery.transactional_id`: its newest commit
/// marker, else whether one was deleted and whether a first start was recorded.
pub fn marker_history(
    cfg: &KafkaConfig,
    delivery: &DeliveryConfig,
) -> Result<MarkerHistory, SinkError> {
    let topic = &delivery.checkpoint_topic;
    if let Some(marker) = last_marker(cfg, delivery)? {
        return Ok(MarkerHistory {
            marker: Some(marker),
            ..MarkerHistory::default()
        });
    }
    // No marker: a first start, or one lost. The whole partition is read for the
    // evidence (compaction keeps it small).
    let first_start = first_start_key(&delivery.transactional_id);
    let keys = [delivery.transactional_id.as_bytes(), first_start.as_bytes()];
    let Some(read) = crate::kafka::newest_of_keys(cfg, topic, 0, &keys)? else {
        return Ok(MarkerHistory::default());
    };
    let [marker, first_start] = <[_; 2]>::try_from(read.newest).expect("two keys asked");
    Ok(MarkerHistory {
        marker: marker.as_ref().and_then(|m| m.value.clone()),
        marker_deleted: marker.is_some_and(|m| m.value.is_none()),
        // A tombstone under the key still says a first start was recorded.
        first_start: first_start.map(|r| r.value.unwrap_or_default()),
        head_deleted_from: (read.log_start > 0).then_some(read.log_start),
    })
}

/// Creates the checkpoint topic, or checks the shape of the one there.
pub fn ensure_checkpoint_topic(
    cfg: &KafkaConfig,
    delivery: &DeliveryConfig,
) -> Result<(), SinkError> {
    Ok(TopicCreator::new(cfg)?.ensure_compacted(&delivery.checkpoint_topic, "checkpoint")?)
}

/// Sends at-least-once mode's record under `checkpoint.name` (`name`) on `topic` that a
/// first start at `source.start` happened, outside any transaction (exactly-once mode's
/// is written as the fleet's transactional producer: `pipeline::init` decides which).
/// Under a key of its own, so it can never hide a commit marker.
pub async fn send_first_start_record(
    cfg: &KafkaConfig,
    topic: &str,
    name: &str,
) -> Result<(), SinkError> {
    let value = format!(
        "first start recorded at unix ms {}",
        crate::checkpoint::now_ms()
    );
    send_proven(cfg, topic, &first_start_key(name), value.as_bytes())
        .await
        .map_err(|reason| SinkError::FirstStart {
            topic: topic.to_string(),
            reason,
        })
}

/// Sends one record to partition 0 of `topic` outside any transaction; `Err` says why
/// it is not proven written (proof, as for any record: an offset).
async fn send_proven(
    cfg: &KafkaConfig,
    topic: &str,
    key: &str,
    value: &[u8],
) -> Result<(), String> {
    let producer: FutureProducer = client_config(cfg).create().map_err(|e| e.to_string())?;
    let record = rdkafka::producer::FutureRecord::to(topic)
        .partition(0)
        .key(key)
        .payload(value);
    match producer.send(record, Duration::from_secs(30)).await {
        Ok(delivered) if delivered.offset >= 0 => Ok(()),
        Ok(_) => Err("reported delivered without an offset".into()),
        Err((error, _)) => Err(error.to_string()),
    }
}

/// Whether a first start was recorded under `name` on `topic` (its record), and
/// whether records were deleted from the topic's head (it may have been one).
pub fn first_start_of(
    cfg: &KafkaConfig,
    topic: &str,
    name: &str,
) -> Result<FirstStartRecord, SinkError> {
    let key = first_start_key(name);
    let Some(read) = crate::kafka::newest_of_keys(cfg, topic, 0, &[key.as_bytes()])? else {
        return Ok(FirstStartRecord::default());
    };
    let newest = read.newest.into_iter().next().flatten();
    Ok(FirstStartRecord {
        recorded: newest
            .and_then(|r| r.value)
            .map(|v| String::from_utf8_lossy(&v).into_owned()),
        head_deleted_from: (read.log_start > 0).then_some(read.log_start),
    })
}

/// What a checkpoint topic says of one name's first start.
#[derive(Debug, Default)]
pub struct FirstStartRecord {
    /// The record's text ("first start recorded at unix ms …"), when there is one.
    pub recorded: Option<String>,
    /// Records were deleted from the head of the topic, below this offset.
    pub head_deleted_from: Option<i64>,
}

/// What the checkpoint topic says of one transactional id's commit markers.
#[derive(Debug, Default)]
pub struct MarkerHistory {
    /// The newest commit marker (encoded checkpoint).
    pub marker: Option<Vec<u8>>,
    /// The newest record under the marker's key is a tombstone: a marker existed.
    pub marker_deleted: bool,
    /// The first-start record (`checkpoint init`, `run --init`), when there is one: the
    /// encoded checkpoint of the position fixed when it was recorded, or the text of an
    /// older build's record (its position is decided by whichever instance leads first).
    pub first_start: Option<Vec<u8>>,
    /// Records were deleted from the head of the topic, below this offset: they may
    /// have been markers.
    pub head_deleted_from: Option<i64>,
}

/// The key of `checkpoint init`'s first-start record: beside the markers, never theirs.
pub fn first_start_key(name: &str) -> String {
    format!("{name}#first-start")
}

/// The key, on a fleet's lock topic, of the note naming the checkpoint topic that
/// `transactional_id`'s commit markers live on. The lock topic outlives the checkpoint
/// topic's deletion or renaming, and Kafka's expiry of groups and transactional ids: a
/// compacted record is kept until a newer one replaces it.
pub fn fleet_key(transactional_id: &str) -> String {
    format!("{transactional_id}#checkpoint-topic")
}

/// The checkpoint topic the fleet's lock topic names for `transactional_id`, if it
/// names one (`None` also when the lock topic does not exist yet).
pub fn fleet_checkpoint_topic(
    cfg: &KafkaConfig,
    lock_topic: &str,
    transactional_id: &str,
) -> Result<Option<String>, SinkError> {
    // A fleet that never noted anything may not have its lock topic yet.
    if !TopicCreator::exists(cfg, lock_topic)? {
        return Ok(None);
    }
    let key = fleet_key(transactional_id);
    let Some(read) = crate::kafka::newest_of_keys(cfg, lock_topic, 0, &[key.as_bytes()])? else {
        return Ok(None);
    };
    Ok(read
        .newest
        .into_iter()
        .next()
        .flatten()
        .and_then(|r| r.value)
        .map(|v| String::from_utf8_lossy(&v).into_owned()))
}

/// Writes the lock topic's note that `transactional_id`'s markers live on
/// `checkpoint_topic`, unless it says so already: a leader of a fleet recorded before
/// the note existed leaves it at its start.
pub async fn note_fleet_checkpoint_topic(
    cfg: &KafkaConfig,
    lock_topic: &str,
    transactional_id: &str,
    checkpoint_topic: &str,
) -> Result<(), SinkError> {
    let noted =
        tokio::task::block_in_place(|| fleet_checkpoint_topic(cfg, lock_topic, transactional_id))?;
    if noted.as_deref() == Some(checkpoint_topic) {
        return Ok(());
    }
    let key = fleet_key(transactional_id);
    send_proven(cfg, lock_topic, &key, checkpoint_topic.as_bytes())
        .await
        .map_err(|reason| SinkError::FleetRecord {
            topic: lock_topic.to_string(),
            reason,
        })
}
