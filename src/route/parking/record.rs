//! What a record on the parking topic says, in its headers: the parked event's own
//! headers (its id first, as on its destination) and `parked.*` ones that say whose it
//! is, where it was going and why it waits. Written by the diversion, read back by a
//! start (the fleet's set of parked aggregates) and by `parked list` / `show`.

use std::sync::Arc;

use crate::outbox::{Aggregate, EventId};
use crate::position::TableName;

/// What a parking record stands for (`parked.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The event that could not be a record: its aggregate is parked from here on.
    Invalid,
    /// A valid event held behind an earlier one of its aggregate.
    Held,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Invalid => "invalid",
            Kind::Held => "held",
        }
    }

    fn parse(s: &[u8]) -> Option<Self> {
        match s {
            b"invalid" => Some(Kind::Invalid),
            b"held" => Some(Kind::Held),
            _ => None,
        }
    }
}

pub(crate) const KIND: &str = "parked.kind";
pub(crate) const TABLE: &str = "parked.table";
pub(crate) const AGGREGATE_TYPE: &str = "parked.aggregate_type";
pub(crate) const EVENT_ID: &str = "parked.event_id";
pub(crate) const POSITION: &str = "parked.position";
pub(crate) const REASON: &str = "parked.reason";
pub(crate) const TOPIC: &str = "parked.topic";
pub(crate) const PARTITION: &str = "parked.partition";

/// The `parked.*` headers of a parked event.
pub(crate) struct Labels<'a> {
    pub kind: Kind,
    pub aggregate: &'a Aggregate,
    pub event_id: Option<&'a EventId>,
    pub position: &'a str,
    pub reason: &'a str,
    /// Where a held event was going (its topic and explicit partition).
    pub destination: Option<(&'a str, Option<i32>)>,
}

impl Labels<'_> {
    pub(crate) fn headers(&self) -> Vec<(String, Vec<u8>)> {
        let mut h = vec![
            (KIND.to_string(), self.kind.as_str().as_bytes().to_vec()),
            (
                TABLE.to_string(),
                self.aggregate.table.to_string().into_bytes(),
            ),
        ];
        if let Some(t) = &self.aggregate.aggregate_type {
            h.push((AGGREGATE_TYPE.to_string(), t.as_bytes().to_vec()));
        }
        if let Some(id) = self.event_id {
            h.push((EVENT_ID.to_string(), id.0.clone()));
        }
        h.push((POSITION.to_string(), self.position.as_bytes().to_vec()));
        h.push((REASON.to_string(), self.reason.as_bytes().to_vec()));
        if let Some((topic, partition)) = self.destination {
            h.push((TOPIC.to_string(), topic.as_bytes().to_vec()));
            if let Some(p) = partition {
                h.push((PARTITION.to_string(), p.to_string().into_bytes()));
            }
        }
        h
    }
}

/// A parking record as read back.
#[derive(Debug, Clone)]
pub struct Parked {
    /// Why it is there.
    pub kind: Kind,
    /// Whose it is.
    pub aggregate: Aggregate,
    /// Its event id, when the row had one.
    pub event_id: Option<EventId>,
    /// Binlog `file:offset` of its row.
    pub position: String,
    /// Why it waits.
    pub reason: String,
    /// Where a held event was going.
    pub topic: Option<String>,
    /// Its record timestamp (ms since epoch): the event's time or commit time.
    pub timestamp_ms: i64,
    /// Its offset on the parking topic.
    pub offset: i64,
}

impl Parked {
    /// Reads a parking record; `Err` says what is missing (a record someone else wrote
    /// to the topic is an error, never skipped: the set would be wrong without it).
    pub fn read(
        key: Option<&[u8]>,
        headers: &[(String, Vec<u8>)],
        timestamp_ms: i64,
        offset: i64,
    ) -> Result<Self, String> {
        let get = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v);
        let text = |name: &str| -> Result<String, String> {
            let v = get(name).ok_or_else(|| format!("no {name} header"))?;
            String::from_utf8(v.clone()).map_err(|_| format!("{name} is not UTF-8"))
        };
        let kind = get(KIND)
            .and_then(|v| Kind::parse(v))
            .ok_or_else(|| format!("no known {KIND} header"))?;
        let table = text(TABLE)?;
        let (database, table) = table
            .split_once('.')
            .ok_or_else(|| format!("{TABLE} {table:?} is not database.table"))?;
        let id = key.ok_or("no key (the aggregate id)")?.to_vec();
        let aggregate_type = match get(AGGREGATE_TYPE) {
            Some(_) => Some(text(AGGREGATE_TYPE)?),
            None => None,
        };
        Ok(Self {
            kind,
            aggregate: Aggregate {
                table: Arc::new(TableName {
                    database: database.to_string(),
                    table: table.to_string(),
                }),
                aggregate_type,
                id,
            },
            event_id: get(EVENT_ID).map(|v| EventId(v.clone())),
            position: text(POSITION)?,
            reason: text(REASON)?,
            topic: match get(TOPIC) {
                Some(_) => Some(text(TOPIC)?),
                None => None,
            },
            timestamp_ms,
            offset,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_read_back_as_written() {
        let aggregate = Aggregate {
            table: Arc::new(TableName {
                database: "shop".into(),
                table: "outbox".into(),
            }),
            aggregate_type: Some("Order".into()),
            id: b"42".to_vec(),
        };
        let id = EventId(b"e-7".to_vec());
        let labels = Labels {
            kind: Kind::Held,
            aggregate: &aggregate,
            event_id: Some(&id),
            position: "mysql-bin.000003:1234",
            reason: "held behind event e-5",
            destination: Some(("outbox.event.Order", Some(3))),
        };
        let parked = Parked::read(Some(b"42"), &labels.headers(), 17, 9).unwrap();
        assert_eq!(parked.kind, Kind::Held);
        assert_eq!(parked.aggregate, aggregate);
        assert_eq!(parked.event_id, Some(id));
        assert_eq!(parked.position, "mysql-bin.000003:1234");
        assert_eq!(parked.topic.as_deref(), Some("outbox.event.Order"));
        assert_eq!((parked.timestamp_ms, parked.offset), (17, 9));
        // A NULL type stays NULL.
        let untyped = Aggregate {
            aggregate_type: None,
            ..aggregate
        };
        let labels = Labels {
            kind: Kind::Invalid,
            aggregate: &untyped,
            event_id: None,
            position: "p",
            reason: "route column is NULL",
            destination: None,
        };
        let parked = Parked::read(Some(b"42"), &labels.headers(), 0, 0).unwrap();
        assert_eq!(parked.aggregate.aggregate_type, None);
        assert!(Parked::read(None, &labels.headers(), 0, 0).is_err());
        assert!(Parked::read(Some(b"42"), &[], 0, 0).is_err());
    }
}
