//! MariaDB's compressed binlog events (`log_bin_compress=ON`, issue #24): QUERY and rows
//! events whose text or rows are zlib-compressed. Before, the first one stopped the
//! router for good (`unknown binlog event type 166`); now they read as the events they
//! compress, with the same boundaries, statement detection, streaming and restarts.

use std::collections::HashSet;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::binlog_shapes::sql;
use crate::util::*;

/// Inserts `ids` as one transaction, each payload `size` bytes.
async fn insert_sized(conn: &mut Conn, db: &str, ids: &[String], size: usize) {
    let payload = format!("{{\"pad\":\"{}\"}}", "x".repeat(size.saturating_sub(10)));
    let events: Vec<Ev> = ids
        .iter()
        .map(|id| Ev::new(id.clone(), "Order", "agg", payload.clone()))
        .collect();
    for chunk in events.chunks(500) {
        insert_txn(conn, db, chunk).await;
    }
}

/// The event types the server wrote from `from` on (SHOW BINLOG EVENTS).
async fn event_types_since(conn: &mut Conn, from: &(String, u64)) -> HashSet<String> {
    let rows: Vec<mysql_async::Row> = conn
        .query(format!(
            "SHOW BINLOG EVENTS IN '{}' FROM {}",
            from.0, from.1
        ))
        .await
        .unwrap();
    rows.into_iter()
        .map(|r| r.get::<String, _>("Event_type").unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn compressed_events_read_like_any_other() {
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, setup) = fresh("compressed").await;
    let db = setup.db.clone();
    let topics = vec![setup.topic("Order")];
    let _restore = RestoreGlobal("log_bin_compress", "OFF".into());
    sql(&mut conn, &["SET GLOBAL log_bin_compress = ON".into()]).await;
    let from = binlog_position(&mut conn).await;
    let mut writer = app_conn().await;
    let mut expected: Vec<String> = Vec::new();
    let ids = |prefix: &str, n: usize, expected: &mut Vec<String>| {
        let v: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
        expected.extend(v.iter().cloned());
        v
    };

    let mut router = setup.start_router();
    // Below and above log_bin_compress_min_len (256): plain and compressed rows events.
    insert_sized(&mut writer, &db, &ids("small", 20, &mut expected), 40).await;
    insert_sized(&mut writer, &db, &ids("large", 20, &mut expected), 4000).await;
    // A DDL with a long multi-byte comment: a compressed QUERY that is its own group.
    let comment = "数据".repeat(200);
    sql(
        &mut writer,
        &[
            format!("/* {comment} */ CREATE TABLE {db}.other (id INT PRIMARY KEY, note TEXT)"),
            format!("INSERT INTO {db}.other VALUES (1, REPEAT('n', 2000))"),
        ],
    )
    .await;
    // An XA branch whose rows are compressed.
    let xa_id = ids("xa", 1, &mut expected).remove(0);
    sql(
        &mut writer,
        &[
            "XA START 'cz'".into(),
            format!(
                "INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('{xa_id}', 'Order', 'agg', 'OrderHappened', CONCAT('{{\"p\":\"', REPEAT('y', 1000), '\"}}'))"
            ),
            "XA END 'cz'".into(),
            "XA PREPARE 'cz'".into(),
            "XA COMMIT 'cz'".into(),
        ],
    )
    .await;
    // A transaction of 12,000 compressed rows, streamed in parts.
    let big = ids("big", 12_000, &mut expected);
    let mut tx = writer.start_transaction(Default::default()).await.unwrap();
    let payload = format!("{{\"pad\":\"{}\"}}", "z".repeat(300));
    for chunk in big.chunks(500) {
        let events: Vec<Ev> = chunk
            .iter()
            .map(|id| Ev::new(id.clone(), "Order", "agg", payload.clone()))
            .collect();
        insert_in(&mut tx, &db, &events).await;
    }
    tx.commit().await.unwrap();
    wait_for_count(&topics, expected.len() as i64, Duration::from_secs(120));

    // Killed inside a compressed stretch, restarted from its checkpoint.
    insert_sized(
        &mut writer,
        &db,
        &ids("before-kill", 300, &mut expected),
        2000,
    )
    .await;
    router.kill9();
    insert_sized(
        &mut writer,
        &db,
        &ids("after-kill", 300, &mut expected),
        2000,
    )
    .await;
    // Compression switched off and on again mid-stream.
    sql(&mut conn, &["SET GLOBAL log_bin_compress = OFF".into()]).await;
    let mut plain_writer = app_conn().await;
    insert_sized(&mut plain_writer, &db, &ids("off", 20, &mut expected), 2000).await;
    sql(&mut conn, &["SET GLOBAL log_bin_compress = ON".into()]).await;
    let mut writer = app_conn().await;
    insert_sized(&mut writer, &db, &ids("on-again", 20, &mut expected), 2000).await;
    let mut router = setup.start_router();
    let log = drain_and_stop(&mut router, &topics, expected.len());
    assert!(!log.contains("unknown binlog event type"), "{log}");

    let types = event_types_since(&mut conn, &from).await;
    for t in [
        "Write_rows_compressed_v1",
        "Query_compressed",
        "Write_rows_v1",
    ] {
        assert!(types.contains(t), "no {t} event was written: {types:?}");
    }
    let seen: Vec<String> = read_all(&topics).iter().map(Msg::id).collect();
    let distinct: HashSet<&String> = seen.iter().collect();
    let missing: Vec<&String> = expected
        .iter()
        .filter(|id| !distinct.contains(id))
        .collect();
    assert!(
        missing.is_empty(),
        "{} lost, first {:?}",
        missing.len(),
        missing.first()
    );
    assert_eq!(distinct.len(), expected.len());
    // Re-sent after the kill only (at-least-once), each with its own event id.
    println!(
        "compressed: events={} duplicates={}",
        expected.len(),
        seen.len() - distinct.len()
    );

    // A statement-logged outbox INSERT long enough to be compressed still stops it.
    let before = binlog_position(&mut conn).await;
    let mut router = setup.start_router();
    let mut statement = app_conn().await;
    sql(
        &mut statement,
        &[
            "SET SESSION binlog_format = 'STATEMENT'".into(),
            // The text itself past log_bin_compress_min_len, so it is compressed.
            format!(
                "INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('stmt-1', 'Order', 'o-1', 'OrderHappened', '{{\"pad\":\"{}\"}}')",
                "s".repeat(400)
            ),
        ],
    )
    .await;
    let log = router.expect_failure("a compressed statement-logged INSERT");
    assert!(log.contains("a data change logged as a statement"), "{log}");
    let types = event_types_since(&mut conn, &before).await;
    assert!(types.contains("Query_compressed"), "{types:?}");
}
