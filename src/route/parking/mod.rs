//! Ordered parking (`outbox.on_invalid = "park"`): an event that cannot be a record
//! holds back its own aggregate — it and every later event of that aggregate go to the
//! parking topic, in commit order — while every other aggregate flows and the
//! checkpoint moves on.
//!
//! The set of parked aggregates is a fact of the fleet, kept on Kafka: it is the
//! parking topic itself. Its records ride the same Kafka transaction as the commit
//! marker (exactly-once) or are acknowledged before the checkpoint moves past them
//! (at-least-once, like every record of a transaction), so the set a run reads back at
//! its start (`load.rs`, after its start position is fixed and, exactly-once, after its
//! `init_transactions` fenced the previous leader) covers every position it may resume
//! from: a standby taking over, or a pool moving a source, parks what the old leader
//! parked from the first event on.

mod load;
mod record;
mod refusal;
mod release;
mod watch;
mod write;

pub use load::{load, read_all, RawRecord, ReadBack};
pub use record::{request_headers, Action, AggregateName, Entry, Kind, Outcome, Parked, Request};
pub use refusal::{Refusal, RefusalScope};
pub use release::{outcome_record, release_records, ParkedCopy};
pub use watch::watch;
pub use write::send_proven;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tracing::warn;

use super::{Batch, InvalidAt, Record, Router};
use crate::monitor::traces::{span_id_field, trace_id_field, LogIds};
use crate::outbox::{Aggregate, InvalidEvent, ParkingConfig};
use crate::position::Position;
use record::Labels;

/// Why parking cannot go on: the router stops, its checkpoint before the transaction.
#[derive(Debug, thiserror::Error)]
pub enum ParkingError {
    #[error("{0}; with on_invalid = \"park\" a row must name its aggregate (a text aggregate id) to be parked, so this one stops the router like `fail`. Fix the row (or the mapping), then start again")]
    NoAggregate(Box<InvalidEvent>),
    #[error("parking {what} would exceed outbox.parking.{key} = {limit} ({at}): so many bad events look like a broken deploy, not bad rows. Fix the cause, then release or drop what is parked (`outbox-router parked list`), or raise the limit")]
    Full {
        what: &'static str,
        key: &'static str,
        limit: u64,
        at: String,
    },
    #[error("the parking topic {topic} holds a record this router cannot read (offset {offset}): {why}. Only the router writes there; the set of parked aggregates cannot be known without it")]
    Unreadable {
        topic: String,
        offset: i64,
        why: String,
    },
    #[error("cannot read the parking topic {topic}: {reason}")]
    Read { topic: String, reason: String },
    #[error("cannot write to the parking topic {topic}: {reason}")]
    Write { topic: String, reason: String },
}

impl ParkingError {
    /// A read of the topic may succeed later; the rest need an operator.
    pub fn is_transient(&self) -> bool {
        matches!(self, ParkingError::Read { .. } | ParkingError::Write { .. })
    }
}

/// One parked aggregate.
#[derive(Debug, Clone)]
pub struct Held {
    /// Whose events wait.
    pub aggregate: Aggregate,
    /// How many of them.
    pub events: u64,
    /// Timestamp of the first (ms since epoch).
    pub since_ms: i64,
    /// Why the first could not be a record.
    pub reason: String,
    /// The first's event id, for the reason of those held behind it.
    pub first_event: String,
}

/// The parked aggregates of one source, and the diversion of their events.
#[derive(Debug)]
pub struct Parking {
    topic: Arc<str>,
    max_aggregates: u64,
    max_events: u64,
    /// By aggregate id: ids are what records carry as their key (no allocation to look
    /// one up); a handful of aggregates may share one across tables or types.
    held: HashMap<Vec<u8>, Vec<Held>>,
    aggregates: u64,
    events: u64,
    /// Where each aggregate released or dropped before was settled: an event of it read
    /// again from before there (at-least-once resumes behind its last checkpoint) was
    /// settled by the release, and is not parked again.
    settled: HashMap<Aggregate, Position>,
    /// Requests read back at the start, and which of their aggregates were answered.
    requests: Vec<Request>,
    answered: HashSet<(String, Aggregate)>,
    /// Records Kafka refused in an earlier run, waiting for their event to come again.
    refusals: Vec<Refusal>,
    /// Topics Kafka refuses every record for, by the reason their events park with.
    refused_topics: HashMap<Arc<str>, String>,
}

impl Parking {
    /// Nothing parked yet, under `config`'s topic and bounds.
    pub fn empty(config: &ParkingConfig) -> Self {
        Self {
            topic: config.topic.as_str().into(),
            max_aggregates: config.max_aggregates,
            max_events: config.max_events,
            held: HashMap::new(),
            aggregates: 0,
            events: 0,
            settled: HashMap::new(),
            requests: Vec::new(),
            answered: HashSet::new(),
            refusals: Vec::new(),
            refused_topics: HashMap::new(),
        }
    }

