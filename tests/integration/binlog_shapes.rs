//! Every way an outbox INSERT can reach the binlog is delivered or stops the router:
//! XA transactions (committed, rolled back, one-phase, a restart between PREPARE and
//! COMMIT), a DDL whose comment is not ASCII, a statement-logged INSERT. And no
//! configuration or operation skips silently: a typo in `outbox.tables`, a dry run, a
//! first start while XA branches are prepared.

use std::collections::HashMap;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::util::*;

pub(crate) fn insert_sql(db: &str, id: &str) -> String {
    format!(
        "INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('{id}', 'Order', 'o-1', 'OrderHappened', '{{\"id\":\"{id}\"}}')"
    )
}

pub(crate) async fn sql(conn: &mut Conn, statements: &[String]) {
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
    // Exclusive: while a branch is prepared, every other test's first start refuses.
    let _settings = SERVER_SETTINGS.write().await;
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

/// Table-cache churn gives a table a new table id each time it is opened again
/// (`FLUSH TABLES t` here; many tenant tables do the same): the reader's map of table
/// ids grew by one entry per id for the life of the process. It is dropped between
/// transactions past its bound (4,096), and every outbox row across the drops arrives.
#[tokio::test(flavor = "multi_thread")]
async fn table_id_churn_keeps_the_table_map_bounded() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, setup) = fresh("table_ids").await;
    let db = setup.db.clone();
    let topics = vec![setup.topic("Order")];
    const ROWS: usize = 4_500;
    sql(
        &mut conn,
        &[format!(
            "CREATE PROCEDURE {db}.churn(n INT) BEGIN DECLARE i INT DEFAULT 0; \
             WHILE i < n DO \
               INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
                 VALUES (CONCAT('churn-', i), 'Order', 'o-1', 'OrderHappened', '{{}}'); \
               FLUSH TABLES {db}.outbox; SET i = i + 1; \
             END WHILE; END"
        )],
    )
    .await;
    let mut router = setup.start_router();
    sql(&mut conn, &[format!("CALL {db}.churn({ROWS})")]).await;
    let log = drain_and_stop(&mut router, &topics, ROWS);
    let ids: std::collections::HashSet<String> = read_all(&topics).iter().map(Msg::id).collect();
    assert_eq!(ids.len(), ROWS, "distinct event ids");
    assert!(
        log.contains("table-id map past its bound: dropped"),
        "4,500 table ids never dropped the map:\n{log}"
    );
}

/// An outbox INSERT logged as a statement (a session with binlog_format=STATEMENT) has
/// no rows in the binlog to publish: the router stops naming table and position (with
/// a `*` pattern too, which every word of the statement would match as a table).
#[tokio::test(flavor = "multi_thread")]
async fn statement_logged_outbox_insert_stops_the_router() {
    // Exclusive: every router reading past a statement-logged change stops there.
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, mut setup) = fresh("stmt").await;
    let db = setup.db.clone();
    setup.extra_tables.push(format!("{db}.*"));
    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    sql(&mut conn, &[insert_sql(&db, "row-logged")]).await;
    wait_for_count(&topics, 1, Duration::from_secs(30));
    sql(
        &mut conn,
        &[
            "SET SESSION binlog_format = 'STATEMENT'".into(),
            format!("USE {db}"),
            insert_sql(&db, "statement-logged"),
        ],
    )
    .await;
    let log = router.expect_failure("a statement-logged outbox INSERT");
    assert!(
        log.contains("a data change logged as a statement at mysql-bin.")
            && log.contains(&format!("it writes outbox table {db}.outbox")),
        "{log}"
    );
    assert!(!log.contains(&format!("{db}.INSERT")), "{log}");
    assert!(log.contains("mysql-bin."), "the position is named:\n{log}");
    // It stays stopped: a restart reads the same event and stops again.
    let mut again = setup.start_router();
    again.expect_failure("the same statement after a restart");
}

/// An exact table name that is not on the server (a typo, another case) refuses to
/// start, naming the tables that are there; a pattern matching nothing only warns.
#[tokio::test(flavor = "multi_thread")]
async fn outbox_table_typo_refuses_to_start() {
    let _settings = SERVER_SETTINGS.read().await;
    for wrong in ["outbx", "Outbox"] {
        let (_conn, mut setup) = fresh("typo").await;
        let db = setup.db.clone();
        setup.extra_tables.push(format!("{db}.{wrong}"));
        let log = setup
            .start_router()
            .expect_failure("a missing outbox table");
        assert!(
            log.contains(&format!("outbox table(s) not on the server: {db}.{wrong}"))
                && log.contains(&format!("{db}.outbox")),
            "{log}"
        );
        assert_eq!(setup.checkpoint(), None, "the checkpoint was written");
    }
    let (mut conn, mut setup) = fresh("pattern").await;
    let db = setup.db.clone();
    setup.extra_tables.push(format!("{db}_later_*.outbox"));
    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    sql(&mut conn, &[insert_sql(&db, "with-pattern")]).await;
    let log = drain_and_stop(&mut router, &topics, 1);
    assert!(log.contains("matches no table yet"), "{log}");
}

