//! End-to-end tests against the real local MariaDB and Kafka (`scripts/services up`).
//! Each test has its own database, topics, replica server id and checkpoint store.

mod archive;
mod avro;
mod bad_input;
mod binlog_shapes;
mod checkpoint_torture;
mod cluster;
mod compressed;
#[cfg(feature = "failpoints")]
mod crash;
mod debezium_cutover;
mod event_router;
#[cfg(feature = "failpoints")]
mod exactly_once;
mod failover;
mod fresh_broker;
mod handover;
mod import;
mod large;
mod managed;
mod ops;
mod outage;
mod rows;
mod secured_kafka;
mod security;
mod signals;
mod silent_paths;
mod standby;
mod topics;
mod util;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use mysql_async::prelude::Queryable;

use util::*;

pub(crate) const TYPES: [&str; 3] = ["Order", "Payment", "User"];

/// Events land in the right topic with the right key, id header and identical payload
/// bytes: unicode, a 1 MB payload, a multi-row INSERT, several statements in one
/// transaction.
#[tokio::test(flavor = "multi_thread")]
async fn events_are_routed_with_key_header_and_exact_payload() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, setup) = fresh("route").await;
    let db = setup.db.clone();

    let mut expected: Vec<Ev> = Vec::new();
    // A multi-row INSERT of 40 events over all aggregate types.
    let multi: Vec<Ev> = (0..40)
        .map(|i| {
            Ev::new(
                format!("m-{i}"),
                TYPES[i % 3],
                &format!("agg-{}", i % 7),
                format!("{{\"n\":{i}}}"),
            )
        })
        .collect();
    insert_txn(&mut conn, &db, &multi).await;
    expected.extend(multi);
    // Several INSERT statements in one transaction.
    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    for i in 0..5 {
        let e = Ev::new(
            format!("t-{i}"),
            TYPES[i % 3],
            "agg-tx",
            format!("{{\"stmt\":{i}}}"),
        );
        tx.exec_drop(
            format!("INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?,?,?,?,?)"),
            (&e.id, &e.agg_type, &e.agg_id, "Stmt", &e.payload),
        )
        .await
        .unwrap();
        expected.push(e);
    }
    tx.commit().await.unwrap();
    // Unicode in payload and key.
    let uni = Ev::new(
        "u-1",
        "User",
        "ユーザー-1",
        "{\"name\":\"Zoë 🚀 数据\",\"emoji\":\"✅\"}",
    );
    insert_txn(&mut conn, &db, std::slice::from_ref(&uni)).await;
    expected.push(uni);
    // A 1 MB payload.
    let big = Ev::new(
        "big-1",
        "Order",
        "agg-big",
        format!("{{\"blob\":\"{}\"}}", "x".repeat(1024 * 1024)),
    );
    insert_txn(&mut conn, &db, std::slice::from_ref(&big)).await;
    expected.push(big);

    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    let mut router = setup.start_router();
    let seen = wait_for_count(&topics, expected.len() as i64, Duration::from_secs(60));
    assert_eq!(seen, expected.len() as i64, "router log:\n{}", router.log());
    assert!(
        router.stop(Duration::from_secs(30)).success(),
        "router log:\n{}",
        router.log()
    );

    let msgs = read_all(&topics);
    assert_eq!(msgs.len(), expected.len());
    let by_id: HashMap<String, &Msg> = msgs.iter().map(|m| (m.id(), m)).collect();
    assert_eq!(by_id.len(), expected.len(), "duplicate event ids");
    for e in &expected {
        let m = by_id
            .get(&e.id)
            .unwrap_or_else(|| panic!("event {} missing", e.id));
        assert_eq!(m.topic, setup.topic(&e.agg_type), "topic of {}", e.id);
        assert_eq!(m.key, e.agg_id.as_bytes(), "key of {}", e.id);
        assert_eq!(
            m.payload.as_deref(),
            Some(e.payload.as_bytes()),
            "payload of {}",
            e.id
        );
        assert!(m.headers.contains_key("type"), "type header of {}", e.id);
    }
    // Same key → same partition, in commit order.
    let tx_msgs: Vec<&Msg> = msgs.iter().filter(|m| m.key == b"agg-tx").collect();
    for t in &TYPES {
        let order: Vec<String> = tx_msgs
            .iter()
            .filter(|m| m.topic == setup.topic(t))
            .map(|m| m.id())
            .collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted, "commit order within key agg-tx on {t}");
    }
}

