//! Route stage: an `OutboxEvent` becomes a Kafka record — topic from the route value
//! (regex + replacement, `outbox.event.${routedByValue}` by default), key = aggregate
//! id, event id and additional columns as headers, a tombstone for an empty payload when
//! asked, and the value in the configured format (`encode/`: the payload as stored, a
//! JSON envelope, Avro, a CloudEvent).

mod config;
mod encode;
pub mod parking;

pub use config::RouteConfig;
pub use encode::{
    check as check_value, encoder, AvroError, Encoder, FormatError, RegistryError, ValueConfig,
};

use encode::JsonValues;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::outbox::{
    Aggregate, EventId, InvalidEvent, MappedTransaction, OutboxEvent, RowCopy, Rules,
};
use crate::position::Position;

/// A record ready for a sink.
#[derive(Debug, Clone)]
pub struct Record {
    /// Destination topic (shared: a handful of topics carry millions of records).
    pub topic: Arc<str>,
    /// Record key (aggregate id).
    pub key: Vec<u8>,
    /// Value; `None` is a null value.
    pub value: Option<Vec<u8>>,
    /// Headers in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Record timestamp, ms since epoch.
    pub timestamp_ms: i64,
    /// Explicit partition; `None` lets the producer partition by key.
    pub partition: Option<i32>,
    /// The event this record carries, for error messages.
    pub event: EventRef,
    /// The value goes to the claim check's bucket; the record carries a reference.
    pub claim_check: bool,
    /// Its span, when tracing is on and it is sampled (`monitor::traces`).
    pub trace: Option<Box<crate::monitor::traces::EventTrace>>,
}

impl Record {
    /// Bytes the producer holds for it: key, value and headers.
    pub fn size(&self) -> usize {
        self.key.len()
            + self.value.as_ref().map_or(0, Vec::len)
            + self
                .headers
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
    }
}

/// Enough of an event to name it in an error.
#[derive(Debug, Clone)]
pub struct EventRef {
    /// Outbox table.
    pub table: std::sync::Arc<crate::position::TableName>,
    /// Binlog `file:offset` of the row.
    pub position: String,
    /// Event id.
    pub id: crate::outbox::EventId,
    /// The route value (aggregate type) of an outbox event; `None` for the router's own
    /// records (dead letters, audit entries).
    pub aggregate_type: Option<String>,
    /// The trace its record went out in, once Kafka's answer for it is an error (log
    /// lines about it then carry `trace_id` / `span_id`); `None` before.
    pub trace: Option<crate::monitor::traces::LogIds>,
}

impl Record {
    /// Whether it carries an event of `aggregate`.
    pub fn is_of(&self, aggregate: &Aggregate) -> bool {
        self.key == aggregate.id
            && self.event.aggregate_type == aggregate.aggregate_type
            && self.event.table == aggregate.table
    }
}

/// An event that cannot be a record, and where it stood: a policy that keeps order
/// (parking) puts it back between the records of its transaction.
#[derive(Debug)]
pub struct InvalidAt {
    /// How many of the batch's records came before it.
    pub records_before: usize,
    /// The event and what is wrong with it.
    pub event: InvalidEvent,
}

/// A transaction's records and the position that is safe once all are acknowledged.
#[derive(Debug)]
pub struct Batch {
    /// Checkpoint after this batch.
    pub end: Position,
    /// Delivered up to here though `end` is held before a prepared XA branch.
    pub delivered_through: Option<Position>,
    /// Commit time of the transaction (ms since epoch).
    pub commit_time_ms: i64,
    /// Records in commit order.
    pub records: Vec<Record>,
    /// Events that cannot be records, in commit order, for the `on_invalid` policy.
    pub invalid: Vec<InvalidAt>,
    /// When the transaction was routed, for the pipeline's stage timings.
    pub routed_at: std::time::Instant,
    /// False for a streamed part of a larger transaction: the checkpoint may not move
    /// past it, nor may a Kafka transaction commit after it.
    pub complete: bool,
    /// Told once it and every batch before it count: acknowledged (at-least-once), or
    /// committed with their Kafka transaction (exactly-once). What must follow a
    /// delivery waits on it.
    pub settled: Option<tokio::sync::oneshot::Sender<()>>,
}

