//! Transactions larger than the in-flight window (records and bytes): they stream in
//! parts, the window holds inside them, every event arrives once and in order, and a
//! crash inside one loses nothing.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::util::*;

/// Rows in the large transaction: 20× the test router's `max_in_flight` (5,000).
const ROWS: usize = 100_000;

/// One transaction of `rows` outbox rows (seq `from..from + rows`), written 5,000 rows
/// per INSERT statement.
async fn insert_large_txn(db: &str, from: usize, rows: usize, payload_len: usize) {
    let mut conn = app_conn().await;
    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    let pad = "x".repeat(payload_len);
    for chunk in (from..from + rows).collect::<Vec<_>>().chunks(5_000) {
        let events: Vec<Ev> = chunk
            .iter()
            .map(|s| {
                let payload = format!("{{\"seq\":{s},\"pad\":\"{pad}\"}}");
                Ev::new(
                    format!("s-{s}"),
                    TYPES[s % 3],
                    &format!("k-{}", s % 50),
                    payload,
                )
            })
            .collect();
        insert_in(&mut tx, db, &events).await;
    }
    tx.commit().await.unwrap();
}

/// Samples `outbox_router_in_flight_records` until stopped; the highest value seen.
fn sample_in_flight(port: u16) -> (Arc<AtomicBool>, Arc<AtomicI64>, tokio::task::JoinHandle<()>) {
    let (stop, max) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicI64::new(0)),
    );
    let (flag, high) = (stop.clone(), max.clone());
    let task = tokio::spawn(async move {
        while !flag.load(Ordering::Relaxed) {
            if let Some((200, body)) = try_http_get(port, "/metrics").await {
                let v = body.lines().find_map(|l| {
                    l.strip_prefix("outbox_router_in_flight_records ")?
                        .trim()
                        .parse()
                        .ok()
                });
                if let Some(v) = v {
                    high.fetch_max(v, Ordering::Relaxed);
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    (stop, max, task)
}

async fn large(name: &str, delivery: Option<&str>, crash: Option<&str>) -> usize {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, mut setup) = fresh(name).await;
    setup.pipeline_toml = "max_in_flight_bytes = 2000000".into();
    setup.delivery(delivery);
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    // Small transactions around the large one: order across them is checked too.
    insert_txn(
        &mut app_conn().await,
        &setup.db,
        &[Ev::new("s-0", "Order", "k-0", "{\"seq\":0}")],
    )
    .await;
    insert_large_txn(&setup.db, 1, ROWS, 100).await;
    insert_txn(
        &mut app_conn().await,
        &setup.db,
        &[Ev::new(
            format!("s-{}", ROWS + 1),
            "Order",
            "k-0",
            format!("{{\"seq\":{}}}", ROWS + 1),
        )],
    )
    .await;
    let total = ROWS + 2;
    if let Some(point) = crash {
        let spec = format!("{point}=8*off->return");
        let mut router = setup.start_router_env(&[("FAILPOINTS", spec.as_str())]);
        let status = router
            .wait(Duration::from_secs(120))
            .unwrap_or_else(|| panic!("{point} never fired:\n{}", router.log()));
        assert!(!status.success(), "{status}:\n{}", router.log());
        assert!(
            router.log().contains(&format!("failpoint {point}")),
            "{}",
            router.log()
        );
    }
    let mut router = setup.start_router();
    let (stop, max, sampler) = sample_in_flight(setup.monitor_port);
    drain_and_stop(&mut router, &topics, total);
    stop.store(true, Ordering::Relaxed);
    sampler.await.unwrap();
    let held = max.load(Ordering::Relaxed);
    let duplicates = check_stream(&topics, total);
    println!(
        "large transaction ({name}): rows={ROWS} max_in_flight_records_seen={held} events={total} lost=0 duplicates={duplicates}"
    );
    // Held whole, the gauge would reach 100,000: the window (5,000 records, 2 MB), the
    // channel and the reader's part bound it far below.
    assert!(held > 0, "the in-flight gauge was never sampled above 0");
    assert!(
        held < 50_000,
        "{held} records in flight: the transaction was held whole"
    );
    duplicates
}

#[tokio::test(flavor = "multi_thread")]
async fn large_transaction_streams_within_the_window() {
    let duplicates = large("large_txn", None, None).await;
    assert_eq!(duplicates, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_inside_a_large_transaction_loses_nothing() {
    large("large_crash", None, Some("sink.mid_transaction")).await;
}

/// One Kafka transaction holds the whole binlog transaction (its parts never commit
/// apart): a crash inside it leaves nothing of it visible, the re-run commits it once.
#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_large_transaction_with_a_crash_inside() {
    let duplicates = large(
        "eos_large",
        Some(&exactly_once_delivery("large", true)),
        Some("sink.mid_transaction"),
    )
    .await;
    assert_eq!(duplicates, 0, "read_committed duplicates");
}

/// `source.max_transaction_bytes`: a larger transaction stops the router, naming it.
#[tokio::test(flavor = "multi_thread")]
async fn transaction_over_the_byte_limit_stops_naming_it() {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, mut setup) = fresh("large_limit").await;
    setup.source_toml = "max_transaction_bytes = 1000000".into();
    insert_large_txn(&setup.db, 0, 20_000, 100).await;
    let mut router = setup.start_router();
    let log = router.expect_failure("a transaction over source.max_transaction_bytes");
    assert!(
        log.contains("source.max_transaction_bytes") && log.contains(&setup.start),
        "the error must name the limit and the transaction's position ({}):\n{log}",
        setup.start
    );
    assert_eq!(
        count(&[setup.topic("Order")]),
        0,
        "nothing of it may be published"
    );
}

/// The bad-input policy inside a streamed transaction: rows with an empty aggregate
/// type, spread over its parts, go to the dead-letter topic with their event ids; every
/// other row arrives once.
#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_inside_a_large_transaction() {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, mut setup) = fresh("large_dlq").await;
    let dlq = format!("{}.dlq", setup.topic_prefix);
    setup.outbox_toml = format!("on_invalid = \"dead-letter\"\ndead_letter_topic = \"{dlq}\"\n");
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    let rows = 30_000;
    let bad = |s: usize| s % 5_000 == 17;
    let mut conn = app_conn().await;
    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    for chunk in (0..rows).collect::<Vec<_>>().chunks(5_000) {
        let events: Vec<Ev> = chunk
            .iter()
            .map(|&s| {
                let agg = if bad(s) { "" } else { TYPES[s % 3] };
                Ev::new(
                    format!("s-{s}"),
                    agg,
                    &format!("k-{}", s % 50),
                    format!("{{\"seq\":{s}}}"),
                )
            })
            .collect();
        insert_in(&mut tx, &setup.db, &events).await;
    }
    tx.commit().await.unwrap();
    let bad_ids: std::collections::BTreeSet<String> = (0..rows)
        .filter(|s| bad(*s))
        .map(|s| format!("s-{s}"))
        .collect();
    let mut router = setup.start_router();
    wait_for_count(
        std::slice::from_ref(&dlq),
        bad_ids.len() as i64,
        Duration::from_secs(120),
    );
    drain_and_stop(&mut router, &topics, rows - bad_ids.len());
    let good: std::collections::BTreeSet<String> = read_all(&topics).iter().map(Msg::id).collect();
    let dead: std::collections::BTreeSet<String> = read_all(&[dlq]).iter().map(Msg::id).collect();
    println!(
        "large transaction with invalid rows: rows={rows} delivered={} dead_letters={}",
        good.len(),
        dead.len()
    );
    assert_eq!(
        dead, bad_ids,
        "dead letters must carry exactly the bad rows' event ids"
    );
    assert_eq!(good.len(), rows - bad_ids.len());
    assert!(good.is_disjoint(&bad_ids));
}