/// Rolled-back work produces nothing; UPDATE and DELETE produce nothing and are counted.
#[tokio::test(flavor = "multi_thread")]
async fn rollback_update_delete_produce_nothing() {
    let _settings = SERVER_SETTINGS.read().await;
    let (db, server_id) = unique("rollback");
    let mut conn = app_conn().await;
    outbox_db(&mut conn, &db).await;
    // One event from before the start position: its UPDATE and DELETE come later.
    insert_txn(
        &mut conn,
        &db,
        &[
            Ev::new("old-1", "Order", "a", "{}"),
            Ev::new("old-2", "Order", "a", "{}"),
        ],
    )
    .await;
    let setup = RouterSetup::new(&db, server_id, binlog_position(&mut conn).await);

    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    tx.exec_drop(
        format!("INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('rb-1','Order','a','X','{{}}')"),
        (),
    )
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    conn.query_drop(format!(
        "UPDATE {db}.outbox SET payload='{{\"changed\":1}}' WHERE event_id='old-1'"
    ))
    .await
    .unwrap();
    conn.query_drop(format!(
        "DELETE FROM {db}.outbox WHERE event_id IN ('old-1','old-2')"
    ))
    .await
    .unwrap();
    insert_txn(&mut conn, &db, &[Ev::new("sentinel", "Order", "a", "{}")]).await;

    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    assert_eq!(
        wait_for_count(&topics, 1, Duration::from_secs(60)),
        1,
        "{}",
        router.log()
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(router.stop(Duration::from_secs(30)).success());
    let msgs = read_all(&topics);
    assert_eq!(
        msgs.iter().map(Msg::id).collect::<Vec<_>>(),
        vec!["sentinel"]
    );
    let log = router.log();
    assert!(
        log.contains("ignored UPDATE rows"),
        "no UPDATE warning:\n{log}"
    );
    assert!(
        log.contains("ignored DELETE rows"),
        "no DELETE warning:\n{log}"
    );
    assert!(
        log.contains("ignored_updates: 1"),
        "UPDATE not counted:\n{log}"
    );
    assert!(
        log.contains("ignored_deletes: 2"),
        "DELETEs not counted:\n{log}"
    );
}

/// Writes `batches` transactions of `size` events over `keys` aggregate ids; the payload
/// carries a global sequence number so per-key commit order can be checked.
pub(crate) async fn write_stream(
    db: String,
    first_batch: usize,
    batches: usize,
    size: usize,
    keys: usize,
) {
    let mut conn = app_conn().await;
    for b in first_batch..first_batch + batches {
        let events: Vec<Ev> = (0..size)
            .map(|i| {
                let seq = b * size + i;
                Ev::new(
                    format!("s-{seq}"),
                    TYPES[seq % 3],
                    &format!("k-{}", seq % keys),
                    format!("{{\"seq\":{seq}}}"),
                )
            })
            .collect();
        insert_txn(&mut conn, &db, &events).await;
    }
}

fn seq_of(m: &Msg) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(m.payload.as_deref().unwrap()).unwrap();
    v["seq"].as_u64().unwrap()
}

/// Lost, duplicate and order checks over everything in the topics of the local broker;
/// returns duplicates.
pub(crate) fn check_stream(topics: &[String], expected: usize) -> usize {
    Kafka::local().check_stream(topics, expected)
}

