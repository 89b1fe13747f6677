//! The fleet's operator records from the console: a source paused or resumed, by whom,
//! when and why, on the control topic (`monitor.control_topic`). One partition, kept
//! forever: the newest record of a source is its state (`pipeline::pause` follows it),
//! and all of them are the console's audit trail.

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

/// A replay from the console, for the audit view (the replay's own trail is
/// `ops.audit_file` / `ops.audit_topic`, under the same id).
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
    pub event_ids: Vec<String>,
    /// Records sent and acknowledged.
    pub count: u64,
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
