//! The event an outbox row stands for.

use crate::bytes_json::bytes_json;
use std::fmt;
use std::sync::Arc;

use crate::position::TableName;

/// An event id as stored: usually text (UUID, number), possibly binary.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EventId(pub Vec<u8>);

impl fmt::Display for EventId {
    /// Text ids print as they are; binary ids as `0x…` hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match std::str::from_utf8(&self.0) {
            Ok(s) if s.chars().all(|c| !c.is_control()) => f.write_str(s),
            _ => {
                f.write_str("0x")?;
                self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
        }
    }
}

/// One outbox row, mapped.
#[derive(Clone, Debug)]
pub struct OutboxEvent {
    /// The outbox table the row was inserted into.
    pub table: Arc<TableName>,
    /// Binlog `file:offset` of the rows event, for messages.
    pub position: String,
    /// Unique id consumers deduplicate on; travels as a header.
    pub id: EventId,
    /// Value of the route column (aggregate type by default): picks the topic.
    pub route_value: String,
    /// Aggregate id: the record key, so one aggregate stays on one partition.
    pub key: Vec<u8>,
    /// The payload bytes exactly as stored; `None` for SQL NULL.
    pub payload: Option<Vec<u8>>,
    /// Event time from the timestamp column, when one is mapped (ms since epoch).
    pub timestamp_ms: Option<i64>,
    /// Additional columns placed in headers (name, value).
    pub headers: Vec<(String, Vec<u8>)>,
    /// Additional columns placed in the JSON envelope (name, value).
    pub envelope: Vec<(String, serde_json::Value)>,
    /// Partition from a `partition` placement.
    pub partition: Option<i32>,
}

impl OutboxEvent {
    /// The aggregate it belongs to.
    pub fn aggregate(&self) -> Aggregate {
        Aggregate {
            table: self.table.clone(),
            aggregate_type: Some(self.route_value.clone()),
            id: self.key.clone(),
        }
    }
}

#[cfg(test)]
impl OutboxEvent {
    /// An event of `shop.outbox`, id `e-1`, aggregate type `Order`, for unit tests.
    pub fn sample(key: &str, payload: Option<&[u8]>, headers: &[(&str, &str)]) -> Self {
        Self {
            table: Arc::new(TableName {
                database: "shop".into(),
                table: "outbox".into(),
            }),
            position: "mysql-bin.000001:4".into(),
            id: EventId(b"e-1".to_vec()),
            route_value: "Order".into(),
            key: key.as_bytes().to_vec(),
            payload: payload.map(<[u8]>::to_vec),
            timestamp_ms: None,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect(),
            envelope: Vec::new(),
            partition: None,
        }
    }
}

/// The aggregate an event belongs to, as read from its row: what ordered parking holds
/// back. The table is part of it (two outboxes may reuse ids), and so is the type as
/// stored (NULL stays NULL: a row is never guessed into another aggregate).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Aggregate {
    /// The outbox table.
    pub table: Arc<TableName>,
    /// The route column's value (aggregate type by default); `None` for NULL.
    pub aggregate_type: Option<String>,
    /// The aggregate id: the record key.
    pub id: Vec<u8>,
}

impl fmt::Display for Aggregate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = self.aggregate_type.as_deref().unwrap_or("NULL");
        write!(f, "{} {kind}/{}", self.table, EventId(self.id.clone()))
    }
}

/// A row that cannot become a Kafka record. Never dropped silently: the `on_invalid`
/// policy stops the router (default), dead-letters it or skips it with a log and a count.
#[derive(Debug, Clone, thiserror::Error)]
#[error("invalid outbox row in {table} at binlog {position}, event id {}: {reason}", event_id.as_ref().map(|e| e.to_string()).unwrap_or_else(|| "unknown".into()))]
pub struct InvalidEvent {
    /// The outbox table.
    pub table: Arc<TableName>,
    /// Binlog `file:offset` of the rows event.
    pub position: String,
    /// The event id when it could be read.
    pub event_id: Option<EventId>,
    /// What is wrong.
    pub reason: String,
    /// The row as JSON (column → text, `{"base64": …}` or null), for the dead-letter record.
    pub row: serde_json::Value,
    /// Its aggregate, when the row names a usable one (parking holds it back).
    pub aggregate: Option<Box<Aggregate>>,
}

impl InvalidEvent {
    /// An invalid-event error about an already mapped event, its columns copied as
    /// `copy` says.
    pub fn of(event: &OutboxEvent, reason: impl Into<String>, copy: RowCopy) -> Self {
        let text = |b: &[u8]| copy.json(b);
        let row = serde_json::json!({
            "event_id": text(&event.id.0),
            "route_value": event.route_value,
            "aggregate_id": text(&event.key),
            "headers": event.headers.iter().map(|(k, v)| (k.clone(), text(v))).collect::<serde_json::Map<_, _>>(),
            "payload": event.payload.as_deref().map(text),
        });
        Self {
            table: event.table.clone(),
            position: event.position.clone(),
            event_id: Some(event.id.clone()),
            reason: reason.into(),
            row,
            aggregate: Some(Box::new(event.aggregate())),
        }
    }
}

/// Longest column value copied into a dead-letter record; a row rejected for its size
/// must still fit the dead-letter topic.
const DEAD_LETTER_VALUE_CAP: usize = 64 * 1024;

/// How much of each column a dead-letter record copies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RowCopy {
    /// Values over 64 KiB become `{"truncated_bytes": N, "prefix": …}`: without a claim
    /// check the record must fit the dead-letter topic (the row stays in the table).
    #[default]
    Capped,
    /// Every byte: the claim check takes a dead letter too large for the topic.
    Whole,
}

impl RowCopy {
    /// A column value for a dead-letter record, as `bytes_json` within this copy's cap.
    pub fn json(self, b: &[u8]) -> serde_json::Value {
        if self == RowCopy::Capped && b.len() > DEAD_LETTER_VALUE_CAP {
            let prefix = String::from_utf8_lossy(&b[..1024]).into_owned();
            return serde_json::json!({ "truncated_bytes": b.len(), "prefix": prefix });
        }
        bytes_json(b)
    }
}