    /// Parks the aggregate of the record Kafka refused when its event comes again; for a
    /// topic that refuses every record, the aggregate of every record for it from here
    /// on (records read again from before the refused one may have been refused too).
    pub fn refuse(&mut self, refusal: Refusal) {
        match refusal.scope {
            RefusalScope::Record | RefusalScope::TooLarge => self.refusals.push(refusal),
            RefusalScope::Topic => {
                let reason = refusal.reason();
                self.refused_topics.insert(refusal.topic, reason);
            }
        }
    }

    /// The parked aggregate `name` names, if it is parked.
    pub fn find(&self, name: &AggregateName) -> Option<&Held> {
        self.held
            .get(name.id.as_bytes())?
            .iter()
            .find(|h| name.names(&h.aggregate))
    }

    /// Un-parks `aggregate`, settled at `at` (a release or a drop took effect there);
    /// what it held.
    pub fn unpark(&mut self, aggregate: &Aggregate, at: Option<Position>) -> Option<Held> {
        let same = self.held.get_mut(&aggregate.id)?;
        let i = same.iter().position(|h| &h.aggregate == aggregate)?;
        let held = same.remove(i);
        if same.is_empty() {
            self.held.remove(&aggregate.id);
        }
        self.aggregates -= 1;
        self.events -= held.events;
        if let Some(at) = at {
            self.settled.insert(aggregate.clone(), at);
            // A release Kafka took shows its topics writable again; a topic that still
            // refuses fails the next record, and that run's refusal parks again.
            self.refused_topics.clear();
        }
        Some(held)
    }

    /// Requests read back at the start that name an aggregate still parked and not
    /// answered for it: the previous leader stopped before it carried them out.
    pub fn pending(&self) -> Vec<Request> {
        self.requests
            .iter()
            .filter_map(|r| {
                let open: Vec<AggregateName> = r
                    .aggregates
                    .iter()
                    .filter(|name| {
                        self.find(name).is_some_and(|h| {
                            !self.answered.contains(&(r.id.clone(), h.aggregate.clone()))
                        })
                    })
                    .cloned()
                    .collect();
                (!open.is_empty()).then(|| Request {
                    aggregates: open,
                    ..r.clone()
                })
            })
            .collect()
    }

    /// The parking topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Aggregates parked.
    pub fn aggregates(&self) -> u64 {
        self.aggregates
    }

    /// Events parked.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// When the oldest parked event was written (ms since epoch), if any is.
    pub fn oldest_ms(&self) -> Option<i64> {
        self.held.values().flatten().map(|h| h.since_ms).min()
    }

    /// Every parked aggregate.
    pub fn held(&self) -> impl Iterator<Item = &Held> {
        self.held.values().flatten()
    }

    /// Puts the batch's invalid events back in their place as parking records, parking
    /// their aggregates, and diverts every record of a parked aggregate to the parking
    /// topic, keeping commit order. Costs one check per batch while nothing is parked.
    pub fn divert(&mut self, router: &Router, batch: &mut Batch) -> Result<(), ParkingError> {
        if self.held.is_empty()
            && batch.invalid.is_empty()
            && self.refusals.is_empty()
            && self.refused_topics.is_empty()
        {
            return Ok(());
        }
        let commit_time_ms = batch.commit_time_ms;
        let end = batch.end.clone();
        let records = std::mem::take(&mut batch.records);
        let mut invalid = std::mem::take(&mut batch.invalid).into_iter().peekable();
        let mut out = Vec::with_capacity(records.len() + invalid.len());
        for (i, record) in records.into_iter().enumerate() {
            while let Some(InvalidAt { event, .. }) = invalid.next_if(|b| b.records_before <= i) {
                out.extend(self.park_invalid(router, event, commit_time_ms, &end)?);
            }
            let refused = self.refused(&record);
            match (self.first_event_of(&record), refused) {
                (Some(first), _) => {
                    let reason = format!("held behind event {first} of its aggregate");
                    out.push(self.hold(record, reason)?);
                }
                (None, Some((reason, omit))) => {
                    let parked = self.park_refused(record, reason, commit_time_ms, &end)?;
                    out.push(match omit {
                        true => without_value(parked),
                        false => parked,
                    })
                }
                (None, None) => out.push(record),
            }
        }
        for InvalidAt { event, .. } in invalid {
            out.extend(self.park_invalid(router, event, commit_time_ms, &end)?);
        }
        batch.records = out;
        Ok(())
    }

    /// Whether `record`'s aggregate is parked.
    pub fn holds(&self, record: &Record) -> bool {
        self.first_event_of(record).is_some()
    }

