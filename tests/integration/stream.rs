//! The basic stream: events routed with key, id header and exact payload bytes;
//! rollbacks, updates and deletes produce nothing; a stop, a kill -9 and unrelated
//! traffic lose nothing and advance the checkpoint.

use std::collections::HashMap;
use std::time::Duration;

use mysql_async::prelude::Queryable;

use crate::util::*;

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

/// CPU time of `pid`'s threads named `name` (from the scheduler's account), and how
/// many there are.
fn threads_cpu(pid: u32, name: &str) -> (Duration, usize) {
    let (mut ns, mut found) = (0, 0);
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == name {
            let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
            ns += stat
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            found += 1;
        }
    }
    (Duration::from_nanos(ns), found)
}

/// A caught-up router's producer waits for delivery reports without spinning (rdkafka's
/// own polling thread burned about 1 % of a core idle), and the reports of events after
/// the quiet still arrive: every event delivered, none twice.
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_router_waits_for_delivery_reports_without_spinning() {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, setup) = fresh("idle_reports").await;
    let db = setup.db.clone();
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    write_stream(db.clone(), 0, 10, 50, 20).await;
    let mut router = setup.start_router();
    wait_for_count(&topics, 500, Duration::from_secs(60));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (before, threads) = threads_cpu(router.pid(), "kafka reports");
    assert_eq!(
        threads,
        1,
        "the sink's producer has one report thread:\n{}",
        router.log()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let spent = threads_cpu(router.pid(), "kafka reports").0 - before;
    assert!(
        spent < Duration::from_millis(6),
        "an idle router's report thread spent {spent:?} of CPU in 3 s"
    );
    write_stream(db.clone(), 10, 10, 50, 20).await;
    drain_and_stop(&mut router, &topics, 1000);
    assert_eq!(check_stream(&topics, 1000), 0, "no event twice");
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