/// Turns events into records.
#[derive(Debug, Clone)]
pub struct Router {
    rules: Arc<Rules>,
    event_id_header: String,
    /// Records above this are invalid rows (librdkafka's `message.max.bytes`).
    max_record_bytes: usize,
    /// The value format.
    encoder: Arc<dyn Encoder>,
    /// Which values go to the claim check's bucket, when it is configured.
    offload: Option<Arc<dyn Offload>>,
    /// Topic per route value, so the regex runs once per aggregate type, not per event.
    topics: Arc<Mutex<HashMap<String, Arc<str>>>>,
    /// Put before every topic (`run --shadow`); empty otherwise.
    topic_prefix: String,
    /// A header every record carries besides the event's (a replay's id).
    extra_header: Option<(String, Vec<u8>)>,
}

/// Which values leave their record for the claim check's bucket, as the claim check
/// decides (`sink::claim_check`); the route asks where the aggregate type is still
/// known, since such a value may exceed `message.max.bytes` and its reference does not.
pub trait Offload: std::fmt::Debug + Send + Sync {
    /// Whether a value of `len` bytes of an event routed by `aggregate_type` (none for a
    /// dead letter) goes to the bucket.
    fn takes(&self, aggregate_type: Option<&str>, len: usize) -> bool;
}

/// Route values remembered with their topic; past this the regex runs for new ones.
const TOPIC_CACHE_ENTRIES: usize = 10_000;

impl Router {
    /// A router following `rules` with the configured event-id header; records over
    /// `max_record_bytes` are invalid.
    pub fn new(rules: Arc<Rules>, cfg: &RouteConfig, max_record_bytes: usize) -> Self {
        Self {
            encoder: Arc::new(JsonValues::outermost(rules.clone())),
            rules,
            event_id_header: cfg.event_id_header.clone(),
            max_record_bytes,
            offload: None,
            topics: Arc::default(),
            topic_prefix: match cfg.shadow {
                true => cfg.shadow_prefix.clone(),
                false => String::new(),
            },
            extra_header: None,
        }
    }

    /// Adds `header` to every record (a replay's id, for `replay` and `recover`).
    pub fn with_header(mut self, header: Option<(String, Vec<u8>)>) -> Self {
        self.extra_header = header;
        self
    }

    /// Encodes values with `encoder` (`encode::encoder` builds the configured one);
    /// the payload as stored, or its envelope, otherwise.
    pub fn with_encoder(mut self, encoder: Arc<dyn Encoder>) -> Self {
        self.encoder = encoder;
        self
    }

    /// Marks the values `offload` takes for the claim check.
    pub fn with_offload(mut self, offload: Option<Arc<dyn Offload>>) -> Self {
        self.offload = offload;
        self
    }

    /// How much of an invalid row its dead letter copies: with a claim check every byte
    /// (the bucket takes what the dead-letter topic cannot), else columns capped.
    pub fn dead_letter_copy(&self) -> RowCopy {
        match self.offload {
            Some(_) => RowCopy::Whole,
            None => RowCopy::Capped,
        }
    }

    /// Routes every event of a transaction; events that cannot be routed join the
    /// transaction's invalid rows. Fails only when the schema registry does.
    pub fn route(&self, txn: MappedTransaction) -> Result<Batch, RegistryError> {
        let commit = txn.commit_time_ms;
        let mut invalid = Vec::new();
        let mut records = Vec::with_capacity(txn.events.len());
        let mut topics = self.topics.lock().unwrap_or_else(|e| e.into_inner());
        for e in txn.events {
            let routed = match e {
                Ok(e) => self.record(e, commit, &mut topics)?,
                Err(bad) => Err(bad),
            };
            match routed {
                Ok(r) => records.push(r),
                Err(event) => invalid.push(InvalidAt {
                    records_before: records.len(),
                    event,
                }),
            }
        }
        Ok(Batch {
            end: txn.end,
            delivered_through: txn.delivered_through,
            commit_time_ms: commit,
            records,
            invalid,
            routed_at: std::time::Instant::now(),
            complete: txn.complete,
            settled: None,
        })
    }