    /// Whether `aggregate` is parked.
    pub fn holds_aggregate(&self, aggregate: &Aggregate) -> bool {
        self.held
            .get(&aggregate.id)
            .is_some_and(|same| same.iter().any(|h| &h.aggregate == aggregate))
    }

    /// The first parked event of the aggregate `record` belongs to, if it is parked.
    fn first_event_of(&self, record: &Record) -> Option<String> {
        let same_id = self.held.get(&record.key)?;
        same_id
            .iter()
            .find(|h| record.is_of(&h.aggregate))
            .map(|h| h.first_event.clone())
    }

    /// The parking record of an event that cannot be a record; its aggregate is parked
    /// from here on.
    fn park_invalid(
        &mut self,
        router: &Router,
        bad: InvalidEvent,
        commit_time_ms: i64,
        end: &Position,
    ) -> Result<Option<Record>, ParkingError> {
        let Some(aggregate) = bad.aggregate.as_deref().cloned() else {
            return Err(ParkingError::NoAggregate(Box::new(bad)));
        };
        let event = bad
            .event_id
            .as_ref()
            .map_or_else(|| "(no id)".to_string(), ToString::to_string);
        if !self.holds_aggregate(&aggregate) {
            if let Some(at) = self.settled_before(&aggregate, end) {
                warn!(error = %bad, %aggregate, released_or_dropped_at = %at, "invalid event read again from before its aggregate was released or dropped: that settled it, so it is not parked again");
                return Ok(None);
            }
            self.start_parking(
                Held {
                    aggregate: aggregate.clone(),
                    events: 0,
                    since_ms: commit_time_ms,
                    reason: bad.reason.clone(),
                    first_event: event,
                },
                || bad.to_string(),
            )?;
            warn!(error = %bad, %aggregate, topic = %self.topic, "aggregate parked: this event and every later one of the aggregate go to the parking topic in order; every other aggregate goes on");
        } else {
            warn!(error = %bad, %aggregate, "invalid event of a parked aggregate parked behind the others");
        }
        self.count(&aggregate, || bad.to_string())?;
        // The dead letter's value (table, position, id, reason and the row), keyed by
        // the aggregate so that its events share one partition, in order.
        let mut record = router.dead_letter(&self.topic, &bad, commit_time_ms);
        record.key = aggregate.id.clone();
        let labels = Labels {
            kind: Kind::Invalid,
            aggregate: &aggregate,
            event_id: bad.event_id.as_ref(),
            position: &bad.position,
            reason: &bad.reason,
            destination: None,
        };
        record.headers = router.headers(bad.event_id.as_ref(), labels.headers());
        Ok(Some(record))
    }

    /// Why Kafka refuses `record`, when an earlier run met its refusal: its own event
    /// (the refusal is then taken: it happened once), or any record for a topic that
    /// refuses them all. The router's own records never park.
    fn refused(&mut self, record: &Record) -> Option<(String, bool)> {
        if (self.refusals.is_empty() && self.refused_topics.is_empty())
            || record.event.aggregate_type.is_none()
        {
            return None;
        }
        if let Some(i) = self
            .refusals
            .iter()
            .position(|r| r.event_id == record.event.id)
        {
            let refusal = self.refusals.swap_remove(i);
            let omit = refusal.scope == RefusalScope::TooLarge;
            return Some((refusal.reason(), omit));
        }
        self.refused_topics
            .get(&record.topic)
            .map(|reason| (reason.clone(), false))
    }

    /// `record`, refused by Kafka, as the first parked event of its aggregate (sent as
    /// it is when a release settled it already: read again from before that release).
    fn park_refused(
        &mut self,
        record: Record,
        reason: String,
        commit_time_ms: i64,
        end: &Position,
    ) -> Result<Record, ParkingError> {
        let aggregate = Aggregate {
            table: record.event.table.clone(),
            aggregate_type: record.event.aggregate_type.clone(),
            id: record.key.clone(),
        };
        let trace = LogIds::of(&record.headers);
        if let Some(at) = self.settled_before(&aggregate, end) {
            warn!(event = %record.event.id, %aggregate, trace_id = trace_id_field(trace), span_id = span_id_field(trace), released_or_dropped_at = %at, "refused record read again from before its aggregate was released or dropped: that settled it, so it is sent, not parked");
            return Ok(record);
        }
        let at = || {
            format!(
                "event {} of {aggregate} at {}: {reason}",
                record.event.id, record.event.position
            )
        };
        self.start_parking(
            Held {
                aggregate: aggregate.clone(),
                events: 0,
                since_ms: commit_time_ms,
                reason: reason.clone(),
                first_event: record.event.id.to_string(),
            },
            at,
        )?;
        warn!(event = %record.event.id, %aggregate, position = %record.event.position, %reason, topic = %self.topic, trace_id = trace_id_field(trace), span_id = span_id_field(trace), "aggregate parked: Kafka refused its record; this event and every later one of the aggregate go to the parking topic in order; every other aggregate goes on");
        self.hold(record, reason)
    }

