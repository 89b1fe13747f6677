//! Ordered parking (`on_invalid = "park"`): an outbox of 1,000 aggregates in which 10
//! receive a bad row in the middle of their history (an event without a type, which
//! cannot be a CloudEvent). The 990 others are delivered in order; the 10 are parked
//! from their bad row on, in order, on the parking topic; nothing is lost, and in
//! exactly-once mode nothing is there twice — across a kill -9 of the router in the
//! middle of the parking and a standby's takeover, where the instance that parks the
//! later events never saw the bad ones: it reads the parked set back from Kafka.
//!
//! `IT_PARKING_EVENTS` sets the number of events (default 20,000; the figure
//! is 100,000).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;

use crate::standby::{pair, wait_streaming};
use crate::util::*;

/// Aggregate ids `k-0` … `k-999`; event `s-N` belongs to `k-(N % 1000)`.
const AGGREGATES: usize = 1000;
/// The aggregates that receive a bad row.
const BAD: [usize; 10] = [3, 103, 207, 311, 419, 523, 631, 739, 847, 955];
/// Events per transaction.
const PER_TXN: usize = 100;

fn events_total() -> usize {
    std::env::var("IT_PARKING_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

/// The round (the aggregate's n-th event) in which the bad aggregates get their bad row:
/// the middle of their history.
fn bad_round(total: usize) -> usize {
    total / AGGREGATES / 2
}

/// The seq of aggregate `agg`'s bad row, if it has one.
fn bad_seq(agg: usize, total: usize) -> Option<usize> {
    BAD.contains(&agg)
        .then_some(bad_round(total) * AGGREGATES + agg)
}

/// Lets the outbox take an event without a type, the row a CloudEvent cannot be made of.
async fn allow_untyped(conn: &mut mysql_async::Conn, db: &str) {
    conn.query_drop(format!(
        "ALTER TABLE {db}.outbox MODIFY event_type VARCHAR(64) NULL"
    ))
    .await
    .unwrap();
}

/// Parking on a topic of the test's own; values as binary CloudEvents (the payload as
/// the value, so `{"seq": N}` reads back as written).
fn parking(setup: &mut RouterSetup) -> String {
    let topic = format!("{}.parked", setup.topic_prefix);
    setup.outbox_toml = format!("on_invalid = \"park\"\n[parking]\ntopic = \"{topic}\"\n");
    setup.extra_toml +=
        "[value]\nformat = \"cloudevents\"\n[value.cloudevents]\nmode = \"binary\"\n";
    topic
}

/// Writes events `from..to` (of `total`) in transactions of `PER_TXN`.
async fn write_events(db: &str, from: usize, to: usize, total: usize) {
    let mut conn = app_conn().await;
    let mut seq = from;
    while seq < to {
        let end = (seq + PER_TXN).min(to);
        let mut tx = conn.start_transaction(Default::default()).await.unwrap();
        let mut params: Vec<mysql_async::Value> = Vec::new();
        for s in seq..end {
            let agg = s % AGGREGATES;
            let kind = match bad_seq(agg, total) == Some(s) {
                true => mysql_async::Value::NULL,
                false => "OrderHappened".into(),
            };
            params.extend([
                format!("s-{s}").into(),
                "Order".into(),
                format!("k-{agg}").into(),
                kind,
                format!("{{\"seq\":{s}}}").into(),
            ]);
        }
        let placeholders = vec!["(?,?,?,?,?)"; end - seq].join(",");
        tx.exec_drop(
            format!("INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES {placeholders}"),
            params,
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        seq = end;
    }
}

fn seq_of(m: &Msg) -> usize {
    m.id().strip_prefix("s-").unwrap().parse().unwrap()
}

/// Waits until every event id is on the destination or the parking topic.
fn wait_all(kafka: &Kafka, topics: &[String], total: usize, who: &RouterProcess) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let ids: HashSet<String> = kafka.read_all(topics).iter().map(Msg::id).collect();
        if ids.len() >= total {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {total} events arrived:\n{}",
            ids.len(),
            who.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// What the two topics hold, checked: every event once at least (exactly once in
/// exactly-once mode), the good aggregates on the destination in order, each bad one on
/// the destination up to its bad row and on the parking topic from it on, in order.
/// Returns (duplicates, parked events).
fn check(kafka: &Kafka, destination: &str, parked: &str, total: usize) -> (usize, usize) {
    let dest = kafka.read_all(&[destination.to_string()]);
    let park = kafka.read_all(&[parked.to_string()]);
    let mut seen: HashSet<String> = HashSet::new();
    let mut duplicates = 0;
    for m in dest.iter().chain(&park) {
        if !seen.insert(m.id()) {
            duplicates += 1;
        }
    }
    let lost: Vec<usize> = (0..total)
        .filter(|s| !seen.contains(&format!("s-{s}")))
        .collect();
    assert!(
        lost.is_empty(),
        "{} lost, first {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    assert_eq!(seen.len(), total, "ids that were never written");

    // First occurrences per aggregate, in offset order, on each topic.
    let firsts = |msgs: &[Msg]| {
        let mut by_agg: HashMap<usize, Vec<usize>> = HashMap::new();
        let mut once: HashSet<String> = HashSet::new();
        let mut sorted: Vec<&Msg> = msgs.iter().collect();
        sorted.sort_by_key(|m| (m.partition, m.offset));
        for m in sorted {
            if once.insert(m.id()) {
                by_agg
                    .entry(seq_of(m) % AGGREGATES)
                    .or_default()
                    .push(seq_of(m));
            }
        }
        by_agg
    };
    let (dest_firsts, park_firsts) = (firsts(&dest), firsts(&park));
    for agg in 0..AGGREGATES {
        let all: Vec<usize> = (agg..total).step_by(AGGREGATES).collect();
        let on_dest = dest_firsts.get(&agg).cloned().unwrap_or_default();
        let on_park = park_firsts.get(&agg).cloned().unwrap_or_default();
        match bad_seq(agg, total) {
            None => {
                assert_eq!(on_dest, all, "aggregate k-{agg} on {destination}");
                assert!(
                    on_park.is_empty(),
                    "good aggregate k-{agg} parked: {on_park:?}"
                );
            }
            Some(bad) => {
                let before: Vec<usize> = all.iter().copied().filter(|s| *s < bad).collect();
                let from: Vec<usize> = all.iter().copied().filter(|s| *s >= bad).collect();
                assert_eq!(on_dest, before, "bad aggregate k-{agg} on {destination}");
                // At-least-once may park again an event it delivered before a restart:
                // those are duplicates of earlier ones, never ahead of them.
                let parked_from: Vec<usize> =
                    on_park.iter().copied().filter(|s| *s >= bad).collect();
                assert_eq!(parked_from, from, "bad aggregate k-{agg} on {parked}");
            }
        }
    }
    // Each parked record says what it is: the bad row first, the held ones with where
    // they were going, keyed by the aggregate.
    for m in &park {
        let header = |k: &str| String::from_utf8(m.headers[k].clone()).unwrap();
        let seq = seq_of(m);
        assert_eq!(m.key, format!("k-{}", seq % AGGREGATES).into_bytes());
        match bad_seq(seq % AGGREGATES, total) == Some(seq) {
            true => {
                assert_eq!(header("parked.kind"), "invalid");
                assert!(header("parked.reason").contains("CloudEvent needs a type"));
            }
            false => {
                assert_eq!(header("parked.kind"), "held");
                assert_eq!(header("parked.topic"), destination);
            }
        }
        assert_eq!(header("parked.aggregate_type"), "Order");
    }
    (duplicates, park.len())
}

async fn parked_gauges(port: u16) -> (Option<f64>, Option<f64>) {
    (
        crate::standby::gauge(port, "outbox_router_parked_aggregates").await,
        crate::standby::gauge(port, "outbox_router_parked_events").await,
    )
}

/// One router, at-least-once: 990 aggregates flow in order, 10 are parked from their bad
/// row on; the gauges count them.
#[tokio::test(flavor = "multi_thread")]
async fn a_bad_event_parks_only_its_aggregate_in_order() {
    let _settings = SERVER_SETTINGS.read().await;
    let total = events_total();
    let (mut conn, mut setup) = fresh("park_alo").await;
    allow_untyped(&mut conn, &setup.db).await;
    let parked = parking(&mut setup);
    let destination = setup.topic("Order");
    let started = Instant::now();
    let mut router = setup.start_router();
    write_events(&setup.db, 0, total, total).await;
    let kafka = Kafka::local();
    wait_all(
        &kafka,
        &[destination.clone(), parked.clone()],
        total,
        &router,
    );
    let gauges = parked_gauges(setup.monitor_port).await;
    router.stop(Duration::from_secs(30));
    let (duplicates, parked_events) = check(&kafka, &destination, &parked, total);
    let rounds = total / AGGREGATES;
    assert_eq!(parked_events, BAD.len() * (rounds - bad_round(total)));
    assert_eq!(
        gauges,
        (Some(BAD.len() as f64), Some(parked_events as f64)),
        "parked gauges"
    );
    let log = router.log();
    assert_eq!(log.matches("aggregate parked:").count(), BAD.len(), "{log}");
    println!(
        "parking at-least-once: events={total} parked={parked_events} lost=0 duplicates={duplicates} in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// Exactly-once, the router killed with SIGKILL after the bad rows were parked and while
/// events flow: the restarted router reads the parked set back and goes on parking the
/// bad aggregates' later events; a read_committed consumer sees every event once.
#[tokio::test(flavor = "multi_thread")]
async fn parking_survives_a_kill9_exactly_once() {
    let _settings = SERVER_SETTINGS.read().await;
    let total = events_total();
    let (mut conn, mut setup) = fresh("park_eos").await;
    allow_untyped(&mut conn, &setup.db).await;
    let parked = parking(&mut setup);
    setup.delivery(Some(&exactly_once_delivery("park_eos", true)));
    let destination = setup.topic("Order");
    let topics = [destination.clone(), parked.clone()];
    let kafka = Kafka::local();
    let mut router = setup.start_router();
    // Past the bad rows, then the kill in the middle of the rest.
    let past_bad = (bad_round(total) + 1) * AGGREGATES;
    write_events(&setup.db, 0, past_bad, total).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while kafka.read_all(std::slice::from_ref(&parked)).len() < BAD.len() {
        assert!(
            Instant::now() < deadline,
            "nothing parked:\n{}",
            router.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let db = setup.db.clone();
    let writer = tokio::spawn(async move { write_events(&db, past_bad, total, total).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    router.kill9();
    let mut router = setup.start_router();
    writer.await.unwrap();
    wait_all(&kafka, &topics, total, &router);
    let gauges = parked_gauges(setup.monitor_port).await;
    router.stop(Duration::from_secs(30));
    let (duplicates, parked_events) = check(&kafka, &destination, &parked, total);
    assert_eq!(duplicates, 0, "read_committed duplicates");
    assert_eq!(gauges.0, Some(BAD.len() as f64));
    assert_eq!(gauges.1, Some(parked_events as f64));
    let log = router.log();
    assert!(log.contains("parked aggregates read back"), "{log}");
    println!(
        "parking exactly-once, kill -9: events={total} parked={parked_events} lost=0 duplicates=0"
    );
}

/// The standby shape: the leader parks the bad aggregates and is killed; the standby,
/// which never saw a bad row, takes over and parks their later events from its first
/// one, reading the set from the parking topic.
#[tokio::test(flavor = "multi_thread")]
async fn a_standby_taking_over_parks_what_the_leader_parked() {
    let _settings = SERVER_SETTINGS.read().await;
    let total = events_total();
    let mut p = pair("park_ha").await;
    let mut conn = app_conn().await;
    allow_untyped(&mut conn, &p.a.db).await;
    let parked = parking(&mut p.a);
    // One parking topic for both: the pair shares its outbox, topics and config.
    assert_eq!(parking(&mut p.b), parked);
    let destination = p.a.topic("Order");
    let topics = [destination.clone(), parked.clone()];
    let kafka = Kafka::local();
    let mut a = p.a.start_router();
    wait_streaming(p.a.monitor_port, Duration::from_secs(60), &a).await;
    let mut b = p.b.start_router();
    crate::standby::wait_standby_ready(p.b.monitor_port, &b).await;
    let past_bad = (bad_round(total) + 1) * AGGREGATES;
    write_events(&p.a.db, 0, past_bad, total).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while kafka.read_all(std::slice::from_ref(&parked)).len() < BAD.len() {
        assert!(Instant::now() < deadline, "nothing parked:\n{}", a.log());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    a.kill9();
    write_events(&p.a.db, past_bad, total, total).await;
    wait_streaming(p.b.monitor_port, Duration::from_secs(90), &b).await;
    wait_all(&kafka, &topics, total, &b);
    b.stop(Duration::from_secs(30));
    let (duplicates, parked_events) = check(&kafka, &destination, &parked, total);
    assert_eq!(duplicates, 0, "read_committed duplicates");
    let log = b.log();
    assert!(log.contains("parked aggregates read back"), "{log}");
    println!("parking standby takeover: events={total} parked={parked_events} lost=0 duplicates=0");
}
