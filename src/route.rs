//! Route stage: an `OutboxEvent` becomes a Kafka record — topic from the template, key =
//! aggregate id, event id and type as headers, payload bytes unchanged.

use crate::config::RouteConfig;
use crate::outbox::{EventId, InvalidEvent, MappedTransaction, OutboxEvent};
use crate::source::Position;

/// The placeholder replaced by the route column's value.
const ROUTED_BY_VALUE: &str = "${routedByValue}";

/// A topic template such as `outbox.event.${routedByValue}`.
#[derive(Debug, Clone)]
pub struct TopicTemplate {
    prefix: String,
    suffix: Option<String>,
}

impl TopicTemplate {
    /// Parses a template; it may contain the placeholder at most once.
    pub fn parse(template: &str) -> Result<Self, String> {
        match template.split_once(ROUTED_BY_VALUE) {
            Some((_, s)) if s.contains(ROUTED_BY_VALUE) => Err(format!(
                "{template:?} uses {ROUTED_BY_VALUE} more than once"
            )),
            Some((p, s)) => Ok(Self {
                prefix: p.into(),
                suffix: Some(s.into()),
            }),
            None => {
                check_topic(template)?;
                Ok(Self {
                    prefix: template.into(),
                    suffix: None,
                })
            }
        }
    }

    /// The topic for a route value, checked against Kafka's naming rules.
    pub fn render(&self, value: &str) -> Result<String, String> {
        let topic = match &self.suffix {
            Some(s) => format!("{}{value}{s}", self.prefix),
            None => self.prefix.clone(),
        };
        check_topic(&topic)?;
        Ok(topic)
    }
}

/// Kafka's topic name rules: 1–249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn check_topic(topic: &str) -> Result<(), String> {
    if topic.is_empty() {
        return Err("topic name is empty".into());
    }
    if topic.len() > 249 {
        return Err(format!(
            "topic name {topic:?} is longer than 249 characters"
        ));
    }
    if topic == "." || topic == ".." {
        return Err(format!("topic name {topic:?} is not allowed"));
    }
    if let Some(bad) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "topic name {topic:?} contains {bad:?}; allowed are a-z A-Z 0-9 . _ -"
        ));
    }
    Ok(())
}

/// A record ready for a sink.
#[derive(Debug, Clone)]
pub struct Record {
    /// Destination topic.
    pub topic: String,
    /// Record key (aggregate id).
    pub key: Vec<u8>,
    /// Value; `None` is a null value.
    pub value: Option<Vec<u8>>,
    /// Headers in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Record timestamp, ms since epoch.
    pub timestamp_ms: i64,
    /// The event this record carries, for error messages.
    pub event: EventRef,
}

/// Enough of an event to name it in an error.
#[derive(Debug, Clone)]
pub struct EventRef {
    /// Outbox table.
    pub table: std::sync::Arc<crate::source::TableName>,
    /// Binlog `file:offset` of the row.
    pub position: String,
    /// Event id.
    pub id: crate::outbox::EventId,
}

/// A transaction's records and the position that is safe once all are acknowledged.
#[derive(Debug)]
pub struct Batch {
    /// Checkpoint after this batch.
    pub end: Position,
    /// Commit time of the transaction (ms since epoch).
    pub commit_time_ms: i64,
    /// Records in commit order.
    pub records: Vec<Record>,
    /// Events that cannot be records, for the `on_invalid` policy.
    pub invalid: Vec<InvalidEvent>,
}

/// Turns events into records.
#[derive(Debug, Clone)]
pub struct Router {
    template: TopicTemplate,
    event_id_header: String,
    /// Records above this are invalid rows (librdkafka's `message.max.bytes`).
    max_record_bytes: usize,
}

impl Router {
    /// A router for the configured template and header name; records over
    /// `max_record_bytes` are invalid.
    pub fn new(cfg: &RouteConfig, max_record_bytes: usize) -> Result<Self, String> {
        Ok(Self {
            template: TopicTemplate::parse(&cfg.topic)?,
            event_id_header: cfg.event_id_header.clone(),
            max_record_bytes,
        })
    }

    /// Routes every event of a transaction; events that cannot be routed join the
    /// transaction's invalid rows.
    pub fn route(&self, txn: MappedTransaction) -> Batch {
        let commit = txn.commit_time_ms;
        let mut invalid = txn.invalid;
        let mut records = Vec::with_capacity(txn.events.len());
        for e in txn.events {
            match self.record(e, commit) {
                Ok(r) => records.push(r),
                Err(e) => invalid.push(e),
            }
        }
        Batch {
            end: txn.end,
            commit_time_ms: commit,
            records,
            invalid,
        }
    }

    /// The dead-letter record for an invalid row: raw row, reason and position as JSON,
    /// the same event id header, keyed by event id.
    pub fn dead_letter(&self, topic: &str, bad: &InvalidEvent, commit_time_ms: i64) -> Record {
        let event_id = bad.event_id.clone().unwrap_or(EventId(Vec::new()));
        let value = serde_json::json!({
            "table": bad.table.to_string(),
            "position": bad.position,
            "event_id": bad.event_id.as_ref().map(|e| e.to_string()),
            "reason": bad.reason,
            "row": bad.row,
        });
        let mut headers = vec![
            ("reason".to_string(), bad.reason.clone().into_bytes()),
            ("position".to_string(), bad.position.clone().into_bytes()),
            ("table".to_string(), bad.table.to_string().into_bytes()),
        ];
        if bad.event_id.is_some() {
            headers.insert(0, (self.event_id_header.clone(), event_id.0.clone()));
        }
        Record {
            topic: topic.to_string(),
            key: event_id.0.clone(),
            value: Some(value.to_string().into_bytes()),
            headers,
            timestamp_ms: commit_time_ms,
            event: EventRef {
                table: bad.table.clone(),
                position: bad.position.clone(),
                id: event_id,
            },
        }
    }

    fn record(&self, e: OutboxEvent, commit_time_ms: i64) -> Result<Record, InvalidEvent> {
        let topic = self
            .template
            .render(&e.route_value)
            .map_err(|r| InvalidEvent::of(&e, r))?;
        let size = e.key.len() + e.payload.as_ref().map_or(0, Vec::len) + e.id.0.len();
        if size > self.max_record_bytes {
            let reason = format!(
                "record of {size} bytes exceeds the producer's message.max.bytes ({}); Kafka would reject it",
                self.max_record_bytes
            );
            return Err(InvalidEvent::of(&e, reason));
        }
        let mut headers = vec![(self.event_id_header.clone(), e.id.0.clone())];
        if let Some(t) = e.event_type {
            headers.push(("type".to_string(), t));
        }
        Ok(Record {
            topic,
            key: e.key,
            value: e.payload,
            headers,
            timestamp_ms: e.timestamp_ms.unwrap_or(commit_time_ms),
            event: EventRef {
                table: e.table,
                position: e.position,
                id: e.id,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_and_checks_topics() {
        let t = TopicTemplate::parse("outbox.event.${routedByValue}").unwrap();
        assert_eq!(t.render("Order").unwrap(), "outbox.event.Order");
        assert!(t.render("has space").is_err());
        assert!(t.render(&"x".repeat(300)).is_err());
        let fixed = TopicTemplate::parse("all-events").unwrap();
        assert_eq!(fixed.render("anything").unwrap(), "all-events");
        assert!(TopicTemplate::parse("${routedByValue}.${routedByValue}").is_err());
        assert!(TopicTemplate::parse("${routedByValue}")
            .unwrap()
            .render("")
            .is_err());
    }
}
