use std::sync::Arc;

use super::*;
use crate::outbox::{EventId, MappedTransaction, OutboxEvent, RowCopy, Rules};
use crate::position::{BinlogFile, Position};
use crate::route::RouteConfig;

fn router() -> Router {
    let rules = Arc::new(Rules::from_columns(&Default::default(), "t.${routedByValue}").unwrap());
    Router::new(rules, &RouteConfig::default(), 1 << 20)
}

fn event(aggregate: &str, id: &str) -> OutboxEvent {
    let mut e = OutboxEvent::sample(aggregate, Some(b"{}"), &[]);
    e.id = EventId(id.as_bytes().to_vec());
    e
}

fn bad(aggregate: Option<&str>, id: &str) -> InvalidEvent {
    let e = event(aggregate.unwrap_or("x"), id);
    let mut bad = InvalidEvent::of(&e, "payload is not JSON", RowCopy::Capped);
    if aggregate.is_none() {
        bad.aggregate = None;
    }
    bad
}

fn batch(router: &Router, events: Vec<Result<OutboxEvent, InvalidEvent>>) -> Batch {
    router
        .route(MappedTransaction {
            end: Position::new(BinlogFile::new("mysql-bin.000001").unwrap(), 4).unwrap(),
            delivered_through: None,
            commit_time_ms: 1_000,
            events,
            ignored: Vec::new(),
            complete: true,
        })
        .unwrap()
}

fn config(max_aggregates: u64, max_events: u64) -> ParkingConfig {
    ParkingConfig {
        topic: "parked".into(),
        max_aggregates,
        max_events,
    }
}

/// (topic, event id) of each record, in order.
fn shape(batch: &Batch) -> Vec<(String, String)> {
    batch
        .records
        .iter()
        .map(|r| (r.topic.to_string(), r.event.id.to_string()))
        .collect()
}

#[test]
fn a_bad_event_holds_back_its_aggregate_in_order_and_nothing_else() {
    let router = router();
    let mut parking = Parking::empty(&config(10, 100));
    let mut b = batch(
        &router,
        vec![
            Ok(event("A", "a1")),
            Ok(event("B", "b1")),
            Err(bad(Some("A"), "a2")),
            Ok(event("A", "a3")),
            Ok(event("B", "b2")),
        ],
    );
    parking.divert(&router, &mut b).unwrap();
    let pair = |t: &str, id: &str| (t.to_string(), id.to_string());
    assert_eq!(
        shape(&b),
        [
            pair("t.Order", "a1"),
            pair("t.Order", "b1"),
            pair("parked", "a2"),
            pair("parked", "a3"),
            pair("t.Order", "b2"),
        ]
    );
    assert_eq!((parking.aggregates(), parking.events()), (1, 2));
    // The parked copies say whose they are and where the held one was going, keyed by
    // the aggregate; the event's own id header comes first.
    let held = parked(&b.records[3]);
    assert_eq!(held.kind, Kind::Held);
    assert_eq!(held.topic.as_deref(), Some("t.Order"));
    assert_eq!(held.aggregate.id, b"A");
    assert_eq!(b.records[3].headers[0], ("id".to_string(), b"a3".to_vec()));
    let first = parked(&b.records[2]);
    assert_eq!(first.kind, Kind::Invalid);
    assert_eq!(first.reason, "payload is not JSON");

    // Later transactions: A's events keep going to the parking topic, B's flow.
    let mut next = batch(&router, vec![Ok(event("B", "b3")), Ok(event("A", "a4"))]);
    parking.divert(&router, &mut next).unwrap();
    assert_eq!(shape(&next), [pair("t.Order", "b3"), pair("parked", "a4")]);
    assert_eq!((parking.aggregates(), parking.events()), (1, 3));
    assert_eq!(parking.oldest_ms(), Some(1_000));
}

