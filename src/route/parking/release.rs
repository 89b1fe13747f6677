//! What a release sends: each parked event of an aggregate re-published to where it was
//! going, in its original order with its original id — from its row read again (a
//! fixed row goes out fixed), else from its parked copy — and the outcome record that
//! un-parks the aggregate for every instance.

use std::collections::HashSet;

use super::load::RawRecord;
use super::record::{outcome_headers, Kind, Parked, PARTITION, TOPIC, VALUE_OMITTED};
use crate::outbox::{Aggregate, EventId};
use crate::route::{EventRef, Record};

/// A parked event and its record as the parking topic holds it.
#[derive(Debug, Clone)]
pub struct ParkedCopy {
    /// What the record says about itself.
    pub parked: Parked,
    /// The record.
    pub raw: RawRecord,
}

/// The records releasing `copies` (one aggregate's parked events, in parking order)
/// sends, in that order. `reread` routes an event's row read again from its table:
/// `None` when the row is gone, `Err` when it still cannot be a record. An event parked
/// twice (at-least-once parks again what it reads again) goes out once. `Err` refuses
/// the release, naming the event: nothing of the aggregate goes out and it stays parked.
pub fn release_records(
    copies: &[ParkedCopy],
    mut reread: impl FnMut(&ParkedCopy) -> Option<Result<Record, String>>,
) -> Result<Vec<Record>, String> {
    let mut seen: HashSet<&[u8]> = HashSet::new();
    let mut out = Vec::with_capacity(copies.len());
    for copy in copies {
        let Some(id) = copy.parked.event_id.as_ref() else {
            return Err(format!(
                "the parked row at {} has no event id: it cannot go out; `parked drop` it",
                copy.parked.position
            ));
        };
        if !seen.insert(&id.0) {
            continue;
        }
        let record = match reread(copy) {
            Some(Ok(record)) => record,
            Some(Err(why)) => {
                return Err(format!(
                    "event {id} (at {}) still cannot be a record: {why}",
                    copy.parked.position
                ))
            }
            None => from_copy(copy, id)?,
        };
        out.push(record);
    }
    Ok(out)
}

/// A held event's parked copy as the record it was going to be (its row is gone): its
/// destination, its own headers (the `parked.*` ones off), key, value and timestamp as
/// they were; `Err` says why a copy cannot stand in for its row.
fn from_copy(copy: &ParkedCopy, id: &EventId) -> Result<Record, String> {
    let gone = |what: &str| {
        format!(
            "event {id} (at {}) is gone from its table and was parked {what}; restore the row, or `parked drop` the aggregate",
            copy.parked.position
        )
    };
    let header = |name: &str| copy.raw.headers.iter().find(|(k, _)| k == name);
    if copy.parked.kind != Kind::Held {
        return Err(gone("as the row that could not be a record, not as one"));
    }
    if header(VALUE_OMITTED).is_some() {
        return Err(gone("without its value (Kafka refused it as too large)"));
    }
    let topic = copy
        .parked
        .topic
        .as_deref()
        .ok_or_else(|| gone("without its destination"))?;
    let partition = header(PARTITION).and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok());
    debug_assert!(header(TOPIC).is_some());
    Ok(Record {
        topic: topic.into(),
        key: copy.raw.key.clone(),
        value: copy.raw.value.clone(),
        headers: copy
            .raw
            .headers
            .iter()
            .filter(|(k, _)| !k.starts_with("parked."))
            .cloned()
            .collect(),
        timestamp_ms: copy.raw.timestamp_ms,
        partition,
        event: EventRef {
            table: copy.parked.aggregate.table.clone(),
            position: copy.parked.position.clone(),
            id: id.clone(),
            aggregate_type: copy.parked.aggregate.aggregate_type.clone(),
            trace: None,
        },
        claim_check: false,
        trace: None,
    })
}

/// The record on the parking topic saying what became of `aggregate` under `request`,
/// effective at binlog `position`.
pub fn outcome_record(
    topic: &str,
    kind: Kind,
    aggregate: &Aggregate,
    request: &str,
    position: &str,
    reason: &str,
) -> Record {
    Record {
        topic: topic.into(),
        key: aggregate.id.clone(),
        value: Some(
            serde_json::json!({ "outcome": kind.as_str(), "request": request, "reason": reason })
                .to_string()
                .into_bytes(),
        ),
        headers: outcome_headers(kind, aggregate, request, position, reason),
        timestamp_ms: crate::checkpoint::now_ms(),
        partition: None,
        event: EventRef {
            table: aggregate.table.clone(),
            position: position.to_string(),
            id: EventId(request.as_bytes().to_vec()),
            aggregate_type: aggregate.aggregate_type.clone(),
            trace: None,
        },
        claim_check: false,
        trace: None,
    }
}