impl Kafka {
    /// Lost, duplicate and order checks over everything in the topics; returns
    /// duplicates.
    pub(crate) fn check_stream(&self, topics: &[String], expected: usize) -> usize {
        let msgs = self.read_all(topics);
        let mut first: HashMap<String, &Msg> = HashMap::new();
        let mut duplicates = 0;
        for m in &msgs {
            match first.get(&m.id()) {
                None => {
                    first.insert(m.id(), m);
                }
                Some(orig) => {
                    duplicates += 1;
                    assert_eq!(
                        (&orig.key, &orig.payload, &orig.topic),
                        (&m.key, &m.payload, &m.topic),
                        "duplicate {} differs",
                        m.id()
                    );
                }
            }
        }
        let lost: Vec<usize> = (0..expected)
            .filter(|s| !first.contains_key(&format!("s-{s}")))
            .collect();
        assert!(
            lost.is_empty(),
            "{} events lost, first: {:?}",
            lost.len(),
            &lost[..lost.len().min(10)]
        );
        assert_eq!(first.len(), expected, "unexpected extra event ids");
        // Per key, first occurrences in partition order must follow commit (seq) order.
        let mut seen: HashSet<String> = HashSet::new();
        let mut last_seq: HashMap<Vec<u8>, u64> = HashMap::new();
        let mut by_partition: Vec<&Msg> = msgs.iter().collect();
        by_partition.sort_by(|a, b| {
            (&a.topic, a.partition, a.offset).cmp(&(&b.topic, b.partition, b.offset))
        });
        for m in by_partition {
            if !seen.insert(m.id()) {
                continue;
            }
            let seq = seq_of(m);
            let key = [m.topic.as_bytes(), b"/", &m.key].concat();
            if let Some(prev) = last_seq.insert(key, seq) {
                assert!(
                    prev < seq,
                    "key {:?} on {}: seq {seq} arrived after {prev}",
                    String::from_utf8_lossy(&m.key),
                    m.topic
                );
            }
        }
        println!(
            "events={expected} messages={} lost=0 duplicates={duplicates}",
            msgs.len()
        );
        duplicates
    }
}

/// SIGTERM mid-stream, more inserts, restart: every event exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn graceful_stop_and_restart_delivers_exactly_once() {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, setup) = fresh("graceful").await;
    let db = setup.db.clone();
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();

    let writer = tokio::spawn(write_stream(db.clone(), 0, 60, 50, 20));
    let mut router = setup.start_router();
    wait_for_count(&topics, 300, Duration::from_secs(60));
    let status = router.stop(Duration::from_secs(30));
    assert!(
        status.success(),
        "graceful stop failed ({status}):\n{}",
        router.log()
    );
    writer.await.unwrap();
    write_stream(db.clone(), 60, 20, 50, 20).await;

    let mut router = setup.start_router();
    let total = 80 * 50;
    drain_and_stop(&mut router, &topics, total);
    assert_eq!(
        check_stream(&topics, total),
        0,
        "graceful stop must not duplicate"
    );
}

/// kill -9 during a heavy stream, restart: every event at least once, duplicates carry
/// the same event id and content, per-key first occurrences follow commit order.
#[tokio::test(flavor = "multi_thread")]
async fn kill9_mid_stream_loses_nothing() {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, setup) = fresh("kill9").await;
    let db = setup.db.clone();
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();

    let (batches, size) = (200, 100);
    let writer = tokio::spawn(write_stream(db.clone(), 0, batches, size, 50));
    for round in 0..3 {
        let mut router = setup.start_router();
        wait_for_count(&topics, 2000 * (round + 1), Duration::from_secs(60));
        router.kill9();
    }
    writer.await.unwrap();
    let mut router = setup.start_router();
    let total = batches * size;
    drain_and_stop(&mut router, &topics, total);
    check_stream(&topics, total);
}

/// Transactions on other tables advance the durable checkpoint, even with no outbox rows.
#[tokio::test(flavor = "multi_thread")]
async fn unrelated_traffic_advances_checkpoint() {
    let _settings = SERVER_SETTINGS.read().await;
    let (db, server_id) = unique("unrelated");
    let mut conn = app_conn().await;
    outbox_db(&mut conn, &db).await;
    conn.query_drop(format!(
        "CREATE TABLE {db}.other (id INT AUTO_INCREMENT PRIMARY KEY, v TEXT)"
    ))
    .await
    .unwrap();
    let start = binlog_position(&mut conn).await;
    let setup = RouterSetup::new(&db, server_id, start.clone());
    let mut router = setup.start_router();
    for i in 0..100 {
        conn.query_drop(format!("INSERT INTO {db}.other (v) VALUES ('row {i}')"))
            .await
            .unwrap();
    }
    let after = binlog_position(&mut conn).await;
    // Several flush intervals, then no chance for a final flush.
    std::thread::sleep(Duration::from_secs(3));
    router.kill9();
    let cp = setup.checkpoint().expect("a checkpoint exists");
    // Other tests write and rotate the binlog too (FLUSH BINARY LOGS), so the checkpoint
    // may be beyond our last write, even in a later file, never before it. File names
    // of one server have the same length: they compare as text.
    assert!(
        cp > start,
        "checkpoint {cp:?} did not move past the start {start:?}"
    );
    assert!(
        cp >= after,
        "checkpoint {cp:?} is before the last unrelated commit {after:?}"
    );
}