#[test]
fn an_invalid_event_first_in_its_transaction_or_last_keeps_its_place() {
    let router = router();
    let mut parking = Parking::empty(&config(10, 100));
    let mut b = batch(
        &router,
        vec![
            Err(bad(Some("A"), "a1")),
            Ok(event("A", "a2")),
            Ok(event("C", "c1")),
            Err(bad(Some("C"), "c2")),
        ],
    );
    parking.divert(&router, &mut b).unwrap();
    let ids: Vec<String> = shape(&b)
        .into_iter()
        .map(|(t, id)| format!("{t}:{id}"))
        .collect();
    assert_eq!(ids, ["parked:a1", "parked:a2", "t.Order:c1", "parked:c2"]);
}

#[test]
fn a_row_naming_no_aggregate_stops_like_fail() {
    let router = router();
    let mut parking = Parking::empty(&config(10, 100));
    let mut b = batch(&router, vec![Err(bad(None, "n1"))]);
    let err = parking.divert(&router, &mut b).unwrap_err();
    assert!(matches!(err, ParkingError::NoAggregate(_)), "{err}");
    assert!(err.to_string().contains("n1"), "{err}");
}

#[test]
fn the_bounds_stop_the_router_loudly() {
    let router = router();
    let mut parking = Parking::empty(&config(1, 100));
    let mut b = batch(
        &router,
        vec![Err(bad(Some("A"), "a1")), Err(bad(Some("B"), "b1"))],
    );
    let err = parking.divert(&router, &mut b).unwrap_err();
    assert!(err.to_string().contains("max_aggregates = 1"), "{err}");

    let mut parking = Parking::empty(&config(10, 2));
    let mut b = batch(
        &router,
        vec![
            Err(bad(Some("A"), "a1")),
            Ok(event("A", "a2")),
            Ok(event("A", "a3")),
        ],
    );
    let err = parking.divert(&router, &mut b).unwrap_err();
    assert!(err.to_string().contains("max_events = 2"), "{err}");
    assert!(err.to_string().contains("a3"), "{err}");
}

#[test]
fn a_restored_set_parks_from_the_first_event() {
    let router = router();
    let mut first = Parking::empty(&config(10, 100));
    let mut b = batch(&router, vec![Err(bad(Some("A"), "a1"))]);
    first.divert(&router, &mut b).unwrap();
    let mut again = Parking::empty(&config(10, 100));
    for r in &b.records {
        again.take_in(&Entry::Event(parked(r)));
    }
    let mut next = batch(&router, vec![Ok(event("A", "a2")), Ok(event("B", "b1"))]);
    again.divert(&router, &mut next).unwrap();
    let ids: Vec<String> = shape(&next)
        .into_iter()
        .map(|(t, id)| format!("{t}:{id}"))
        .collect();
    assert_eq!(ids, ["parked:a2", "t.Order:b1"]);
    assert_eq!((again.aggregates(), again.events()), (1, 2));
}

fn parked(r: &Record) -> Parked {
    match Entry::read(
        Some(&r.key),
        r.value.as_deref(),
        &r.headers,
        r.timestamp_ms,
        0,
    ) {
        Ok(Entry::Event(p)) => p,
        other => panic!("not a parked event: {other:?}"),
    }
}

