//! What a record on the parking topic says, in its headers: the parked event's own
//! headers (its id first, as on its destination) and `parked.*` ones that say whose it
//! is, where it was going and why it waits. Written by the diversion, read back by a
//! start (the fleet's set of parked aggregates) and by `parked list` / `show`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::outbox::{Aggregate, EventId};
use crate::position::TableName;

/// What a parking record stands for (`parked.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The event that could not be a record: its aggregate is parked from here on.
    Invalid,
    /// A valid event held behind an earlier one of its aggregate.
    Held,
    /// An operator's request to release or drop parked aggregates (`parked release`,
    /// `parked drop`), carried out by the source's leader.
    Request,
    /// The leader re-published an aggregate's parked events: it is no longer parked.
    Released,
    /// The leader dropped an aggregate's parked events on an operator's request.
    Dropped,
    /// The leader could not carry out a request for an aggregate (it stays parked).
    Refused,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Invalid => "invalid",
            Kind::Held => "held",
            Kind::Request => "request",
            Kind::Released => "released",
            Kind::Dropped => "dropped",
            Kind::Refused => "refused",
        }
    }

    fn parse(s: &[u8]) -> Option<Self> {
        [
            Kind::Invalid,
            Kind::Held,
            Kind::Request,
            Kind::Released,
            Kind::Dropped,
            Kind::Refused,
        ]
        .into_iter()
        .find(|k| k.as_str().as_bytes() == s)
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
pub(crate) const REQUEST: &str = "parked.request";
/// On an event parked without its value (Kafka refused it as too large): why.
pub(crate) const VALUE_OMITTED: &str = "parked.value_omitted";

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

/// An operator's request, as written by `parked release` / `parked drop`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Its id: the key of its record, named by every outcome.
    #[serde(skip)]
    pub id: String,
    /// What to do.
    pub action: Action,
    /// With which aggregates.
    pub aggregates: Vec<AggregateName>,
    /// Who asked.
    pub by: String,
    /// Why.
    pub reason: String,
}

/// What a request asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Re-publish the parked events to their destinations, in order, then un-park.
    Release,
    /// Un-park without delivering: the parked events are never delivered.
    Drop,
}

/// An aggregate as a request names it (text: a usable aggregate id is UTF-8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AggregateName {
    /// `database.table`.
    pub table: String,
    /// The aggregate type; `None` for NULL.
    pub aggregate_type: Option<String>,
    /// The aggregate id.
    pub id: String,
}

impl AggregateName {
    /// The name of `aggregate`.
    pub fn of(aggregate: &Aggregate) -> Self {
        Self {
            table: aggregate.table.to_string(),
            aggregate_type: aggregate.aggregate_type.clone(),
            id: String::from_utf8_lossy(&aggregate.id).into_owned(),
        }
    }

    /// The aggregate it names; `None` when its table is not `database.table`.
    pub fn aggregate(&self) -> Option<Aggregate> {
        let (database, table) = self.table.split_once('.')?;
        Some(Aggregate {
            table: Arc::new(TableName {
                database: database.to_string(),
                table: table.to_string(),
            }),
            aggregate_type: self.aggregate_type.clone(),
            id: self.id.as_bytes().to_vec(),
        })
    }

    /// Whether it names `aggregate`.
    pub fn names(&self, aggregate: &Aggregate) -> bool {
        self.id.as_bytes() == aggregate.id
            && self.aggregate_type == aggregate.aggregate_type
            && self.table == aggregate.table.to_string()
    }
}

/// What the leader did with a request for one aggregate.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// `Released`, `Dropped` or `Refused`.
    pub kind: Kind,
    /// Which aggregate.
    pub aggregate: Aggregate,
    /// The request's id.
    pub request: String,
    /// The binlog position at which it took effect (the end of the last transaction
    /// read before it): later events of the aggregate go straight through.
    pub position: String,
    /// A refusal's cause, a drop's reason, or what a release did.
    pub reason: String,
    /// Its offset on the parking topic.
    pub offset: i64,
}

/// A record of the parking topic, read back.
#[derive(Debug, Clone)]
pub enum Entry {
    /// A parked event.
    Event(Parked),
    /// An operator's request.
    Request(Request),
    /// What the leader did with one.
    Outcome(Outcome),
}

