//! What Kafka refused for good during this process's runs, kept across the supervisor's
//! restarts: a refused record ends its run (exactly-once: its transaction is aborted;
//! at-least-once: records behind it may be acknowledged already, see
//! docs/guarantees.md), and the next run parks its aggregate from that event on. A
//! release's record refused again refuses the release instead, so that a request is
//! not carried out forever against a topic that still refuses it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::outbox::{Aggregate, EventId};
use crate::route::parking::{Refusal, RefusalScope};

/// The refusals of this process's runs (shared by the supervisor and each run's
/// releases).
#[derive(Clone, Default)]
pub(super) struct Refusals(Arc<Mutex<Ledger>>);

#[derive(Default)]
struct Ledger {
    /// For each run to park from the refused event on.
    to_park: Vec<Refusal>,
    /// Topics refusing every record: for the next run only (see `Parking::refuse`).
    topics: Vec<Refusal>,
    /// Every event refused so far: one refused again was not parked around.
    seen: std::collections::HashSet<EventId>,
    /// The current run's released records: which request and aggregate they belong to.
    releasing: HashMap<EventId, (String, Aggregate)>,
    /// Releases Kafka refused a record of, and why.
    refused_releases: HashMap<(String, Aggregate), String>,
}

/// What a refusal noted means for the supervisor.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Noted {
    /// The next run parks its aggregate.
    Parks,
    /// The next run answers the release it belonged to as refused.
    RefusesRelease,
    /// Refused again after it was parked: parking cannot get past it.
    Again,
}

impl Refusals {
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes what Kafka refused at the end of a run.
    pub(super) fn note(&self, refusal: Refusal) -> Noted {
        let mut ledger = self.ledger();
        if let Some(key) = ledger.releasing.remove(&refusal.event_id) {
            ledger.refused_releases.insert(key, refusal.reason());
            return Noted::RefusesRelease;
        }
        if !ledger.seen.insert(refusal.event_id.clone()) {
            return Noted::Again;
        }
        match refusal.scope {
            RefusalScope::Record | RefusalScope::TooLarge => ledger.to_park.push(refusal),
            RefusalScope::Topic => ledger.topics.push(refusal),
        }
        Noted::Parks
    }

    /// At a run's start: what it parks when met again (its releases start afresh).
    pub(super) fn to_park(&self) -> Vec<Refusal> {
        let mut ledger = self.ledger();
        ledger.releasing.clear();
        let topics = std::mem::take(&mut ledger.topics);
        ledger.to_park.iter().cloned().chain(topics).collect()
    }

    /// A release of `aggregate` for `request` hands on records of `events`.
    pub(super) fn releasing<'a>(
        &self,
        request: &str,
        aggregate: &Aggregate,
        events: impl Iterator<Item = &'a EventId>,
    ) {
        let mut ledger = self.ledger();
        for id in events {
            ledger
                .releasing
                .insert(id.clone(), (request.to_string(), aggregate.clone()));
        }
    }

    /// Why Kafka refused a record of `request`'s release of `aggregate`, if it did.
    pub(super) fn refused_release(&self, request: &str, aggregate: &Aggregate) -> Option<String> {
        self.ledger()
            .refused_releases
            .get(&(request.to_string(), aggregate.clone()))
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(id: &str) -> Refusal {
        Refusal {
            event_id: EventId(id.as_bytes().to_vec()),
            topic: "orders".into(),
            reason: "TopicAuthorizationFailed".into(),
            scope: RefusalScope::Topic,
        }
    }

    fn aggregate() -> Aggregate {
        Aggregate {
            table: Arc::new(crate::position::TableName::parse("app.outbox").unwrap()),
            aggregate_type: Some("orders".into()),
            id: b"o-1".to_vec(),
        }
    }

    #[test]
    fn a_refusal_parks_once_then_stops_the_router() {
        let refusals = Refusals::default();
        assert_eq!(refusals.note(refusal("e1")), Noted::Parks);
        assert_eq!(refusals.to_park().len(), 1);
        // A topic's refusal holds for one run.
        assert_eq!(refusals.to_park().len(), 0);
        assert_eq!(refusals.note(refusal("e1")), Noted::Again);
        assert_eq!(refusals.note(refusal("e2")), Noted::Parks);
    }

    #[test]
    fn a_released_record_refused_refuses_its_release() {
        let refusals = Refusals::default();
        let id = EventId(b"e1".to_vec());
        refusals.releasing("r1", &aggregate(), [&id].into_iter());
        assert_eq!(refusals.note(refusal("e1")), Noted::RefusesRelease);
        assert!(refusals
            .refused_release("r1", &aggregate())
            .unwrap()
            .contains("orders"));
        assert_eq!(refusals.refused_release("r2", &aggregate()), None);
        // A new run's releases start afresh.
        refusals.releasing("r1", &aggregate(), [&id].into_iter());
        refusals.to_park();
        assert_eq!(refusals.note(refusal("e3")), Noted::Parks);
    }
}