/// An unroutable row stops the router with a message naming event id and position;
/// events before it are delivered, the checkpoint stays before it.
#[tokio::test(flavor = "multi_thread")]
async fn unroutable_row_stops_with_position_and_event_id() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, setup) = fresh("unroutable").await;
    let db = setup.db.clone();
    let good: Vec<Ev> = (0..5)
        .map(|i| Ev::new(format!("g-{i}"), "Order", "a", "{}"))
        .collect();
    insert_txn(&mut conn, &db, &good).await;
    let before_bad = binlog_position(&mut conn).await;
    conn.query_drop(format!(
        "INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('bad-1', NULL, 'a', 'X', '{{}}')"
    ))
    .await
    .unwrap();
    let after_bad = binlog_position(&mut conn).await;
    insert_txn(&mut conn, &db, &[Ev::new("after-1", "Order", "a", "{}")]).await;

    let mut router = setup.start_router();
    let log = router.expect_failure("an unroutable row");
    assert!(
        log.contains("bad-1"),
        "error does not name the event id:\n{log}"
    );
    assert!(
        log.contains(&format!("{}.outbox", db)),
        "error does not name the table:\n{log}"
    );
    assert!(
        log.contains(&before_bad.0),
        "error does not name the binlog file:\n{log}"
    );
    // Other tests commit in between, so the checkpoint may pass their transactions, but
    // never the bad one.
    let cp = setup.checkpoint().unwrap();
    assert!(
        cp.0 == before_bad.0 && cp.1 >= before_bad.1,
        "checkpoint {cp:?} is before the good events' end {before_bad:?}"
    );
    assert!(
        cp.0 == after_bad.0 && cp.1 < after_bad.1,
        "checkpoint {cp:?} is past the bad transaction ending at {after_bad:?}"
    );
    let msgs = read_all(&[setup.topic("Order")]);
    let ids: Vec<String> = msgs.iter().map(Msg::id).collect();
    assert_eq!(ids, vec!["g-0", "g-1", "g-2", "g-3", "g-4"]);
}

/// Restores a global variable (value as an SQL literal) when dropped, even if the test fails.
pub(crate) struct RestoreGlobal(pub(crate) &'static str, pub(crate) String);

impl Drop for RestoreGlobal {
    fn drop(&mut self) {
        let (name, value) = (self.0, self.1.clone());
        std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                let mut conn = app_conn().await;
                conn.query_drop(format!("SET GLOBAL {name} = {value}"))
                    .await
                    .unwrap();
            })
        })
        .join()
        .unwrap();
    }
}

/// `validate` names wrong binlog settings with how to fix them.
#[tokio::test(flavor = "multi_thread")]
async fn validate_reports_wrong_binlog_settings() {
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, setup) = fresh("validate").await;
    let _db = setup.db.clone();
    let ok = setup.cli(&["validate"]);
    assert!(
        ok.status.success(),
        "validate on a good server:\n{}",
        String::from_utf8_lossy(&ok.stdout)
    );

    let _restore_meta = RestoreGlobal("binlog_row_metadata", "'FULL'".into());
    let _restore_format = RestoreGlobal("binlog_format", "'ROW'".into());
    conn.query_drop("SET GLOBAL binlog_row_metadata = 'MINIMAL'")
        .await
        .unwrap();
    conn.query_drop("SET GLOBAL binlog_format = 'STATEMENT'")
        .await
        .unwrap();
    let out = setup.cli(&["validate"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("binlog_row_metadata is MINIMAL"), "{text}");
    assert!(text.contains("binlog_format is STATEMENT"), "{text}");
    assert!(text.contains("fix: set binlog_row_metadata=FULL"), "{text}");
    assert!(text.contains("fix: set binlog_format=ROW"), "{text}");
    assert!(!text.contains("cdc-secret"), "password leaked:\n{text}");
}