impl Entry {
    /// Reads a parking record; `Err` says what is missing (a record someone else wrote
    /// to the topic is an error, never skipped: the set would be wrong without it).
    pub fn read(
        key: Option<&[u8]>,
        value: Option<&[u8]>,
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
        let key = key.ok_or("no key")?.to_vec();
        if kind == Kind::Request {
            let mut request: Request = serde_json::from_slice(value.unwrap_or_default())
                .map_err(|e| format!("a request whose value is not one: {e}"))?;
            request.id = String::from_utf8(key).map_err(|_| "a request id is not UTF-8")?;
            return Ok(Entry::Request(request));
        }
        let table = text(TABLE)?;
        let (database, table) = table
            .split_once('.')
            .ok_or_else(|| format!("{TABLE} {table:?} is not database.table"))?;
        let aggregate_type = match get(AGGREGATE_TYPE) {
            Some(_) => Some(text(AGGREGATE_TYPE)?),
            None => None,
        };
        let aggregate = Aggregate {
            table: Arc::new(TableName {
                database: database.to_string(),
                table: table.to_string(),
            }),
            aggregate_type,
            id: key,
        };
        if matches!(kind, Kind::Released | Kind::Dropped | Kind::Refused) {
            return Ok(Entry::Outcome(Outcome {
                kind,
                aggregate,
                request: text(REQUEST)?,
                position: text(POSITION)?,
                reason: text(REASON)?,
                offset,
            }));
        }
        Ok(Entry::Event(Parked {
            kind,
            aggregate,
            event_id: get(EVENT_ID).map(|v| EventId(v.clone())),
            position: text(POSITION)?,
            reason: text(REASON)?,
            topic: match get(TOPIC) {
                Some(_) => Some(text(TOPIC)?),
                None => None,
            },
            timestamp_ms,
            offset,
        }))
    }
}

/// The headers of an outcome record (its key is the aggregate id).
pub(crate) fn outcome_headers(
    kind: Kind,
    aggregate: &Aggregate,
    request: &str,
    position: &str,
    reason: &str,
) -> Vec<(String, Vec<u8>)> {
    let mut h = vec![
        (KIND.to_string(), kind.as_str().as_bytes().to_vec()),
        (TABLE.to_string(), aggregate.table.to_string().into_bytes()),
    ];
    if let Some(t) = &aggregate.aggregate_type {
        h.push((AGGREGATE_TYPE.to_string(), t.as_bytes().to_vec()));
    }
    h.push((REQUEST.to_string(), request.as_bytes().to_vec()));
    h.push((POSITION.to_string(), position.as_bytes().to_vec()));
    h.push((REASON.to_string(), reason.as_bytes().to_vec()));
    h
}

/// The headers of a request record (its key is the request id, its value the request).
pub fn request_headers() -> Vec<(String, Vec<u8>)> {
    vec![(KIND.to_string(), Kind::Request.as_str().as_bytes().to_vec())]
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
        let parked = event(Entry::read(Some(b"42"), None, &labels.headers(), 17, 9));
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
        let parked = event(Entry::read(Some(b"42"), None, &labels.headers(), 0, 0));
        assert_eq!(parked.aggregate.aggregate_type, None);
        assert!(Entry::read(None, None, &labels.headers(), 0, 0).is_err());
        assert!(Entry::read(Some(b"42"), None, &[], 0, 0).is_err());

        // An outcome and a request read back as written.
        let h = outcome_headers(
            Kind::Released,
            &untyped,
            "r-1",
            "mysql-bin.000003:99",
            "3 events",
        );
        let Ok(Entry::Outcome(o)) = Entry::read(Some(b"42"), None, &h, 0, 5) else {
            panic!("not an outcome")
        };
        assert_eq!(
            (o.kind, o.request.as_str(), o.offset),
            (Kind::Released, "r-1", 5)
        );
        assert_eq!(o.aggregate, untyped);
        let request = Request {
            id: String::new(),
            action: Action::Drop,
            aggregates: vec![AggregateName::of(&untyped)],
            by: "ops".into(),
            reason: "never to be delivered".into(),
        };
        let value = serde_json::to_vec(&request).unwrap();
        let Ok(Entry::Request(r)) =
            Entry::read(Some(b"r-2"), Some(&value), &request_headers(), 0, 6)
        else {
            panic!("not a request")
        };
        assert_eq!(r.id, "r-2");
        assert!(r.aggregates[0].names(&untyped));
        assert_eq!(
            Request {
                id: String::new(),
                ..r
            },
            request
        );
    }

    fn event(entry: Result<Entry, String>) -> Parked {
        match entry {
            Ok(Entry::Event(p)) => p,
            other => panic!("not an event: {other:?}"),
        }
    }
}
