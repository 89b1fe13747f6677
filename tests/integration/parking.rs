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
pub(crate) const AGGREGATES: usize = 1000;
/// The aggregates that receive a bad row.
pub(crate) const BAD: [usize; 10] = [3, 103, 207, 311, 419, 523, 631, 739, 847, 955];
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
pub(crate) async fn allow_untyped(conn: &mut mysql_async::Conn, db: &str) {
    conn.query_drop(format!(
        "ALTER TABLE {db}.outbox MODIFY event_type VARCHAR(64) NULL"
    ))
    .await
    .unwrap();
}

/// Parking on a topic of the test's own; values as binary CloudEvents (the payload as
/// the value, so `{"seq": N}` reads back as written).
pub(crate) fn parking(setup: &mut RouterSetup) -> String {
    let topic = format!("{}.parked", setup.topic_prefix);
    setup.outbox_toml = format!("on_invalid = \"park\"\n[parking]\ntopic = \"{topic}\"\n");
    setup.extra_toml +=
        "[value]\nformat = \"cloudevents\"\n[value.cloudevents]\nmode = \"binary\"\n";
    topic
}

/// Writes events `from..to` (of `total`) in transactions of `PER_TXN`.
pub(crate) async fn write_events(db: &str, from: usize, to: usize, total: usize) {
    write_events_at(mariadb_port(), db, from, to, total).await
}

/// `write_events` on the server at `port`.
async fn write_events_at(port: u16, db: &str, from: usize, to: usize, total: usize) {
    write_paced(port, db, from, to, total, Duration::ZERO).await
}

/// `write_events_at` with `pause` after each transaction.
async fn write_paced(port: u16, db: &str, from: usize, to: usize, total: usize, pause: Duration) {
    let mut conn = app_conn_at(port).await;
    let mut seq = from;
    while seq < to {
        let end = (seq + PER_TXN).min(to);
        let rows = (seq..end).map(|s| {
            let agg = s % AGGREGATES;
            let kind = match bad_seq(agg, total) == Some(s) {
                true => mysql_async::Value::NULL,
                false => "OrderHappened".into(),
            };
            (s, "Order", format!("k-{agg}"), kind, 0)
        });
        insert_txn_of(&mut conn, db, rows).await;
        seq = end;
        tokio::time::sleep(pause).await;
    }
}

/// `len` hex digits no compression shrinks much (the producer compresses batches, and
/// the broker's size limit applies to what it receives).
fn noise(len: usize) -> String {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from_digit((x % 16) as u32, 16).unwrap()
        })
        .collect()
}

