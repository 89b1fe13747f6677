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

/// The backlog test compares binlog commit times (the database's clock) with "now":
/// with the router's own clock a minute ahead of the database's, a caught-up stream
/// looked like a backlog and its transactions stayed open up to `commit_backlog_ms`
/// (5 s by default, a minute here), so nothing of a steady stream became visible while
/// it flowed, and `lag_seconds` read a minute. The server's clock is measured at each
/// connect and used instead: records of a steady stream become visible while it goes
/// on, and lag stays below a few seconds.
#[tokio::test(flavor = "multi_thread")]
async fn a_router_clock_ahead_of_the_database_keeps_caught_up_transactions_short() {
    let _settings = SERVER_SETTINGS.read().await;
    let name = "eos_clock_ahead";
    let (mut conn, mut setup) = fresh(name).await;
    setup.delivery(Some(&format!(
        "{}\ncommit_backlog_ms = 60000",
        exactly_once_delivery(name, true)
    )));
    let mut router =
        setup.start_router_env(&[("FAILPOINTS", "clock.wall_offset_ms=return(60000)")]);
    wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(60)).await;
    let metrics = || async {
        try_http_get(setup.monitor_port, "/metrics")
            .await
            .map(|(_, body)| body)
            .unwrap_or_default()
    };
    let started = std::time::Instant::now();
    let mut n = 0;
    while started.elapsed() < Duration::from_secs(4) {
        let ev = Ev::new(format!("tick-{n}"), "Order", "agg-tick", "{}");
        insert_txn(&mut conn, &setup.db, &[ev]).await;
        n += 1;
    }
    let during = metrics().await;
    let acked = metric(&during, "outbox_router_events_acked_total");
    // Absent until something was held.
    let lag: f64 = during
        .lines()
        .find_map(|l| l.strip_prefix("outbox_router_lag_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(
        acked >= (n / 2) as f64,
        "{acked} of {n} events visible to read_committed readers while the stream flowed (lag_seconds {lag}):\n{}",
        router.log()
    );
    println!("{acked} of {n} visible while the stream flowed, lag_seconds {lag}");
    assert!(
        lag < 10.0,
        "lag_seconds {lag} with the router's clock a minute ahead"
    );
    let topic = setup.topic("Order");
    let ids = read_all(&[topic]).len();
    assert!(ids >= n / 2, "{ids} of {n} records on the topic");
    router.stop(Duration::from_secs(30));
}

/// A Kafka transaction left open past the producer's `transaction.timeout.ms` is aborted
/// by the coordinator: with `commit_backlog_ms = "5m"` every backlog transaction was, and
/// the router read the same backlog again and again; in backlog mode
/// `commit_max_records` was ignored, so a transaction was bounded by time only. Now such
/// a configuration is refused at load, and a backlog's transactions are bounded by
/// records (and bytes) too: a backlog of 20,000 events (commit times an hour old) under
/// a 3 s transaction timeout goes out in transactions of at most 2,000 records (plus
/// the binlog transaction that crosses the bound; caught up they hold 500), 0 lost, 0
/// duplicates.
#[tokio::test(flavor = "multi_thread")]
async fn backlog_transactions_fit_a_short_transaction_timeout() {
    let _settings = SERVER_SETTINGS.read().await;
    let name = "eos_backlog_bound";
    let (mut conn, mut setup) = fresh(name).await;
    for key in ["transaction.timeout.ms", "message.timeout.ms"] {
        setup.kafka_properties.push((key.into(), "3000".into()));
    }
    setup.delivery(Some(&format!(
        "{}\ncommit_backlog_ms = \"5m\"",
        exactly_once_delivery(name, false)
    )));
    let refused = setup.cli(&["run", "--init"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && err.contains("delivery.commit_backlog_ms")
            && err.contains("transaction.timeout.ms (3000 ms)"),
        "{err}"
    );
    setup.extra_toml.clear();
    setup.delivery(Some(&format!(
        "{}\ncommit_max_records = 500\ncommit_backlog_ms = 1000\ncommit_backlog_max_records = 2000",
        exactly_once_delivery(name, false)
    )));
    conn.query_drop("SET timestamp = UNIX_TIMESTAMP() - 3600")
        .await
        .unwrap();
    let total = 20_000;
    for t in 0..total / 100 {
        let events: Vec<Ev> = (0..100)
            .map(|i| {
                let n = t * 100 + i;
                let payload = format!("{{\"seq\":{n}}}");
                Ev::new(
                    format!("s-{n}"),
                    TYPES[n % TYPES.len()],
                    &format!("agg-{}", n % 50),
                    &payload,
                )
            })
            .collect();
        insert_txn(&mut conn, &setup.db, &events).await;
    }
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    let mut router = setup.start_router();
    let log = drain_and_stop(&mut router, &topics, total);
    let sizes: Vec<usize> = log
        .lines()
        .filter(|l| l.contains("Kafka transaction committed"))
        .filter_map(|l| {
            let at = l.find("records=")? + "records=".len();
            l[at..].split_whitespace().next()?.parse().ok()
        })
        .collect();
    let largest = sizes.iter().max().copied().unwrap_or(0);
    println!(
        "backlog under a 3 s transaction timeout: {} transactions, largest {largest} records",
        sizes.len()
    );
    // Larger than caught-up transactions (500): the backlog's sizing was in force.
    assert!(
        largest > 500 && largest <= 2_100,
        "transactions of {sizes:?}"
    );
    assert!(
        !log.contains("TransactionTimedOut") && !log.contains("outlived"),
        "{log}"
    );
    assert_eq!(check_stream(&topics, total), 0, "read_committed duplicates");
}