/// `run --sink stdout` prints from the real checkpoint but never moves it: the next real
/// run publishes what the dry run printed.
#[tokio::test(flavor = "multi_thread")]
async fn dry_run_never_writes_the_real_checkpoint() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, setup) = fresh("dry").await;
    let db = setup.db.clone();
    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    sql(&mut conn, &[insert_sql(&db, "before-dry-run")]).await;
    drain_and_stop(&mut router, &topics, 1);
    let checkpoint = setup.checkpoint();
    assert!(checkpoint.is_some());

    sql(&mut conn, &[insert_sql(&db, "printed-by-dry-run")]).await;
    let out = std::process::Command::new(router_bin())
        .args(["--config"])
        .arg(setup.config_path())
        .args(["run", "--sink", "stdout"])
        .env("IT_CDC_PASSWORD", "cdc-secret")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    std::process::Command::new("kill")
        .args(["-TERM", &out.id().to_string()])
        .status()
        .unwrap();
    let out = out.wait_with_output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("printed-by-dry-run"),
        "dry run printed:\n{printed}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        setup.checkpoint(),
        checkpoint,
        "the dry run moved the checkpoint"
    );
    let mut router = setup.start_router();
    drain_and_stop(&mut router, &topics, 2);
    assert!(ids_in(&topics).contains_key("printed-by-dry-run"));
}

/// A first start while an XA branch is prepared would never see its rows (logged at
/// PREPARE, before the start): refused until it is resolved.
#[tokio::test(flavor = "multi_thread")]
async fn first_start_refused_while_xa_branches_are_prepared() {
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, setup) = fresh("xa_first").await;
    let db = setup.db.clone();
    let xid = format!("'{db}-pending'");
    sql(
        &mut conn,
        &[
            format!("XA START {xid}"),
            insert_sql(&db, "prepared-before-start"),
            format!("XA END {xid}"),
            format!("XA PREPARE {xid}"),
        ],
    )
    .await;
    let log = setup
        .start_router()
        .expect_failure("a prepared XA branch at first start");
    sql(&mut conn, &[format!("XA COMMIT {xid}")]).await;
    assert!(log.contains("XA transaction(s) are prepared"), "{log}");
    assert_eq!(setup.checkpoint(), None);
}

/// A store that is not where the config says (an unmounted volume, a changed path) is
/// an error, not a fresh start at `source.start` that skips everything since.
#[tokio::test(flavor = "multi_thread")]
async fn missing_checkpoint_store_is_not_a_fresh_start() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, setup) = fresh("lost_store").await;
    let db = setup.db.clone();
    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    sql(&mut conn, &[insert_sql(&db, "before")]).await;
    drain_and_stop(&mut router, &topics, 1);
    let store = setup.dir.path().join("checkpoint");
    let unmounted = setup.dir.path().join("elsewhere");
    std::fs::rename(&store, &unmounted).unwrap();
    std::fs::create_dir(&store).unwrap(); // an empty mount point
    sql(&mut conn, &[insert_sql(&db, "while-lost")]).await;
    let out = setup.cli(&["run"]);
    let err = String::from_utf8_lossy(&out.stderr);
    // 4: an operator must act; a service manager does not restart it.
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("no checkpoint store in"), "{err}");
    assert!(!store.join("conf").exists(), "a store was created");
    // Mounted again: it resumes from its checkpoint and loses nothing.
    std::fs::remove_dir(&store).unwrap();
    std::fs::rename(&unmounted, &store).unwrap();
    let mut router = setup.start_router();
    drain_and_stop(&mut router, &topics, 2);
    assert!(ids_in(&topics).contains_key("while-lost"));
}

/// Error 1236 for a GTID the server never had is not a purge: exit 1 with the fix, not
/// exit 3 with `recover` (which would re-publish from the wrong server's tables).
#[tokio::test(flavor = "multi_thread")]
async fn unknown_gtid_is_not_called_a_purge() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, setup) = fresh("gtid_unknown").await;
    let (file, offset) = binlog_position(&mut conn).await;
    let gtid: String = conn
        .query_first("SELECT @@global.gtid_binlog_pos")
        .await
        .unwrap()
        .unwrap();
    let domain = gtid.split('-').next().unwrap_or("0").to_string();
    let set = setup.cli(&[
        "checkpoint",
        "set",
        &format!("{file}:{offset} gtid={domain}-1-999999999"),
    ]);
    assert!(set.status.success(), "{set:?}");
    let out = setup.cli(&["run"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("never had the transactions"), "{err}");
    assert!(!err.contains("outbox-router -c CONFIG recover"), "{err}");
}

/// A prepared XA branch survives a MariaDB restart and is committed afterwards, in a new
/// binlog file: the router (which reconnects meanwhile, from before the PREPARE) still
/// publishes its rows; what it had delivered after the PREPARE may come again, same id.
#[tokio::test(flavor = "multi_thread")]
async fn xa_committed_after_a_server_restart_is_published() {
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, setup) = fresh("xa_restart").await;
    let db = setup.db.clone();
    let topics = vec![setup.topic("Order")];
    let xid = format!("'{db}-survivor'");
    let mut router = setup.start_router();
    // Past its first start (which refuses while branches are prepared).
    wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(30)).await;
    sql(
        &mut conn,
        &[
            format!("XA START {xid}"),
            insert_sql(&db, "prepared-before-restart"),
            format!("XA END {xid}"),
            format!("XA PREPARE {xid}"),
        ],
    )
    .await;
    drop(conn);
    let mut other = app_conn().await;
    sql(&mut other, &[insert_sql(&db, "before-restart")]).await;
    wait_for_count(&topics, 1, Duration::from_secs(30));
    drop(other);
    services("down", "mariadb");
    services("up", "mariadb");
    let mut after = app_conn().await;
    sql(
        &mut after,
        &[format!("XA COMMIT {xid}"), insert_sql(&db, "after-restart")],
    )
    .await;
    let log = drain_and_stop(&mut router, &topics, 3);
    let ids = ids_in(&topics);
    for id in ["prepared-before-restart", "before-restart", "after-restart"] {
        assert!(
            ids.get(id).is_some_and(|n| *n >= 1),
            "{id} missing: {ids:?}\n{log}"
        );
    }
    println!("xa across a server restart: {ids:?}");
}