/// The router refuses to start when its binlog was purged (exit 3, names the position and
/// the recovery command); `recover` re-publishes from the table; 0 events lost.
#[tokio::test(flavor = "multi_thread")]
async fn purged_binlog_is_refused_and_recovered_from_the_table() {
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, setup) = fresh("purged").await;
    let db = setup.db.clone();
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();

    // One event per transaction so each row has its own created_at (recovery order).
    write_stream(db.clone(), 0, 100, 1, 10).await;
    let mut router = setup.start_router();
    assert_eq!(
        wait_for_count(&topics, 100, Duration::from_secs(60)),
        100,
        "{}",
        router.log()
    );
    assert!(router.stop(Duration::from_secs(30)).success());
    let checkpoint = setup.checkpoint().unwrap();

    // Router down; events written; their binlog purged.
    write_stream(db.clone(), 100, 200, 1, 10).await;
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    let (current, _) = binlog_position(&mut conn).await;
    purge_to(&mut conn, &current).await;

    let mut router = setup.start_router();
    let status = router.wait(Duration::from_secs(60));
    let log = router.log();
    let status = status.unwrap_or_else(|| panic!("router must refuse a purged position:\n{log}"));
    assert_eq!(
        status.code(),
        Some(3),
        "exit code for a purged binlog:\n{log}"
    );
    assert!(
        log.contains(&format!("{}:{}", checkpoint.0, checkpoint.1)),
        "needed position not named:\n{log}"
    );
    assert!(
        log.contains(&format!("oldest binlog it has: {current}")),
        "oldest file not named:\n{log}"
    );
    assert!(
        log.contains("recover"),
        "recovery command not named:\n{log}"
    );
    assert_eq!(
        setup.checkpoint().unwrap(),
        checkpoint,
        "a refused start must not move the checkpoint"
    );

    // A dry run counts and changes nothing; a window with no rows is refused.
    // Durations in human units, as everywhere (`--margin 10m` is the default 600 s).
    let out = setup.cli(&[
        "recover",
        "--timestamp-column",
        "created_at",
        "--margin",
        "10m",
        "--dry-run",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("dry run: 300 event(s)"),
        "{text}{out:?}"
    );
    assert_eq!(
        setup.checkpoint().unwrap(),
        checkpoint,
        "the dry run moved the checkpoint"
    );
    let future = (std::time::SystemTime::now() + Duration::from_secs(86_400))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let out = setup.cli(&["recover", "--since", &future]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--allow-empty"),
        "{out:?}"
    );
    assert_eq!(
        setup.checkpoint().unwrap(),
        checkpoint,
        "an empty recover moved the checkpoint"
    );

    let out = setup.cli(&["recover", "--timestamp-column", "created_at"]);
    assert!(
        out.status.success(),
        "recover failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("re-published"));

    let mut router = setup.start_router();
    write_stream(db.clone(), 300, 50, 1, 10).await;
    assert!(
        wait_for_count(&topics, 350, Duration::from_secs(60)) >= 350,
        "{}",
        router.log()
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(router.stop(Duration::from_secs(30)).success());
    check_stream(&topics, 350);
}

pub(crate) fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} not found in:\n{text}"))
}

