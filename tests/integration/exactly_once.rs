//! Exactly-once mode (`[delivery] mode = "exactly-once"`): every crash window of the
//! fault suite, counted by a `read_committed` consumer — 0 lost and 0 duplicates.
//!
//! Cycles per window: `IT_EOS_CYCLES` (default 5; the at-least-once suite runs 20).

use std::time::Duration;

use mysql_async::prelude::Queryable;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};

use crate::crash::{crash_cycles_in, write_mixed};
use crate::util::*;
use crate::{check_stream, TYPES};

fn cycles() -> usize {
    std::env::var("IT_EOS_CYCLES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(5)
}

async fn exactly_once(name: &str, point: &str, lo: u64, hi: u64) {
    let duplicates = crash_cycles_in(
        name,
        point,
        lo,
        hi,
        Some(&exactly_once_delivery(name, true)),
        cycles(),
    )
    .await;
    assert_eq!(
        duplicates, 0,
        "{point}: a read_committed consumer saw {duplicates} duplicates in exactly-once mode"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_crash_after_read_before_produce() {
    exactly_once("eos_read", "read.before_send", 5, 25).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_crash_after_produce_before_ack() {
    exactly_once("eos_produce", "sink.after_send_before_ack", 5, 25).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_crash_after_ack_before_commit() {
    exactly_once("eos_ack", "ack.before_checkpoint", 5, 25).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_crash_mid_transaction_sends() {
    exactly_once("eos_midtxn", "sink.mid_transaction", 3, 20).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_crash_before_commit() {
    exactly_once("eos_before_commit", "txn.before_commit", 1, 6).await;
}

/// Committed in Kafka, not yet in the local store: the marker is the truth.
#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_crash_after_commit_before_store() {
    exactly_once("eos_after_commit", "txn.after_commit", 1, 6).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_crash_before_store_flush() {
    exactly_once("eos_flush", "checkpoint.before_flush", 1, 6).await;
}

/// Another producer's transaction open on the checkpoint topic hides every marker
/// written after it from a `read_committed` reader (and the end a `read_committed`
/// query reports is that transaction's start). A router resuming from the markers must
/// wait for it to end, not resume from the last marker before it and replay.
#[tokio::test(flavor = "multi_thread")]
async fn markers_behind_another_producers_open_transaction_are_waited_for() {
    let _settings = SERVER_SETTINGS.read().await;
    let name = "eos_hidden_marker";
    let (_conn, mut a) = fresh(name).await;
    let checkpoint_topic = format!("it.checkpoints.{name}.{}", std::process::id());
    a.delivery(Some(&exactly_once_delivery(name, true)));
    // A second instance on its own store, like a standby: only the markers tell it
    // where the first one stopped.
    let mut b = RouterSetup::new(&a.db, a.server_id, ("x".into(), 4));
    b.start = a.start.clone();
    b.extra_toml = a.extra_toml.clone();
    let topics: Vec<String> = TYPES.iter().map(|t| a.topic(t)).collect();

    let mut first = a.start_router();
    // Its store, made before the other producer's transaction opens: `checkpoint init`
    // reads the markers too, and would wait for that transaction like the resume does.
    let init = b.cli(&["checkpoint", "init"]);
    assert!(init.status.success(), "{init:?}");
    write_mixed(&a.db, 0, 300, 40).await;
    wait_for_count(&topics, 300, Duration::from_secs(60));

    let other: ThreadedProducer<_> = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .set(
            "transactional.id",
            format!("it-{name}-other-{}", std::process::id()),
        )
        .create()
        .unwrap();
    other.init_transactions(Duration::from_secs(30)).unwrap();
    other.begin_transaction().unwrap();
    other
        .send(
            BaseRecord::to(&checkpoint_topic)
                .key("other-source")
                .payload("open"),
        )
        .unwrap();
    other.flush(Duration::from_secs(30)).unwrap();

    write_mixed(&a.db, 300, 900, 40).await;
    drain_and_stop(&mut first, &topics, 900);

    let before = count(&topics);
    let mut second = b.start_router();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let while_open = count(&topics);
    other.abort_transaction(Duration::from_secs(30)).unwrap();
    write_mixed(&a.db, 900, 1200, 40).await;
    drain_and_stop(&mut second, &topics, 1200);
    let duplicates = check_stream(&topics, 1200);
    println!("hidden marker: duplicates={duplicates}");
    assert_eq!(
        while_open,
        before,
        "the second instance replayed while the markers were hidden:\n{}",
        second.log()
    );
    assert_eq!(
        duplicates,
        0,
        "resumed from a marker older than the last commit:\n{}",
        second.log()
    );
    assert!(
        second
            .log()
            .contains("resuming from the last committed Kafka transaction"),
        "{}",
        second.log()
    );
}

/// Binlog transactions committed an hour before the router's clock (a writer session's
/// `SET timestamp`, as a database clock behind the router's would write them) look like
/// a backlog, where a Kafka transaction may stay open for `commit_backlog_ms` — a minute
/// here. Nothing follows them: the reader has caught up, and they must become visible
/// within `commit_max_ms` of going quiet, not after the minute.
#[tokio::test(flavor = "multi_thread")]
async fn old_commit_times_with_nothing_after_them_commit_at_once() {
    let _settings = SERVER_SETTINGS.read().await;
    let name = "eos_old_times";
    let (mut conn, mut setup) = fresh(name).await;
    setup.delivery(Some(&format!(
        "{}\ncommit_backlog_ms = 60000",
        exactly_once_delivery(name, true)
    )));
    let mut router = setup.start_router();
    conn.query_drop("SET timestamp = UNIX_TIMESTAMP() - 3600")
        .await
        .unwrap();
    for i in 0..3 {
        let ev = Ev::new(format!("old-{i}"), "Order", "agg-old", "{}");
        insert_txn(&mut conn, &setup.db, &[ev]).await;
    }
    let written = std::time::Instant::now();
    let committed = loop {
        let acked = try_http_get(setup.monitor_port, "/metrics")
            .await
            .and_then(|(_, body)| {
                body.lines()
                    .find_map(|l| l.strip_prefix("outbox_router_events_acked_total "))
                    .and_then(|v| v.trim().parse::<f64>().ok())
            })
            .unwrap_or(0.0);
        if acked >= 3.0 || written.elapsed() > Duration::from_secs(20) {
            break acked;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        committed,
        3.0,
        "after {:?} a read_committed consumer could see {committed} of 3:\n{}",
        written.elapsed(),
        router.log()
    );
    let topic = setup.topic("Order");
    let ids: Vec<String> = read_all(&[topic]).iter().map(|m| m.id()).collect();
    assert_eq!(ids, ["old-0", "old-1", "old-2"]);
    router.stop(Duration::from_secs(30));
}

/// A GTID connect: the server finds the file holding the checkpoint's GTID state and
/// announces it with a rotate to its start (`FILE:4`), then skips the transactions the
/// state covers. The reader took that rotate for a position and checkpointed `FILE:4`
/// beside the GTID state: a later resume by position (the `auto` fallback, the archive
/// path, a failover without GTIDs) re-published everything the file held before it —
/// duplicates for `read_committed` consumers. Verified on the server: a quiet
/// restart by GTID must not move the checkpoint back, and a resume by position after it
/// must repeat nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_gtid_connect_never_checkpoints_the_start_of_a_file_it_delivered() {
    // No other test's transactions may move the checkpoint past the window.
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, mut setup) = fresh("eos_gtid_file4").await;
    let db = setup.db.clone();
    setup.delivery(Some(&exactly_once_delivery("eos_gtid_file4", false)));
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    setup.start_here(&mut conn).await;
    write_mixed(&db, 0, 60, 20).await;
    let mut router = setup.start_router();
    drain_and_stop(&mut router, &topics, 60);
    let delivered = setup.checkpoint().expect("checkpoint after delivery");

    // Restarted by GTID with nothing new: connects, stays quiet, stops.
    setup.source_toml = "resume_by = \"gtid\"\n".into();
    let mut router = setup.start_router();
    wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(router.stop(Duration::from_secs(30)).success());
    let after = setup.checkpoint().expect("checkpoint after the quiet run");
    assert!(
        after.0 > delivered.0 || (after.0 == delivered.0 && after.1 >= delivered.1),
        "a GTID connect moved the checkpoint back from {delivered:?} to {after:?}:\n{}",
        router.log()
    );

    // Resumed by file position from there: nothing delivered again.
    setup.source_toml = "resume_by = \"position\"\n".into();
    write_mixed(&db, 60, 80, 20).await;
    let mut router = setup.start_router();
    drain_and_stop(&mut router, &topics, 80);
    assert_eq!(check_stream(&topics, 80), 0, "read_committed duplicates");
}