/// One transaction of events `s-N` (N, aggregate type, aggregate id, event type, bytes
/// of padding), each with the payload `{"seq": N}` (and `"pad"`).
async fn insert_txn_of(
    conn: &mut mysql_async::Conn,
    db: &str,
    rows: impl Iterator<Item = (usize, &'static str, String, mysql_async::Value, usize)>,
) {
    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    let mut params: Vec<mysql_async::Value> = Vec::new();
    for (n, kind, agg, event_type, pad) in rows {
        let payload = match pad {
            0 => format!("{{\"seq\":{n}}}"),
            _ => format!("{{\"seq\":{n},\"pad\":\"{}\"}}", noise(pad)),
        };
        params.extend([
            format!("s-{n}").into(),
            kind.into(),
            agg.into(),
            event_type,
            payload.into(),
        ]);
    }
    let placeholders = vec!["(?,?,?,?,?)"; params.len() / 5].join(",");
    tx.exec_drop(
        format!("INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES {placeholders}"),
        params,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

fn seq_of(m: &Msg) -> usize {
    m.id().strip_prefix("s-").unwrap().parse().unwrap()
}

/// Waits until every event id is on the destination or the parking topic.
pub(crate) fn wait_all(kafka: &Kafka, topics: &[String], total: usize, who: &RouterProcess) {
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

/// Waits until the bad rows are on the parking topic.
async fn wait_bad_parked(kafka: &Kafka, parked: &str, who: &RouterProcess) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while kafka.read_all(&[parked.to_string()]).len() < BAD.len() {
        assert!(Instant::now() < deadline, "nothing parked:\n{}", who.log());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// `parked release` of every bad aggregate, fixed rows: the command's arguments.
fn release_all_args(ids: &[String]) -> Vec<&str> {
    let mut args = vec!["parked", "release", "--reason", "fixed", "--wait", "120"];
    args.extend(ids.iter().map(String::as_str));
    args
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
    wait_bad_parked(&kafka, &parked, &router).await;
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
    standby_parks_what_the_leader_parked("park_ha", false).await;
}

/// The same with the pair's other instance (`b`) starting first and leading, and `a`
/// the one that never led.
#[tokio::test(flavor = "multi_thread")]
async fn the_other_instance_first_parks_the_same() {
    standby_parks_what_the_leader_parked("park_ha_b", true).await;
}

async fn standby_parks_what_the_leader_parked(name: &str, b_first: bool) {
    let _settings = SERVER_SETTINGS.read().await;
    let total = events_total();
    let mut p = pair(name).await;
    if b_first {
        std::mem::swap(&mut p.a, &mut p.b);
    }
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
    wait_bad_parked(&kafka, &parked, &a).await;
    a.kill9();
    write_events(&p.a.db, past_bad, total, total).await;
    wait_streaming(p.b.monitor_port, Duration::from_secs(90), &b).await;
    wait_all(&kafka, &topics, total, &b);
    b.stop(Duration::from_secs(30));
    let (duplicates, parked_events) = check(&kafka, &destination, &parked, total);
    assert_eq!(duplicates, 0, "read_committed duplicates");
    let log = b.log();
    assert!(log.contains("parked aggregates read back"), "{log}");
    println!("parking standby takeover ({name}): events={total} parked={parked_events} lost=0 duplicates=0");
}

/// The bad rows fixed in the table (the router ignores UPDATEs on the outbox).
pub(crate) async fn fix_bad_rows(db: &str, total: usize) {
    fix_bad_rows_at(mariadb_port(), db, total).await
}

/// `fix_bad_rows` on the server at `port`.
async fn fix_bad_rows_at(port: u16, db: &str, total: usize) {
    let ids: Vec<String> = BAD
        .iter()
        .filter_map(|agg| bad_seq(*agg, total))
        .map(|s| format!("'s-{s}'"))
        .collect();
    let mut conn = app_conn_at(port).await;
    conn.query_drop(format!(
        "UPDATE {db}.outbox SET event_type = 'OrderHappened' WHERE event_id IN ({})",
        ids.join(",")
    ))
    .await
    .unwrap();
}

pub(crate) fn bad_ids() -> Vec<String> {
    BAD.iter().map(|a| format!("k-{a}")).collect()
}

/// Per aggregate, the destination's first occurrences are every event in commit order:
/// those before the bad row, the released ones, then the later ones; returns the
/// destination's duplicates.
pub(crate) fn check_released(kafka: &Kafka, destination: &str, total: usize) -> usize {
    let dest = kafka.read_all(&[destination.to_string()]);
    let mut seen: HashSet<String> = HashSet::new();
    let mut duplicates = 0;
    let mut by_agg: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut sorted: Vec<&Msg> = dest.iter().collect();
    sorted.sort_by_key(|m| (m.partition, m.offset));
    for m in sorted {
        if !seen.insert(m.id()) {
            duplicates += 1;
            continue;
        }
        by_agg
            .entry(seq_of(m) % AGGREGATES)
            .or_default()
            .push(seq_of(m));
        // A released bad row went out as the table holds it now: fixed.
        assert_eq!(
            m.headers.get("ce_type").map(Vec::as_slice),
            Some(&b"OrderHappened"[..]),
            "{} on {destination}",
            m.id()
        );
    }
    for agg in 0..AGGREGATES {
        let all: Vec<usize> = (agg..total).step_by(AGGREGATES).collect();
        assert_eq!(
            by_agg.get(&agg),
            Some(&all),
            "aggregate k-{agg} on {destination}"
        );
    }
    duplicates
}

/// Release after the rows were fixed: each parked aggregate's events reach their topic
/// in their original order, once, and the events written after the release follow them
/// straight; `crash` kills the leader in the middle of the release (a failpoint), and
/// the restarted one carries the open request out again.
async fn release_case(name: &str, exactly_once: bool, crash: Option<&str>) {
    let _settings = SERVER_SETTINGS.read().await;
    let total = events_total();
    let (mut conn, mut setup) = fresh(name).await;
    allow_untyped(&mut conn, &setup.db).await;
    let parked = parking(&mut setup);
    if exactly_once {
        setup.delivery(Some(&exactly_once_delivery(name, true)));
    }
    if crash.is_none() {
        // Records wait half a second in the producer: a release that read the parking
        // topic without waiting for what was just parked would miss it.
        setup
            .kafka_properties
            .push(("linger.ms".into(), "500".into()));
    }
    let destination = setup.topic("Order");
    let topics = [destination.clone(), parked.clone()];
    let kafka = Kafka::local();
    let first_part = total - AGGREGATES;
    let env: Vec<(&str, String)> = crash
        .map(|point| ("FAILPOINTS", format!("{point}=return")))
        .into_iter()
        .collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut router = setup.start_router_env(&env);
    write_events(&setup.db, 0, first_part, total).await;
    wait_all(&kafka, &topics, first_part, &router);
    fix_bad_rows(&setup.db, total).await;

    let list = setup.cli(&["parked", "list", "--json"]);
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let listed: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), BAD.len(), "{listed}");

    // Without a crash, the last round is written while the release runs: events of the
    // released aggregates are read before, during and after it.
    let db = setup.db.clone();
    let pause = Duration::from_millis(400);
    let mut writer = crash.is_none().then(|| {
        tokio::spawn(async move {
            write_paced(mariadb_port(), &db, first_part, total, total, pause).await
        })
    });
    let ids = bad_ids();
    let mut args = vec![
        "parked",
        "release",
        "--reason",
        "event_type fixed",
        "--by",
        "it",
    ];
    args.extend(ids.iter().map(String::as_str));
    let wait = match crash {
        Some(_) => "0",
        None => "120",
    };
    args.extend(["--wait", wait, "--json"]);
    let out = setup.cli(&args);
    let answer = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{answer}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if let Some(point) = crash {
        let status = router
            .wait(Duration::from_secs(60))
            .expect("the failpoint fired");
        assert!(!status.success());
        assert!(
            router.log().contains(&format!("failpoint {point}")),
            "{}",
            router.log()
        );
        router = setup.start_router();
    } else {
        let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
        let outcomes = v["outcomes"].as_array().unwrap();
        assert_eq!(outcomes.len(), BAD.len(), "{v}");
        assert!(outcomes.iter().all(|o| o["outcome"] == "released"), "{v}");
    }
    // Un-parked for every instance: the list is empty once the leader is done.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let list = setup.cli(&["parked", "list", "--json"]);
        let listed: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
        if listed.as_array().unwrap().is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still parked: {listed}\n{}",
            router.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Later events of the released aggregates go straight to their topic, after them.
    match writer.take() {
        Some(writer) => writer.await.unwrap(),
        None => write_events(&setup.db, first_part, total, total).await,
    }
    let all = HashSet::<usize>::from_iter(0..total);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let on_dest: HashSet<usize> = kafka
            .read_all(std::slice::from_ref(&destination))
            .iter()
            .map(seq_of)
            .collect();
        if on_dest == all {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {total} on {destination}:\n{}",
            on_dest.len(),
            router.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let gauges = parked_gauges(setup.monitor_port).await;
    router.stop(Duration::from_secs(30));
    let duplicates = check_released(&kafka, &destination, total);
    if exactly_once {
        assert_eq!(duplicates, 0, "read_committed duplicates on {destination}");
    }
    assert_eq!(
        gauges,
        (Some(0.0), Some(0.0)),
        "parked gauges after the release"
    );
    let log = router.log();
    assert!(log.contains("aggregate un-parked"), "{log}");
    println!(
        "parking release ({name}, crash {crash:?}): events={total} lost=0 duplicates={duplicates}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_delivers_the_parked_events_in_order_exactly_once() {
    release_case("park_rel_eos", true, None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_at_least_once_keeps_order() {
    release_case("park_rel_alo", false, None).await;
}

/// Killed after the released records were acknowledged, before the outcome: the
/// restarted leader releases again (duplicates with the same ids, in order).
#[tokio::test(flavor = "multi_thread")]
async fn a_release_killed_before_its_outcome_is_repeated_in_order() {
    release_case(
        "park_rel_kill_alo",
        false,
        Some("parking.release_before_outcome"),
    )
    .await;
}

/// Exactly-once, killed with the release handed to the producer: its Kafka transaction
/// never commits; the next leader carries the request out, once.
#[tokio::test(flavor = "multi_thread")]
async fn a_release_killed_inside_its_transaction_is_carried_out_once() {
    release_case("park_rel_kill_eos", true, Some("parking.release_handed_on")).await;
}

/// A release while the row is still bad is refused (exit 1, the reason named) and the
/// aggregate stays parked; a drop un-parks it without delivering: its parked events
/// never reach the topic, its later ones do. Both are in the audit trail.
#[tokio::test(flavor = "multi_thread")]
async fn an_unfixed_release_is_refused_and_a_drop_unparks_without_delivering() {
    let _settings = SERVER_SETTINGS.read().await;
    let total = 4 * AGGREGATES;
    let (mut conn, mut setup) = fresh("park_refuse").await;
    allow_untyped(&mut conn, &setup.db).await;
    let parked = parking(&mut setup);
    let destination = setup.topic("Order");
    let kafka = Kafka::local();
    let mut router = setup.start_router();
    let first_part = total - AGGREGATES;
    write_events(&setup.db, 0, first_part, total).await;
    wait_all(
        &kafka,
        &[destination.clone(), parked.clone()],
        first_part,
        &router,
    );

    let out = setup.cli(&[
        "parked", "release", "k-3", "--reason", "try", "--wait", "60",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("refused") && text.contains("CloudEvent needs a type"),
        "{text}"
    );
    let out = setup.cli(&[
        "parked", "release", "k-4", "--reason", "typo", "--wait", "5",
    ]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success() && err.contains("\"k-4\" is not parked"),
        "{err}"
    );

    let out = setup.cli(&[
        "parked",
        "drop",
        "k-3",
        "--reason",
        "test data",
        "--by",
        "it",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success() && text.contains("dropped"), "{text}");
    let list = setup.cli(&["parked", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), BAD.len() - 1, "{listed}");
    assert!(!listed.to_string().contains("\"k-3\""), "{listed}");

    write_events(&setup.db, first_part, total, total).await;
    wait_all(
        &kafka,
        &[destination.clone(), parked.clone()],
        total,
        &router,
    );
    router.stop(Duration::from_secs(30));
    let on_dest: Vec<usize> = kafka
        .read_all(std::slice::from_ref(&destination))
        .iter()
        .map(seq_of)
        .filter(|s| s % AGGREGATES == 3)
        .collect();
    let bad = bad_seq(3, total).unwrap();
    let expected: Vec<usize> = (3..total)
        .step_by(AGGREGATES)
        .filter(|s| *s < bad || *s >= first_part)
        .collect();
    assert_eq!(
        on_dest, expected,
        "k-3: before its bad row, then after the drop"
    );
    let audit = setup.cli(&["audit", "--json"]);
    let audit = String::from_utf8_lossy(&audit.stdout).to_string();
    assert!(
        audit.contains("parked drop") && audit.contains("parked release"),
        "{audit}"
    );
}

/// A pool of two sources on two servers, both parking: instance `a` leads both and parks
/// their bad aggregates; `b` joins and takes one; `a` is killed -9 and `b` leads both,
/// parking the later events it never saw the bad rows of; a release sent to the pool
/// (`--source`) is carried out by `b`: every event once, in order.
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_moves_a_parked_source_and_releases_it_where_it_runs() {
    let _settings = SERVER_SETTINGS.read().await;
    let total = 4 * AGGREGATES;
    let first_part = (bad_round(total) + 1) * AGGREGATES;
    let pool = crate::pool::Pool::new_with("parkpool", 2, |s| {
        parking(s);
    })
    .await;
    for s in &pool.sources {
        allow_untyped(&mut app_conn_at(s.source_port).await, &s.db).await;
    }
    let kafka = Kafka::local();
    let topics = |i: usize| {
        let s = &pool.sources[i];
        [s.topic("Order"), format!("{}.parked", s.topic_prefix)]
    };
    let (pa, pb) = (monitor_port(), monitor_port());
    let mut a = pool.start("a", pa, &["--init"]);
    crate::pool::wait_balanced(&[pa], 2, Duration::from_secs(90), &[&a]).await;
    for (i, s) in pool.sources.iter().enumerate() {
        write_events_at(s.source_port, &s.db, 0, first_part, total).await;
        wait_all(&kafka, &topics(i), first_part, &a);
    }
    let mut b = pool.start("b", pb, &[]);
    crate::pool::wait_balanced(&[pa, pb], 2, Duration::from_secs(90), &[&a, &b]).await;
    a.kill9();
    crate::pool::wait_balanced(&[pb], 2, Duration::from_secs(90), &[&b]).await;
    for (i, s) in pool.sources.iter().enumerate() {
        write_events_at(s.source_port, &s.db, first_part, total, total).await;
        wait_all(&kafka, &topics(i), total, &b);
    }
    // Source 1 stays parked: checked as parked. Source 0 is fixed and released.
    let [dest1, parked1] = topics(1);
    let (duplicates, _) = check(&kafka, &dest1, &parked1, total);
    assert_eq!(duplicates, 0, "source 1: read_committed duplicates");
    let s0 = &pool.sources[0];
    fix_bad_rows_at(s0.source_port, &s0.db, total).await;
    let ids = bad_ids();
    let out = pool.cli("b", pb, &pool.names[0], &release_all_args(&ids));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        b.log()
    );
    assert_eq!(text.matches(": released at ").count(), BAD.len(), "{text}");
    b.stop(Duration::from_secs(60));
    let [dest0, _] = topics(0);
    let duplicates = check_released(&kafka, &dest0, total);
    assert_eq!(
        duplicates, 0,
        "source 0: read_committed duplicates after the release"
    );
    println!("parking in a pool: 2 sources x {total} events, one moved by a kill -9, released on the other instance: lost=0 duplicates=0");
}

/// `prune` keeps the rows of parked events, however old (a release reads them again),
/// and deletes the rest it may; the release then delivers the kept rows fixed.
#[tokio::test(flavor = "multi_thread")]
async fn prune_keeps_parked_rows_for_their_release() {
    let _settings = SERVER_SETTINGS.read().await;
    let total = 2 * AGGREGATES;
    let (mut conn, mut setup) = fresh("park_prune").await;
    allow_untyped(&mut conn, &setup.db).await;
    crate::ops::pruner_user(&mut setup);
    let parked = parking(&mut setup);
    let destination = setup.topic("Order");
    let kafka = Kafka::local();
    let mut router = setup.start_router();
    write_events(&setup.db, 0, total, total).await;
    wait_all(
        &kafka,
        &[destination.clone(), parked.clone()],
        total,
        &router,
    );
    conn.query_drop(format!(
        "UPDATE {}.outbox SET created_at = NOW(6) - INTERVAL 9 DAY",
        setup.db
    ))
    .await
    .unwrap();
    let out = setup.cli(&["prune", "--older-than", "7d"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kept = BAD.len() * (total / AGGREGATES - bad_round(total));
    assert!(
        text.contains(&format!("deleted {} row(s)", total - kept))
            && text.contains(&format!("{kept} parked row(s) kept")),
        "{text}"
    );
    fix_bad_rows(&setup.db, total).await;
    let ids = bad_ids();
    let out = setup.cli(&release_all_args(&ids));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    router.stop(Duration::from_secs(30));
    check_released(&kafka, &destination, total);
}

/// Events of the refused-topic tests: `s-N`; every fifth an invoice of `i-(N/5 % 5)`,
/// the rest orders of `k-(N % 50)`.
fn refused_event(n: usize) -> (&'static str, String) {
    match n % 5 {
        0 => ("Invoice", format!("i-{}", n / 5 % 5)),
        _ => ("Order", format!("k-{}", n % 50)),
    }
}

/// The event of the refused-size test over the invoices' `max.message.bytes`: `i-0`'s.
const TOO_LARGE: usize = 500;

/// Writes refused-topic events `from..to`, 20 to a transaction; with `pad`, event
/// `TOO_LARGE` carries that many more bytes.
async fn write_refused(db: &str, from: usize, to: usize, pad: usize) {
    let mut conn = app_conn().await;
    for start in (from..to).step_by(20) {
        let end = (start + 20).min(to);
        let rows = (start..end).map(|n| {
            let (kind, agg) = refused_event(n);
            let pad = if n == TOO_LARGE { pad } else { 0 };
            (n, kind, agg, "Happened".into(), pad)
        });
        insert_txn_of(&mut conn, db, rows).await;
    }
}

/// Waits until `topic` holds `n` distinct event ids.
fn wait_ids(kafka: &Kafka, topic: &str, n: usize, who: &RouterProcess) {
    wait_all(kafka, &[topic.to_string()], n, who)
}

/// Each aggregate's events on `topic` (first copies, in offset order), and duplicates.
fn by_aggregate(kafka: &Kafka, topic: &str) -> (HashMap<String, Vec<usize>>, usize) {
    let mut msgs = kafka.read_all(&[topic.to_string()]);
    msgs.sort_by_key(|m| (m.partition, m.offset));
    let (mut seen, mut duplicates) = (HashSet::new(), 0);
    let mut out: HashMap<String, Vec<usize>> = HashMap::new();
    for m in &msgs {
        if !seen.insert(m.id()) {
            duplicates += 1;
            continue;
        }
        let agg = String::from_utf8(m.key.clone()).unwrap();
        out.entry(agg).or_default().push(seq_of(m));
    }
    (out, duplicates)
}

/// `parked list` holds exactly `ids`, the reason naming `why`.
fn assert_parked(setup: &RouterSetup, ids: &[&str], why: &str) {
    let list = setup.cli(&["parked", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let mut parked: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    parked.sort();
    assert_eq!(parked, ids, "{listed}");
    assert!(listed.to_string().contains(why), "{listed}");
}

/// A release of `i-0` while Kafka still refuses: answered as refused (exit 1), naming
/// `why`; the router goes on.
fn release_refused(setup: &RouterSetup, router: &RouterProcess, why: &str) {
    let out = setup.cli(&[
        "parked",
        "release",
        "i-0",
        "--reason",
        "too early",
        "--wait",
        "90",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{text}\n{}", router.log());
    assert!(text.contains("refused") && text.contains(why), "{text}");
}

/// Once the cause is fixed: the release of `ids` done, the refused-topic events
/// `first..total` written and delivered, the router stopped.
async fn release_then_the_rest(
    setup: &RouterSetup,
    router: &mut RouterProcess,
    ids: &[&str],
    (first, total): (usize, usize),
) {
    let mut args = vec!["parked", "release", "--reason", "fixed", "--wait", "120"];
    args.extend(ids);
    let out = setup.cli(&args);
    assert!(
        out.status.success(),
        "{}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        router.log()
    );
    write_refused(&setup.db, first, total, 0).await;
    let kafka = Kafka::local();
    wait_ids(&kafka, &setup.topic("Order"), total * 4 / 5, router);
    wait_ids(&kafka, &setup.topic("Invoice"), total / 5, router);
    router.stop(Duration::from_secs(30));
}

/// Every ACL for dave, but WRITE on `topic`: the `--deny-principal …` arguments, for
/// removing the denial again.
fn deny_dave_writes(topic: &str) -> [String; 6] {
    kafka_acl(&[
        "--add",
        "--allow-principal",
        "User:dave",
        "--operation",
        "All",
        "--topic",
        "*",
        "--group",
        "*",
        "--transactional-id",
        "*",
        "--cluster",
    ]);
    let deny = [
        "--deny-principal",
        "User:dave",
        "--operation",
        "Write",
        "--topic",
        topic,
    ]
    .map(String::from);
    kafka_acl(&[&["--add"][..], &deny.each_ref().map(String::as_str)[..]].concat());
    deny
}

/// Client properties of the router as dave (SASL/PLAIN, `kafka_sasl_bootstrap`).
fn as_dave() -> Vec<(String, String)> {
    [
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "PLAIN"),
        ("sasl.username", "dave"),
        ("sasl.password", "dave-secret"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// A topic the router's Kafka user may not write to (dave: every ACL, but WRITE on the
/// invoices' topic denied): each invoice aggregate parks from its first refused event on
/// while every order flows; a release while the topic still refuses is answered as
/// refused (the router goes on); once WRITE is granted, a release delivers the invoices
/// in order, once in exactly-once mode, and their later events follow straight.
async fn refused_topic_case(name: &str, exactly_once: bool) {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, mut setup) = fresh(name).await;
    let parked = parking(&mut setup);
    if exactly_once {
        setup.delivery(Some(&exactly_once_delivery(name, true)));
    }
    let (orders, invoices) = (setup.topic("Order"), setup.topic("Invoice"));
    let deny = deny_dave_writes(&invoices);
    setup.kafka_bootstrap = kafka_sasl_bootstrap();
    setup.kafka_properties.extend(as_dave());
    let kafka = Kafka::local();
    let mut router = setup.start_router();
    let (first, total) = (2_000, 3_000);
    write_refused(&setup.db, 0, first, 0).await;
    wait_ids(&kafka, &orders, first * 4 / 5, &router);
    wait_ids(&kafka, &parked, first / 5, &router);
    assert_parked(
        &setup,
        &["i-0", "i-1", "i-2", "i-3", "i-4"],
        "TopicAuthorizationFailed",
    );
    // Still refused: the release is answered so, and the router goes on.
    release_refused(&setup, &router, "TopicAuthorizationFailed");
    kafka_acl(&[&["--remove"][..], &deny.each_ref().map(String::as_str)[..]].concat());
    release_then_the_rest(
        &setup,
        &mut router,
        &["i-0", "i-1", "i-2", "i-3", "i-4"],
        (first, total),
    )
    .await;

    let (on_orders, order_dups) = by_aggregate(&kafka, &orders);
    let (on_invoices, invoice_dups) = by_aggregate(&kafka, &invoices);
    for n in 0..total {
        let (kind, agg) = refused_event(n);
        let on = match kind {
            "Order" => &on_orders,
            _ => &on_invoices,
        };
        assert!(on.get(&agg).is_some_and(|s| s.contains(&n)), "s-{n} lost");
    }
    for (agg, seqs) in on_orders.iter().chain(&on_invoices) {
        assert!(seqs.is_sorted(), "{agg} out of order: {seqs:?}");
    }
    let log = router.log();
    assert!(!log.contains("dave-secret"), "password leaked");
    if exactly_once {
        assert_eq!((order_dups, invoice_dups), (0, 0), "duplicates");
    }
    println!(
        "refused topic ({}): {total} events, 0 lost, duplicates {order_dups} order / {invoice_dups} invoice, {} parked records",
        if exactly_once { "exactly-once" } else { "at-least-once" },
        kafka.read_all(&[parked]).len(),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_topic_refused_by_acl_parks_its_aggregates_and_releases_once_granted() {
    refused_topic_case("park_acl_alo", false).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_topic_refused_by_acl_parks_exactly_once_and_releases_once_granted() {
    refused_topic_case("park_acl_eos", true).await
}

/// A record over its topic's own `max.message.bytes` (20,000; the producer's
/// `batch.size` below it, so librdkafka sends the large record in a batch of its own):
/// only its aggregate parks, from it on; every other aggregate of that topic flows. A
/// release before the limit is raised is refused; after it, it delivers in order.
async fn refused_size_case(name: &str, exactly_once: bool) {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, mut setup) = fresh(name).await;
    let parked = parking(&mut setup);
    if exactly_once {
        setup.delivery(Some(&exactly_once_delivery(name, true)));
    }
    let (orders, invoices) = (setup.topic("Order"), setup.topic("Invoice"));
    setup.extra_toml += &format!(
        "[[kafka.topics.rule]]\npattern = \"{invoices}\"\nconfig = {{ \"max.message.bytes\" = \"20000\" }}\n"
    );
    setup
        .kafka_properties
        .push(("batch.size".into(), "16384".into()));
    let kafka = Kafka::local();
    let mut router = setup.start_router();
    let (first, total) = (2_000, 3_000);
    write_refused(&setup.db, 0, first, 60_000).await;
    // i-0 parks from its large event on: that and its later events of the first part.
    let held = (TOO_LARGE..first).step_by(25).count();
    wait_ids(&kafka, &orders, first * 4 / 5, &router);
    wait_ids(&kafka, &invoices, first / 5 - held, &router);
    wait_ids(&kafka, &parked, held, &router);
    // Parked by reference: the row's table and event id, not the value Kafka refused.
    let large = kafka
        .read_all(std::slice::from_ref(&parked))
        .into_iter()
        .find(|m| m.id() == format!("s-{TOO_LARGE}"))
        .expect("the large event is parked");
    assert!(
        large.payload.as_deref().unwrap_or_default().is_empty(),
        "parked with its value"
    );
    assert!(large.headers.contains_key("parked.value_omitted"));
    assert_parked(&setup, &["i-0"], "MessageSizeTooLarge");
    release_refused(&setup, &router, "MessageSizeTooLarge");
    raise_max_message_bytes(&invoices).await;
    release_then_the_rest(&setup, &mut router, &["i-0"], (first, total)).await;

    let mut msgs = kafka.read_all(std::slice::from_ref(&invoices));
    msgs.sort_by_key(|m| (m.partition, m.offset));
    // Exactly-once: each once, in order. At-least-once: a later event of i-0 acknowledged
    // before the refusal came back may be ahead of it; the release sends it again after
    // it, so the last copy of each is in order (docs/guarantees.md).
    let mut last: HashMap<String, usize> = HashMap::new();
    for (i, m) in msgs.iter().enumerate() {
        last.insert(m.id(), i);
    }
    let mut by_agg: HashMap<String, Vec<(usize, usize)>> = HashMap::new();
    for (id, i) in &last {
        let agg = String::from_utf8(msgs[*i].key.clone()).unwrap();
        by_agg.entry(agg).or_default().push((*i, seq_of(&msgs[*i])));
        let _ = id;
    }
    for (agg, mut at) in by_agg {
        at.sort();
        let seqs: Vec<usize> = at.iter().map(|(_, s)| *s).collect();
        let all: Vec<usize> = (0..total)
            .filter(|n| refused_event(*n) == ("Invoice", agg.clone()))
            .collect();
        assert_eq!(seqs, all, "{agg} on {invoices}");
    }
    let (_, order_dups) = by_aggregate(&kafka, &orders);
    let invoice_dups = msgs.len() - last.len();
    if exactly_once {
        assert_eq!((order_dups, invoice_dups), (0, 0), "duplicates");
    }
    println!(
        "refused size ({}): {total} events, 0 lost, duplicates {order_dups} order / {invoice_dups} invoice, {held} held",
        if exactly_once { "exactly-once" } else { "at-least-once" },
    );
}

/// Raises `topic`'s `max.message.bytes` to 1,000,000.
async fn raise_max_message_bytes(topic: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .unwrap();
    let alter =
        AlterConfig::new(ResourceSpecifier::Topic(topic)).set("max.message.bytes", "1000000");
    let result = admin
        .alter_configs(&[alter], &AdminOptions::new())
        .await
        .unwrap();
    assert!(result.iter().all(Result::is_ok), "{result:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_over_its_topics_size_parks_only_its_aggregate() {
    refused_size_case("park_size_alo", false).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_over_its_topics_size_parks_exactly_once() {
    refused_size_case("park_size_eos", true).await
}

/// `reconcile`, `replay` and `recover` know the parked rows: reconcile counts parked
/// events apart from missing ones (and the invalid rows apart from records) and is
/// clean; a replay of a parked aggregate leaves its events out (exit 1, named) rather
/// than let them overtake the release; recover holds a parked aggregate's rows on the
/// parking topic (and parks a bad row it reads) instead of sending them ahead. After
/// the release every aggregate is in order on its topic.
#[tokio::test(flavor = "multi_thread")]
async fn reconcile_replay_and_recover_know_parked_rows() {
    let _settings = SERVER_SETTINGS.read().await;
    let total = 6 * AGGREGATES;
    let (mut conn, mut setup) = fresh("park_ops").await;
    allow_untyped(&mut conn, &setup.db).await;
    let parked = parking(&mut setup);
    let destination = setup.topic("Order");
    let topics = [destination.clone(), parked.clone()];
    let kafka = Kafka::local();
    let since = unix_secs_ago(60);
    let mut router = setup.start_router();
    let first_part = total - AGGREGATES;
    write_events(&setup.db, 0, first_part, total).await;
    wait_all(&kafka, &topics, first_part, &router);
    router.stop(Duration::from_secs(30));

    // reconcile: the held events are parked, not missing; the bad rows are counted.
    let out = setup.cli(&["reconcile", "--json", "--since", &since]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("reconcile: {e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(out.status.success(), "{report:#}");
    let counts = &report["topics"][&destination];
    let held = (first_part - bad_round(total) * AGGREGATES) / AGGREGATES - 1;
    assert_eq!(counts["parked"], BAD.len() * held, "{report:#}");
    assert_eq!(counts["missing"], 0, "{report:#}");
    assert_eq!(report["invalid_rows"], BAD.len(), "{report:#}");
    assert_eq!(
        counts["found_once"],
        first_part - BAD.len() * (held + 1),
        "{report:#}"
    );

    // replay of a parked aggregate: left out, named, exit 1; nothing sent for it.
    let before = kafka.read_all(std::slice::from_ref(&destination)).len();
    let out = setup.cli(&[
        "replay",
        "--aggregate-id",
        "k-3",
        "--reason",
        "try a parked one",
    ]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not replayed: their aggregate is parked"),
        "{err}"
    );
    assert!(
        err.contains(&format!("s-{}", bad_seq(3, total).unwrap())),
        "{err}"
    );
    assert_eq!(
        kafka.read_all(std::slice::from_ref(&destination)).len(),
        before,
        "a parked aggregate's event was replayed"
    );

    // recover over the whole window: the bad aggregates' rows go to the parking topic,
    // behind what is parked; nothing of them reaches the destination.
    let out = setup.cli(&["recover", "--since", &since]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "recover: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("belong to parked aggregates"), "{text}");
    for m in kafka.read_all(std::slice::from_ref(&destination)) {
        let seq = seq_of(&m);
        if let Some(bad) = bad_seq(seq % AGGREGATES, total) {
            assert!(
                seq < bad,
                "s-{seq} of a parked aggregate sent ahead of its release"
            );
        }
    }

    // The rest, then the release: every aggregate in order (first copies), nothing lost.
    let mut router = setup.start_router();
    write_events(&setup.db, first_part, total, total).await;
    wait_all(&kafka, &topics, total, &router);
    fix_bad_rows(&setup.db, total).await;
    let ids = bad_ids();
    let out = setup.cli(&release_all_args(&ids));
    assert!(
        out.status.success(),
        "{}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        router.log()
    );
    router.stop(Duration::from_secs(30));
    let duplicates = check_released(&kafka, &destination, total);
    println!("parked rows through reconcile, replay, recover and a release: {total} events, 0 lost, {duplicates} duplicates (recover re-publishes at least once)");
}

/// Standby shape, both orders: the leader, denied WRITE on the invoices' topic, parks
/// the invoice aggregates and is killed -9; the standby, which never led and never met
/// the refusal, parks the later invoice events (the parked set from Kafka, the refusal
/// met again for itself) and carries out the release once WRITE is granted: every event
/// once (exactly-once), each aggregate in order.
async fn refused_topic_standby(name: &str, b_first: bool) {
    let _settings = SERVER_SETTINGS.read().await;
    let mut p = crate::standby::pair_on(name, kafka_sasl_bootstrap(), as_dave()).await;
    if b_first {
        std::mem::swap(&mut p.a, &mut p.b);
    }
    let parked = parking(&mut p.a);
    assert_eq!(parking(&mut p.b), parked);
    let (orders, invoices) = (p.a.topic("Order"), p.a.topic("Invoice"));
    let deny = deny_dave_writes(&invoices);
    let kafka = Kafka::local();
    let mut a = p.a.start_router();
    wait_streaming(p.a.monitor_port, Duration::from_secs(60), &a).await;
    let mut b = p.b.start_router();
    crate::standby::wait_standby_ready(p.b.monitor_port, &b).await;
    write_refused(&p.a.db, 0, 1_000, 0).await;
    wait_ids(&kafka, &orders, 800, &a);
    wait_ids(&kafka, &parked, 200, &a);
    a.kill9();
    write_refused(&p.a.db, 1_000, 2_000, 0).await;
    wait_streaming(p.b.monitor_port, Duration::from_secs(90), &b).await;
    wait_ids(&kafka, &orders, 1_600, &b);
    wait_ids(&kafka, &parked, 400, &b);
    assert_parked(
        &p.b,
        &["i-0", "i-1", "i-2", "i-3", "i-4"],
        "TopicAuthorizationFailed",
    );
    assert!(
        kafka.read_all(std::slice::from_ref(&invoices)).is_empty(),
        "an invoice reached its topic while it was refused"
    );
    kafka_acl(&[&["--remove"][..], &deny.each_ref().map(String::as_str)[..]].concat());
    release_then_the_rest(
        &p.b,
        &mut b,
        &["i-0", "i-1", "i-2", "i-3", "i-4"],
        (2_000, 3_000),
    )
    .await;
    let (on_orders, order_dups) = by_aggregate(&kafka, &orders);
    let (on_invoices, invoice_dups) = by_aggregate(&kafka, &invoices);
    for n in 0..3_000 {
        let (kind, agg) = refused_event(n);
        let on = if kind == "Order" {
            &on_orders
        } else {
            &on_invoices
        };
        assert!(on.get(&agg).is_some_and(|s| s.contains(&n)), "s-{n} lost");
    }
    for (agg, seqs) in on_orders.iter().chain(&on_invoices) {
        assert!(seqs.is_sorted(), "{agg} out of order: {seqs:?}");
    }
    assert_eq!(
        (order_dups, invoice_dups),
        (0, 0),
        "read_committed duplicates"
    );
    println!("refused topic, standby takeover ({name}): 3000 events, 0 lost, 0 duplicates");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standby_parks_a_refused_topic_the_leader_met() {
    refused_topic_standby("park_acl_sb", false).await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_other_instance_first_parks_a_refused_topic_the_same() {
    refused_topic_standby("park_acl_sb2", true).await
}