/// At-least-once resumes behind its checkpoint: an invalid event read again from before
/// its aggregate's release was settled by the release and is not parked again; one
/// after it parks the aggregate anew.
#[test]
fn a_release_settles_what_is_read_again_from_before_it() {
    let router = router();
    let mut parking = Parking::empty(&config(10, 100));
    let at = |offset| Position::new(BinlogFile::new("mysql-bin.000001").unwrap(), offset).unwrap();
    let mut b = batch(&router, vec![Err(bad(Some("A"), "a1"))]);
    parking.divert(&router, &mut b).unwrap();
    let aggregate = parked(&b.records[0]).aggregate;
    assert!(parking.unpark(&aggregate, Some(at(1_000))).is_some());
    assert_eq!((parking.aggregates(), parking.events()), (0, 0));

    // Read again from before the release (the batch ends at offset 4): passed over.
    let mut again = batch(
        &router,
        vec![Err(bad(Some("A"), "a1")), Ok(event("A", "a2"))],
    );
    parking.divert(&router, &mut again).unwrap();
    let ids: Vec<String> = shape(&again)
        .into_iter()
        .map(|(t, id)| format!("{t}:{id}"))
        .collect();
    assert_eq!(ids, ["t.Order:a2"]);

    // A bad event after it parks the aggregate again.
    let mut later = batch(
        &router,
        vec![Err(bad(Some("A"), "a9")), Ok(event("A", "a10"))],
    );
    later.end = at(2_000);
    parking.divert(&router, &mut later).unwrap();
    let ids: Vec<String> = shape(&later)
        .into_iter()
        .map(|(t, id)| format!("{t}:{id}"))
        .collect();
    assert_eq!(ids, ["parked:a9", "parked:a10"]);
}

fn refusal(id: &str, scope: RefusalScope) -> Refusal {
    Refusal {
        event_id: EventId(id.as_bytes().to_vec()),
        topic: "t.Order".into(),
        reason: "refused".into(),
        scope,
    }
}

#[test]
fn a_refused_record_parks_its_aggregate_from_that_event_on() {
    let router = router();
    let mut parking = Parking::empty(&config(10, 100));
    parking.refuse(refusal("a2", RefusalScope::TooLarge));
    let mut b = batch(
        &router,
        vec![
            Ok(event("A", "a1")),
            Ok(event("A", "a2")),
            Ok(event("B", "b1")),
            Ok(event("A", "a3")),
        ],
    );
    parking.divert(&router, &mut b).unwrap();
    let pair = |t: &str, id: &str| (t.to_string(), id.to_string());
    assert_eq!(
        shape(&b),
        [
            pair("t.Order", "a1"),
            pair("parked", "a2"),
            pair("t.Order", "b1"),
            pair("parked", "a3"),
        ]
    );
    // Too large for its topic: parked without its value, saying so; the next one whole.
    assert_eq!(b.records[1].value, None);
    assert!(b.records[1]
        .headers
        .iter()
        .any(|(k, _)| k == "parked.value_omitted"));
    assert!(b.records[3].value.is_some());
    let first = parked(&b.records[1]);
    assert_eq!(first.kind, Kind::Held);
    assert!(first.reason.contains("as too large"), "{}", first.reason);
    // Met once: the same id read again is an event of a parked aggregate, no more.
    assert_eq!((parking.aggregates(), parking.events()), (1, 2));
}

#[test]
fn a_refused_topic_parks_every_aggregate_with_an_event_for_it_until_a_release() {
    let router = router();
    let mut parking = Parking::empty(&config(10, 100));
    parking.refuse(refusal("a9", RefusalScope::Topic));
    let mut b = batch(&router, vec![Ok(event("A", "a1")), Ok(event("B", "b1"))]);
    parking.divert(&router, &mut b).unwrap();
    assert!(b.records.iter().all(|r| &*r.topic == "parked"));
    assert_eq!(parking.aggregates(), 2);
    assert!(parked(&b.records[0])
        .reason
        .contains("every record for topic t.Order"));
    // A release Kafka took ends the topic's refusal: a new aggregate flows.
    let a = parked(&b.records[0]).aggregate;
    let at = Position::new(BinlogFile::new("mysql-bin.000001").unwrap(), 4).unwrap();
    parking.unpark(&a, Some(at));
    let mut next = batch(&router, vec![Ok(event("C", "c1")), Ok(event("B", "b2"))]);
    parking.divert(&router, &mut next).unwrap();
    assert_eq!(
        shape(&next),
        [
            ("t.Order".to_string(), "c1".to_string()),
            ("parked".to_string(), "b2".to_string())
        ]
    );
}
