//! One event's span: planned when the event is routed (so the record's `traceparent`
//! names the router's span as the consumer's parent) and built whole once Kafka has
//! answered — nothing is held open while the record travels but these few fields.

use std::time::{Duration, SystemTime};

use opentelemetry::trace::{Event, SpanContext, SpanId, SpanKind, Status};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

/// A sampled event's span on its way: the router's span context, its parent (the
/// application's span, when the row carried one) and the times of its stages.
#[derive(Debug, Clone)]
pub struct EventTrace {
    /// The router's span: the trace it continues (or starts) and its own id.
    pub(super) context: SpanContext,
    /// The application's span the row named, if any.
    pub(super) parent: Option<SpanId>,
    /// The binlog commit time (whole seconds on MariaDB, the server's clock).
    pub(super) committed: SystemTime,
    /// When the router read and routed it.
    pub(super) read: SystemTime,
    /// When it was handed to the producer.
    pub(super) handed: Option<SystemTime>,
    /// The topic Kafka answered for it on: where it went, not where it was routed (a
    /// parked event's record goes to the parking topic).
    pub(super) topic: Option<String>,
    /// Where Kafka wrote it, once it said.
    pub(super) written: Option<Written>,
    pub(super) attributes: Vec<KeyValue>,
}

/// A record's place in its topic, and when Kafka reported it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Written {
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) at: SystemTime,
    /// Written into a Kafka transaction: it counts only once that commits.
    pub(super) in_transaction: bool,
}

/// How an event's journey ended.
pub(super) enum Ending {
    /// Acknowledged by Kafka (at-least-once).
    Acknowledged,
    /// Its Kafka transaction committed (exactly-once).
    Committed,
    /// Not delivered (the record failed, or its Kafka transaction was aborted): the
    /// span says so and claims no delivery.
    Failed(String),
}

impl EventTrace {
    /// The router's span id: what the record's `traceparent` names.
    pub fn span_id(&self) -> SpanId {
        self.context.span_id()
    }

    /// Handed to the producer now.
    pub fn handed(&mut self) {
        self.handed = Some(SystemTime::now());
    }

    /// Kafka answered for its record on `topic` (written or not).
    pub fn answered_for(&mut self, topic: &str) {
        self.topic = Some(topic.to_string());
    }

    /// Kafka wrote it at `partition` / `offset` (reported now), into a Kafka transaction
    /// or not.
    pub fn written(&mut self, partition: i32, offset: i64, in_transaction: bool) {
        self.written = Some(Written {
            partition,
            offset,
            at: SystemTime::now(),
            in_transaction,
        });
    }

    /// The finished span. It starts at the binlog commit (earlier than the read when the
    /// server's clock runs ahead: then at the read) and ends when the journey did.
    pub(super) fn span(
        self,
        ending: Ending,
        scope: &opentelemetry::InstrumentationScope,
    ) -> SpanData {
        let now = SystemTime::now();
        let start = self.committed.min(self.read);
        let mut events = vec![
            Event::new("binlog commit", self.committed, Vec::new(), 0),
            Event::new("read by the router", self.read, Vec::new(), 0),
        ];
        if let Some(handed) = self.handed {
            events.push(Event::new("handed to Kafka", handed, Vec::new(), 0));
        }
        let mut attributes = self.attributes;
        if let Some(topic) = self.topic {
            attributes.push(KeyValue::new("messaging.destination.name", topic));
        }
        if let Some(w) = self.written {
            let place = vec![
                KeyValue::new(
                    "messaging.destination.partition.id",
                    w.partition.to_string(),
                ),
                KeyValue::new("messaging.kafka.offset", w.offset),
            ];
            // The span claims the place only when the record counts there: written into a
            // transaction that did not commit, the place is only on the event.
            if !matches!(ending, Ending::Failed(_)) {
                attributes.extend(place.iter().cloned());
            }
            let name = match w.in_transaction {
                true => "written to Kafka",
                false => "acknowledged by Kafka",
            };
            events.push(Event::new(name, w.at, place, 0));
        }
        let status = match &ending {
            Ending::Acknowledged => Status::Unset,
            Ending::Committed => {
                events.push(Event::new(
                    "Kafka transaction committed",
                    now,
                    Vec::new(),
                    0,
                ));
                Status::Unset
            }
            Ending::Failed(why) => {
                events.push(Event::new(
                    "not delivered",
                    now,
                    vec![KeyValue::new("reason", why.clone())],
                    0,
                ));
                Status::error(why.clone())
            }
        };
        let end = match (&ending, self.written) {
            (Ending::Acknowledged, Some(w)) => w.at,
            _ => now,
        };
        let mut span_events = SpanEvents::default();
        span_events.events = events;
        SpanData {
            span_context: self.context,
            parent_span_id: self.parent.unwrap_or(SpanId::INVALID),
            parent_span_is_remote: self.parent.is_some(),
            span_kind: SpanKind::Producer,
            name: "outbox event".into(),
            start_time: start,
            end_time: end.max(start),
            attributes,
            dropped_attributes_count: 0,
            events: span_events,
            links: SpanLinks::default(),
            status,
            instrumentation_scope: scope.clone(),
        }
    }
}

/// A binlog commit time (ms since the epoch) as a time.
pub(super) fn at_ms(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}