    /// Parks `first`'s aggregate, within `max_aggregates` (`at` names the event for the
    /// error); its events are counted as they come.
    fn start_parking(
        &mut self,
        first: Held,
        at: impl FnOnce() -> String,
    ) -> Result<(), ParkingError> {
        if self.aggregates >= self.max_aggregates {
            return Err(ParkingError::Full {
                what: "aggregates",
                key: "max_aggregates",
                limit: self.max_aggregates,
                at: at(),
            });
        }
        self.aggregates += 1;
        self.held
            .entry(first.aggregate.id.clone())
            .or_default()
            .push(first);
        Ok(())
    }

    /// Where `aggregate` was released or dropped, when that covers a transaction ending
    /// at `end` (positions that cannot be compared cover nothing: parked again, to be
    /// released again, rather than passed).
    fn settled_before(&self, aggregate: &Aggregate, end: &Position) -> Option<&Position> {
        self.settled
            .get(aggregate)
            .filter(|at| at.includes(end) == Some(true))
    }

    /// `record`, diverted to the parking topic with where it was going.
    fn hold(&mut self, mut record: Record, reason: String) -> Result<Record, ParkingError> {
        let aggregate = Aggregate {
            table: record.event.table.clone(),
            aggregate_type: record.event.aggregate_type.clone(),
            id: record.key.clone(),
        };
        self.count(&aggregate, || {
            format!(
                "event {} of {aggregate} at {}",
                record.event.id, record.event.position
            )
        })?;
        let labels = Labels {
            kind: Kind::Held,
            aggregate: &aggregate,
            event_id: Some(&record.event.id),
            position: &record.event.position,
            reason: &reason,
            destination: Some((&record.topic, record.partition)),
        };
        let mut headers = labels.headers();
        // The event's own headers (its id first) stay as they were, the labels after.
        let mut own = std::mem::take(&mut record.headers);
        own.append(&mut headers);
        record.headers = own;
        record.topic = self.topic.clone();
        record.partition = None;
        Ok(record)
    }

    /// Counts one more parked event of `aggregate` (already parked), within
    /// `max_events`; `at` names the event for the error.
    fn count(
        &mut self,
        aggregate: &Aggregate,
        at: impl FnOnce() -> String,
    ) -> Result<(), ParkingError> {
        if self.events >= self.max_events {
            return Err(ParkingError::Full {
                what: "events",
                key: "max_events",
                limit: self.max_events,
                at: at(),
            });
        }
        self.events += 1;
        if let Some(h) = self
            .held
            .get_mut(&aggregate.id)
            .and_then(|same| same.iter_mut().find(|h| &h.aggregate == aggregate))
        {
            h.events += 1;
        }
        Ok(())
    }

    /// Takes in a record read back from the parking topic, in topic order (`load`).
    fn take_in(&mut self, entry: &Entry) {
        match entry {
            Entry::Event(parked) => self.restore_event(parked),
            Entry::Request(request) => self.requests.push(request.clone()),
            Entry::Outcome(outcome) => {
                if matches!(outcome.kind, Kind::Released | Kind::Dropped) {
                    let at = outcome.position.parse().ok();
                    self.unpark(&outcome.aggregate, at);
                }
                self.answered
                    .insert((outcome.request.clone(), outcome.aggregate.clone()));
            }
        }
    }

    fn restore_event(&mut self, parked: &Parked) {
        let same = self.held.entry(parked.aggregate.id.clone()).or_default();
        match same.iter_mut().find(|h| h.aggregate == parked.aggregate) {
            Some(h) => h.events += 1,
            None => {
                self.aggregates += 1;
                same.push(Held {
                    aggregate: parked.aggregate.clone(),
                    events: 1,
                    since_ms: parked.timestamp_ms,
                    reason: parked.reason.clone(),
                    first_event: parked
                        .event_id
                        .as_ref()
                        .map_or_else(|| "(no id)".to_string(), ToString::to_string),
                });
            }
        }
        self.events += 1;
    }
}

/// A parked record without its value, which Kafka refused as too large: its headers
/// name the row (`parked.table`, `parked.event_id`), which a release reads again.
fn without_value(mut record: Record) -> Record {
    if record.value.take().is_some() {
        record.headers.push((
            record::VALUE_OMITTED.to_string(),
            b"too large for its topic: a release reads the row again".to_vec(),
        ));
    }
    record
}

#[cfg(test)]
mod tests;