/// `/metrics`, `/ready`, `/health` and `status` (running, then stopped) report what
/// happened: events per topic, connection, retention, runway, verdict.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_health_and_status_report_the_stream() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, setup) = fresh("metrics").await;
    let db = setup.db.clone();
    let port = setup.monitor_port;
    let mut router = setup.start_router();
    wait_http_ok(port, "/ready", Duration::from_secs(30)).await;
    let events: Vec<Ev> = (0..12)
        .map(|i| Ev::new(format!("e-{i}"), TYPES[i % 2], "a", "{}"))
        .collect();
    insert_txn(&mut conn, &db, &events).await;
    conn.query_drop(format!(
        "UPDATE {db}.outbox SET payload='[]' WHERE event_id='e-0'"
    ))
    .await
    .unwrap();
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    assert_eq!(wait_for_count(&topics, 12, Duration::from_secs(30)), 12);
    tokio::time::sleep(Duration::from_secs(2)).await;

    let (code, text) = http_get(port, "/metrics").await;
    assert_eq!(code, 200);
    assert_eq!(
        metric(&text, "outbox_router_events_acked_total"),
        12.0,
        "{text}"
    );
    let order_topic = format!(
        "outbox_router_events_routed_total{{topic=\"{}\"}}",
        setup.topic("Order")
    );
    assert!(
        text.contains(&format!("{order_topic} 6")),
        "per-topic count missing:\n{text}"
    );
    assert!(
        text.contains("outbox_router_events_ignored_total{reason=\"update\"} 1"),
        "{text}"
    );
    assert_eq!(metric(&text, "outbox_router_connected"), 1.0);
    assert_eq!(
        metric(&text, "outbox_router_binlog_retention_seconds"),
        7200.0
    );
    assert!(metric(&text, "outbox_router_retention_runway_seconds") > 0.0);
    assert!(metric(&text, "outbox_router_checkpoint_offset") > 0.0);
    let (code, health) = http_get(port, "/health").await;
    assert_eq!(code, 200);
    assert!(health.contains("\"alive\":true"), "{health}");
    // The container health check asks the same endpoints through the binary itself.
    for args in [&["health"][..], &["health", "--ready"]] {
        let out = setup.cli(args);
        assert!(out.status.success(), "{args:?}: {out:?}");
    }

    let out = setup.cli(&["status", "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["router"], "running", "{st}");
    assert_eq!(st["retention_secs"], 7200);
    assert_eq!(out.status.code(), Some(0), "{st}");

    assert!(router.stop(Duration::from_secs(30)).success());
    let down = setup.cli(&["health"]);
    assert_eq!(
        down.status.code(),
        Some(1),
        "a stopped router is not healthy: {down:?}"
    );
    let out = setup.cli(&["status", "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["router"], "stopped", "{st}");
    assert_eq!(
        out.status.code(),
        Some(1),
        "a stopped router is a warning: {st}"
    );
    let text = String::from_utf8(setup.cli(&["status"]).stdout).unwrap();
    assert!(text.starts_with("WARNING: router stopped"), "{text}");
    assert!(!text.contains("cdc-secret"), "password leaked:\n{text}");
}

/// With a short retention and a checkpoint whose transaction committed long ago, the
/// runway and the warning / critical verdicts are as predicted, and the budget adds up.
#[tokio::test(flavor = "multi_thread")]
async fn retention_runway_is_predicted_from_checkpoint_time() {
    let _settings = SERVER_SETTINGS.write().await;
    let (db, server_id) = unique("runway");
    let mut conn = app_conn().await;
    outbox_db(&mut conn, &db).await;
    let _restore = RestoreGlobal("binlog_expire_logs_seconds", "7200".into());
    conn.query_drop("SET GLOBAL binlog_expire_logs_seconds = 3600")
        .await
        .unwrap();
    let setup = RouterSetup::new(&db, server_id, binlog_position(&mut conn).await);

    // The transaction's binlog timestamp is 2000 s in the past.
    let now: i64 = conn
        .query_first("SELECT UNIX_TIMESTAMP()")
        .await
        .unwrap()
        .unwrap();
    conn.query_drop(format!("SET TIMESTAMP = {}", now - 2000))
        .await
        .unwrap();
    insert_txn(&mut conn, &db, &[Ev::new("old", "Order", "a", "{}")]).await;
    conn.query_drop("SET TIMESTAMP = DEFAULT").await.unwrap();
    let mut router = setup.start_router();
    assert_eq!(
        wait_for_count(&[setup.topic("Order")], 1, Duration::from_secs(30)),
        1
    );
    let status = router.stop(Duration::from_secs(30));
    assert!(status.success(), "{status}:\n{}", router.log());
    // The checkpoint's file is no longer the one being written: its clock is running.
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();

    let out = setup.cli(&["status", "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runway = st["runway_secs"]
        .as_i64()
        .unwrap_or_else(|| panic!("no runway: {st}"));
    assert!(
        (1550..=1600).contains(&runway),
        "runway {runway}, expected about 3600 - 2000: {st}"
    );
    assert_eq!(st["verdict"], "warning", "1600/3600 = 44 % < 50 %: {st}");
    assert!(
        st["reasons"].to_string().contains("retention runway"),
        "{st}"
    );
    assert_eq!(out.status.code(), Some(1));

    let out = setup.cli(&["status", "--detect-hours", "0.5", "--repair-hours", "1"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(
            "budget:          retention 1 h vs detection 0.5 h + repair 1 h = 1.5 h → 0.5 h short"
        ),
        "{text}"
    );

    conn.query_drop("SET GLOBAL binlog_expire_logs_seconds = 2400")
        .await
        .unwrap();
    let out = setup.cli(&["status", "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["verdict"], "critical", "400/2400 = 17 % < 20 %: {st}");
    assert_eq!(out.status.code(), Some(2));

    // Running again, the router follows the rotation: runway is back to the full retention.
    let mut router = setup.start_router();
    wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, text) = http_get(setup.monitor_port, "/metrics").await;
    assert_eq!(
        metric(&text, "outbox_router_retention_runway_seconds"),
        2400.0,
        "{text}"
    );
    let status = router.stop(Duration::from_secs(30));
    assert!(status.success(), "{status}:\n{}", router.log());
}