    /// The dead-letter record for an invalid row: raw row, reason and position as JSON,
    /// the same event id header, keyed by event id. A value over the claim check's
    /// threshold (a large row) goes to the bucket like any other.
    pub fn dead_letter(&self, topic: &str, bad: &InvalidEvent, commit_time_ms: i64) -> Record {
        let event_id = bad.event_id.clone().unwrap_or(EventId(Vec::new()));
        let value = serde_json::json!({
            "table": bad.table.to_string(),
            "position": bad.position,
            "event_id": bad.event_id.as_ref().map(|e| e.to_string()),
            "reason": bad.reason,
            "row": bad.row,
        })
        .to_string()
        .into_bytes();
        let claim_check = self
            .offload
            .as_ref()
            .is_some_and(|o| o.takes(None, value.len()));
        let headers = self.headers(
            bad.event_id.as_ref(),
            vec![
                ("reason".to_string(), bad.reason.clone().into_bytes()),
                ("position".to_string(), bad.position.clone().into_bytes()),
                ("table".to_string(), bad.table.to_string().into_bytes()),
            ],
        );
        Record {
            topic: topic.into(),
            key: event_id.0.clone(),
            value: Some(value),
            headers,
            timestamp_ms: commit_time_ms,
            partition: None,
            event: EventRef {
                table: bad.table.clone(),
                position: bad.position.clone(),
                id: event_id,
                aggregate_type: None,
                trace: None,
            },
            claim_check,
            trace: None,
        }
    }

    /// The topic for a route value, checked against Kafka's rules.
    fn topic(
        &self,
        route_value: &str,
        cache: &mut HashMap<String, Arc<str>>,
    ) -> Result<Arc<str>, String> {
        if let Some(topic) = cache.get(route_value) {
            return Ok(topic.clone());
        }
        let mut topic = self.rules.topic(route_value);
        if !self.topic_prefix.is_empty() {
            topic.insert_str(0, &self.topic_prefix);
        }
        crate::kafka::check_topic(&topic)?;
        let topic: Arc<str> = topic.into();
        if cache.len() < TOPIC_CACHE_ENTRIES {
            cache.insert(route_value.to_string(), topic.clone());
        }
        Ok(topic)
    }

    fn record(
        &self,
        e: OutboxEvent,
        commit_time_ms: i64,
        topics: &mut HashMap<String, Arc<str>>,
    ) -> Result<Result<Record, InvalidEvent>, RegistryError> {
        let topic = match self.topic(&e.route_value, topics) {
            Ok(topic) => topic,
            Err(reason) => return Ok(Err(self.invalid(&e, reason))),
        };
        let mut e = e;
        let timestamp_ms = e.timestamp_ms.unwrap_or(commit_time_ms);
        // A payload that moves into the value is checked before, so an invalid event still
        // carries it; other values are checked once encoded.
        let moved = self.encoder.moves_payload();
        if moved {
            let len = e.payload.as_ref().map_or(0, Vec::len);
            if let Err(reason) = self.fits(&e, len) {
                return Ok(Err(self.invalid(&e, reason)));
            }
        }
        // Debezium's tombstone is a null value in every format: nothing to encode or wrap.
        let value = match self.is_tombstone(&e) {
            true => None,
            false => match self.encoder.encode(&mut e, &topic, timestamp_ms)? {
                Ok(value) => value,
                Err(reason) => return Ok(Err(self.invalid(&e, reason))),
            },
        };
        if !moved {
            if let Err(reason) = self.fits(&e, value.as_ref().map_or(0, Vec::len)) {
                return Ok(Err(self.invalid(&e, reason)));
            }
        }
        let claim_check = value.as_ref().is_some_and(|v| self.offloads(&e, v.len()));
        let headers = self.headers(Some(&e.id), e.headers);
        Ok(Ok(Record {
            topic,
            key: e.key,
            value,
            headers,
            timestamp_ms,
            partition: e.partition,
            event: EventRef {
                table: e.table,
                position: e.position,
                id: e.id,
                aggregate_type: Some(e.route_value),
                trace: None,
            },
            claim_check,
            trace: None,
        }))
    }

    /// A record's headers, all assembled here: the event id (`route.event_id_header`),
    /// then the event's own (from outbox columns: Debezium's header placements, the
    /// trace context as `traceparent` / `tracestate`; a dead letter's reason, position
    /// and table), then the router's extra one (a replay's id).
    fn headers(
        &self,
        id: Option<&EventId>,
        event: Vec<(String, Vec<u8>)>,
    ) -> Vec<(String, Vec<u8>)> {
        let mut headers = Vec::with_capacity(2 + event.len());
        headers.extend(id.map(|id| (self.event_id_header.clone(), id.0.clone())));
        headers.extend(event);
        headers.extend(self.extra_header.iter().cloned());
        headers
    }

