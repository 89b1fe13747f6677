//! The fleet's operator records from the console, on the control topic
//! (`monitor.control_topic`), by whom, when and why: a source paused or resumed, a
//! replay asked and the leader's answer to it, a release of parked aggregates. One
//! partition, kept forever: the newest pause or resume of a source is its state, a
//! replay asked and not answered is the leader's to carry out (`pipeline::control`
//! follows the topic), and all of them are the console's audit trail.

use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord};
use serde::{Deserialize, Serialize};

use crate::kafka::{KafkaConfig, TopicCreator};

/// A source's state as an operator set it, with who, when and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PauseRecord {
    pub source: String,
    pub paused: bool,
    /// The credential's name (the console) or the OS user.
    pub by: String,
    pub reason: String,
    /// RFC 3339, UTC.
    pub at: String,
    /// The action's id, in the audit trail too.
    pub id: String,
}

impl PauseRecord {
    /// `by: reason (since at)`, for logs and `/status`.
    pub fn describe(&self) -> String {
        format!("paused by {} at {}: {}", self.by, self.at, self.reason)
    }
}

/// Which rows a replay publishes again: these event ids, or the rows written in a
/// window (unix seconds, on the outbox's timestamp column), narrowed by aggregate and
/// event type.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayWhich {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub event_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// Count, send nothing (never asked of a leader: a count reads the tables only).
    #[serde(default, skip_serializing)]
    pub dry_run: bool,
}

/// A replay asked from the console, for the source's leader to carry out, whichever
/// instance that is: it answers with a `ReplayRecord` naming this ask.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayAsk {
    /// `replay asked`.
    pub action: String,
    pub source: String,
    pub by: String,
    pub reason: String,
    /// RFC 3339, UTC: an ask no leader took up for `pipeline::control::ASK_FRESH` is
    /// answered "not carried out", never run late.
    pub at: String,
    /// The ask's id, named by its answer.
    pub id: String,
    #[serde(flatten)]
    pub which: ReplayWhich,
    /// The window, as the audit view shows it (`since …, until …`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
}

/// A replay carried out (or refused) by the source's leader, for the audit view (the
/// replay's own trail is `ops.audit_file` / `ops.audit_topic`, under the same id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayRecord {
    /// `replay`.
    pub action: String,
    pub source: String,
    pub by: String,
    pub reason: String,
    pub at: String,
    /// The replay's id: the replay header of every record it sent.
    pub id: String,
    #[serde(default)]
    pub event_ids: Vec<String>,
    /// The window replayed, when not by ids (`since …, until …`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// Records sent and acknowledged.
    pub count: u64,
    pub outcome: String,
    /// The ask it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask: Option<String>,
    /// The instance that carried it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
}

/// A release of parked aggregates from the console, for the audit view (the request and
/// its outcomes are on the parking topic, under the same id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParkedRecord {
    /// `parked release`.
    pub action: String,
    pub source: String,
    pub by: String,
    pub reason: String,
    pub at: String,
    /// The request's id on the parking topic.
    pub id: String,
    /// The aggregate ids named.
    pub aggregates: Vec<String>,
    pub outcome: String,
}

/// A record of the control topic: its key and value.
pub trait ControlRecord: Serialize {
    fn key(&self) -> String;
}

impl ControlRecord for PauseRecord {
    /// The source: the newest record of the key is its state.
    fn key(&self) -> String {
        self.source.clone()
    }
}

impl ControlRecord for ReplayRecord {
    /// Beside the source's state, never read as it.
    fn key(&self) -> String {
        format!("replay/{}", self.source)
    }
}

impl ControlRecord for ReplayAsk {
    fn key(&self) -> String {
        format!("replay-ask/{}", self.source)
    }
}

impl ControlRecord for ParkedRecord {
    fn key(&self) -> String {
        format!("parked/{}", self.source)
    }
}

/// Writes `record` under its key and waits for Kafka's proof (an offset).
pub async fn write(
    kafka: &KafkaConfig,
    topic: &str,
    record: &impl ControlRecord,
) -> Result<i64, String> {
    let (k, t) = (kafka.clone(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        TopicCreator::new(&k).and_then(|c| c.ensure_kept_forever(&t, "control"))
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())?;
    let producer: FutureProducer = crate::kafka::client_config(kafka)
        .set("statistics.interval.ms", "0")
        .create()
        .map_err(|e| e.to_string())?;
    let value = serde_json::to_vec(record).expect("a control record serialises");
    let key = record.key();
    let sent = producer
        .send(
            FutureRecord::to(topic)
                .partition(0)
                .key(&key)
                .payload(&value),
            Duration::from_secs(30),
        )
        .await;
    crate::kafka::close_in_background(producer);
    match sent {
        Ok(d) if d.offset >= 0 => Ok(d.offset),
        Ok(_) => Err("Kafka reported it delivered without an offset".into()),
        Err((e, _)) => Err(crate::kafka::without_values(&e)),
    }
}
