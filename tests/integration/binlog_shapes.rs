//! Every way an outbox INSERT can reach the binlog is delivered or stops the router:
//! XA transactions (committed, rolled back, one-phase, a restart between PREPARE and
//! COMMIT), a DDL whose comment is not ASCII, a statement-logged INSERT.

use std::collections::HashMap;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::util::*;

fn insert_sql(db: &str, id: &str) -> String {
    format!(
        "INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('{id}', 'Order', 'o-1', 'OrderHappened', '{{\"id\":\"{id}\"}}')"
    )
}

async fn sql(conn: &mut Conn, statements: &[String]) {
    for s in statements {
        conn.query_drop(s)
            .await
            .unwrap_or_else(|e| panic!("{s}: {e}"));
    }
}

/// Event ids in the topic and how often each arrived.
fn ids_in(topics: &[String]) -> HashMap<String, usize> {
    let mut ids = HashMap::new();
    for m in read_all(topics) {
        *ids.entry(m.id()).or_default() += 1;
    }
    ids
}

/// `XA COMMIT` publishes the branch's rows (also ONE PHASE and after a router restart
/// between PREPARE and COMMIT); `XA ROLLBACK` publishes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn xa_transactions_publish_at_commit_only() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, setup) = fresh("xa").await;
    let db = setup.db.clone();
    let topics = vec![setup.topic("Order")];
    let x = |name: &str| format!("'{db}-{name}'");
    let mut router = setup.start_router();

    let branch = |name: &str, id: &str| {
        vec![
            format!("XA START {}", x(name)),
            insert_sql(&db, id),
            format!("XA END {}", x(name)),
            format!("XA PREPARE {}", x(name)),
        ]
    };
    sql(&mut conn, &branch("a", "xa-committed")).await;
    sql(&mut conn, &[format!("XA COMMIT {}", x("a"))]).await;
    sql(&mut conn, &branch("b", "xa-rolled-back")).await;
    sql(&mut conn, &[format!("XA ROLLBACK {}", x("b"))]).await;
    sql(
        &mut conn,
        &[
            format!("XA START {}", x("c")),
            insert_sql(&db, "xa-one-phase"),
            format!("XA END {}", x("c")),
            format!("XA COMMIT {} ONE PHASE", x("c")),
        ],
    )
    .await;
    // Prepared, then other work is delivered and the router crashes before the commit.
    sql(&mut conn, &branch("d", "xa-across-restart")).await;
    drop(conn);
    let mut other = app_conn().await;
    sql(&mut other, &[insert_sql(&db, "plain-1")]).await;
    wait_for_count(&topics, 3, Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(800)); // a checkpoint write
    router.kill9();
    // Committed from another session while the router is down.
    sql(&mut other, &[format!("XA COMMIT {}", x("d"))]).await;
    sql(&mut other, &[insert_sql(&db, "plain-2")]).await;
    let mut router = setup.start_router();
    let log = drain_and_stop(&mut router, &topics, 5);
    let ids = ids_in(&topics);
    for id in [
        "xa-committed",
        "xa-one-phase",
        "xa-across-restart",
        "plain-1",
        "plain-2",
    ] {
        assert!(ids.contains_key(id), "{id} missing: {ids:?}\n{log}");
    }
    assert!(
        !ids.contains_key("xa-rolled-back"),
        "a rolled-back XA branch was published"
    );
    println!("xa: {ids:?}");
}

/// A DDL whose comment puts a multi-byte character across byte 8 once panicked the
/// reader on every restart.
#[tokio::test(flavor = "multi_thread")]
async fn ddl_with_a_non_ascii_comment_is_a_transaction_like_any_other() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, setup) = fresh("ddl_utf8").await;
    let db = setup.db.clone();
    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    sql(
        &mut conn,
        &[
            format!("/* 数据 */ CREATE TABLE {db}.t (id INT)"),
            format!("/* 数据数据 */ ALTER TABLE {db}.t ADD COLUMN 名字 VARCHAR(8)"),
            insert_sql(&db, "after-ddl"),
        ],
    )
    .await;
    let log = drain_and_stop(&mut router, &topics, 1);
    assert!(!log.contains("panicked"), "{log}");
}

/// An outbox INSERT logged as a statement (a session with binlog_format=STATEMENT) has
/// no rows in the binlog to publish: the router stops naming table and position.
#[tokio::test(flavor = "multi_thread")]
async fn statement_logged_outbox_insert_stops_the_router() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, setup) = fresh("stmt").await;
    let db = setup.db.clone();
    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    sql(&mut conn, &[insert_sql(&db, "row-logged")]).await;
    wait_for_count(&topics, 1, Duration::from_secs(30));
    sql(
        &mut conn,
        &[
            "SET SESSION binlog_format = 'STATEMENT'".into(),
            insert_sql(&db, "statement-logged"),
        ],
    )
    .await;
    let log = router.expect_failure("a statement-logged outbox INSERT");
    assert!(
        log.contains(&format!(
            "outbox table {db}.outbox changed by a statement-logged"
        )),
        "{log}"
    );
    assert!(log.contains("mysql-bin."), "the position is named:\n{log}");
    // It stays stopped: a restart reads the same event and stops again.
    let mut again = setup.start_router();
    again.expect_failure("the same statement after a restart");
}