    /// Whether the claim check takes a value of `len` bytes of this event.
    fn offloads(&self, e: &OutboxEvent, len: usize) -> bool {
        self.offload
            .as_ref()
            .is_some_and(|o| o.takes(Some(&e.route_value), len))
    }

    /// An empty payload (NULL or blank) becomes a tombstone when
    /// `route.tombstone.on.empty.payload` asks for it.
    fn is_tombstone(&self, e: &OutboxEvent) -> bool {
        self.rules.tombstone_on_empty
            && e.payload
                .as_ref()
                .is_none_or(|p| p.iter().all(u8::is_ascii_whitespace))
    }

    /// An event that cannot be a record, its row copied as `dead_letter_copy` says.
    fn invalid(&self, e: &OutboxEvent, reason: String) -> InvalidEvent {
        InvalidEvent::of(e, reason, self.dead_letter_copy())
    }

    /// Kafka would reject a record over the producer's `message.max.bytes`; a value the
    /// claim check takes leaves only its reference in the record.
    fn fits(&self, e: &OutboxEvent, value_len: usize) -> Result<(), String> {
        if self.offloads(e, value_len) {
            return Ok(());
        }
        let size = e.key.len() + value_len + e.id.0.len();
        if size > self.max_record_bytes {
            return Err(format!(
                "record of {size} bytes exceeds the producer's message.max.bytes ({}); Kafka would reject it",
                self.max_record_bytes
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::encode::{CloudEvents, CloudEventsConfig, CloudEventsMode, CloudEventsValues};
    use super::*;

    /// Every record's headers come from one place: the id first, then the event's,
    /// then the router's extra one; a dead letter's the same way.
    #[test]
    fn headers_are_assembled_in_one_order() {
        let rules =
            Arc::new(Rules::from_columns(&Default::default(), "t.${routedByValue}").unwrap());
        let replay = ("replay".to_string(), b"r-1".to_vec());
        let router =
            Router::new(rules, &RouteConfig::default(), 1 << 20).with_header(Some(replay.clone()));
        let id = EventId(b"e-1".to_vec());
        let names = |h: &[(String, Vec<u8>)]| h.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        let headers = router.headers(Some(&id), vec![("type".into(), b"Created".to_vec())]);
        assert_eq!(names(&headers), ["id", "type", "replay"]);
        let bad = InvalidEvent {
            table: Arc::new(crate::position::TableName {
                database: "shop".into(),
                table: "outbox".into(),
            }),
            position: "mysql-bin.000001:4".into(),
            event_id: Some(id),
            reason: "bad".into(),
            row: serde_json::Value::Null,
            aggregate: None,
        };
        let dead = router.dead_letter("dlq", &bad, 0);
        assert_eq!(
            names(&dead.headers),
            ["id", "reason", "position", "table", "replay"]
        );
    }

    /// With Debezium's tombstone option an empty payload stays a tombstone under
    /// CloudEvents (no event, no `ce_` headers); a payload becomes a CloudEvent.
    #[test]
    fn cloudevents_leave_tombstones_alone() {
        let options = [("route.tombstone.on.empty.payload", "true")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let rules = Arc::new(Rules::from_debezium(&options).unwrap());
        let ce = CloudEvents::new(&CloudEventsConfig {
            mode: CloudEventsMode::Binary,
            ..CloudEventsConfig::default()
        })
        .unwrap();
        let data = Box::new(JsonValues::inner(rules.clone()));
        let router = Router::new(rules, &RouteConfig::default(), 1 << 20)
            .with_encoder(Arc::new(CloudEventsValues::new(ce, data)));
        let event =
            |payload: &[u8]| OutboxEvent::sample("o-1", Some(payload), &[("type", "Created")]);
        let mut topics = HashMap::new();
        let tombstone = router.record(event(b" "), 0, &mut topics).unwrap().unwrap();
        assert_eq!(tombstone.value, None);
        assert!(tombstone.headers.iter().all(|(k, _)| !k.starts_with("ce_")));
        let wrapped = router
            .record(event(b"{}"), 0, &mut topics)
            .unwrap()
            .unwrap();
        assert_eq!(wrapped.value.as_deref(), Some(&b"{}"[..]));
        assert!(wrapped
            .headers
            .iter()
            .any(|(k, v)| k == "ce_type" && v == b"Created"));
    }
}
