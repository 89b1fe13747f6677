//! The silent paths of issue #21, each on the real server: outbox rows that reach the
//! table through a statement the binlog holds as text (a trigger under STATEMENT or a
//! global MIXED set at run time, LOAD DATA), server settings changed under a running
//! router (column names, row image), and an XA branch whose PREPARE an operator's move
//! put behind the checkpoint. Before the fixes each one was skipped with the checkpoint
//! moving past it; now each stops the router naming the position and the fix.
//!
//! Every test is exclusive (`SERVER_SETTINGS.write()`): a statement-logged change stops
//! every router that reads it, and global settings and prepared branches are shared.

use std::process::Command;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::binlog_shapes::{insert_sql, sql};
use crate::util::*;

/// A business table whose AFTER INSERT trigger writes the outbox: the binlog of a
/// statement-logged INSERT names only the business table.
async fn trigger_table(conn: &mut Conn, db: &str) {
    sql(
        conn,
        &[
            format!("CREATE TABLE {db}.orders_t (id INT PRIMARY KEY)"),
            format!(
                "CREATE TRIGGER {db}.orders_ai AFTER INSERT ON {db}.orders_t FOR EACH ROW \
                 INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) \
                 VALUES (CONCAT('trg-', NEW.id), 'Order', 'o-1', 'OrderPlaced', '{{}}')"
            ),
        ],
    )
    .await;
}

/// Prepares XA branch `gtrid` holding one outbox row, `id`, on `conn`.
async fn prepare_branch(conn: &mut Conn, db: &str, gtrid: &str, id: &str) {
    sql(
        conn,
        &[
            format!("XA START '{gtrid}'"),
            insert_sql(db, id),
            format!("XA END '{gtrid}'"),
            format!("XA PREPARE '{gtrid}'"),
        ],
    )
    .await;
}

/// The router's checkpoint is before `position` (FILE, OFFSET): nothing was skipped.
fn assert_checkpoint_before(setup: &RouterSetup, position: &(String, u64), log: &str) {
    let cp = setup.checkpoint().expect("a checkpoint");
    assert!(
        cp.0 < position.0 || (cp.0 == position.0 && cp.1 <= position.1),
        "checkpoint {cp:?} moved past the unpublished write at {position:?}\n{log}"
    );
}

/// A trigger fired by a statement-logged INSERT on a business table writes the outbox;
/// the statement names no outbox table, yet the router must stop (it did not: the row
/// was skipped and the checkpoint moved on). Then the same through a global
/// `binlog_format=MIXED` set while the router runs: `/metrics` and the log report the
/// setting within a monitor interval, and the next trigger write stops the router.
#[tokio::test(flavor = "multi_thread")]
async fn trigger_writes_logged_as_statements_stop_the_router() {
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, mut setup) = fresh("trg_stmt").await;
    let db = setup.db.clone();
    trigger_table(&mut conn, &db).await;
    setup.start_here(&mut conn).await;
    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    sql(
        &mut conn,
        &[format!("INSERT INTO {db}.orders_t VALUES (1)")],
    )
    .await;
    wait_for_count(&topics, 1, Duration::from_secs(30));

    let before = binlog_position(&mut conn).await;
    sql(
        &mut conn,
        &[
            "SET SESSION binlog_format = 'STATEMENT'".into(),
            format!("INSERT INTO {db}.orders_t VALUES (2)"),
        ],
    )
    .await;
    let log = router.expect_failure("a trigger's outbox row under statement logging");
    assert!(
        log.contains("a data change logged as a statement at mysql-bin.")
            && log.contains(&format!("INSERT INTO {db}.orders_t VALUES (2)"))
            && log.contains("binlog_format=ROW"),
        "{log}"
    );
    assert_checkpoint_before(&setup, &before, &log);
    assert_eq!(count(&topics), 1, "trg-2 cannot have been published");

    // Past it by hand (the operator's move after publishing trg-2 another way), then a
    // global MIXED while the router runs.
    drop(conn);
    let mut conn = app_conn().await;
    sql(
        &mut conn,
        &[format!("INSERT INTO {db}.orders_t VALUES (3)")],
    )
    .await;
    let (file, offset) = binlog_position(&mut conn).await;
    let out = setup.cli(&["checkpoint", "set", &format!("{file}:{offset}")]);
    assert!(out.status.success(), "{out:?}");
    let mut router = setup.start_router();
    wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(30)).await;
    let _restore = RestoreGlobal("binlog_format", "'ROW'".into());
    sql(&mut conn, &["SET GLOBAL binlog_format = 'MIXED'".into()]).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (_, text) = http_get(setup.monitor_port, "/metrics").await;
        if metric(&text, "outbox_router_server_settings_problems") >= 1.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the global MIXED format was not reported:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        router
            .log()
            .contains("binlog_format is MIXED, the router needs ROW"),
        "no log line names the setting:\n{}",
        router.log()
    );
    // A new session logs the trigger's INSERT as a statement.
    let mut writer = app_conn().await;
    sql(
        &mut writer,
        &[format!("INSERT INTO {db}.orders_t VALUES (4)")],
    )
    .await;
    let log = router.expect_failure("a trigger write under a global MIXED format");
    assert!(
        log.contains(&format!("INSERT INTO {db}.orders_t VALUES (4)")),
        "{log}"
    );
    println!("trigger under STATEMENT and MIXED: stopped at both, checkpoint before each");
}

/// `LOAD DATA LOCAL INFILE … INTO TABLE outbox` in a statement-logged session arrives as
/// BEGIN_LOAD_QUERY / EXECUTE_LOAD_QUERY events, which the reader ignored.
#[tokio::test(flavor = "multi_thread")]
async fn load_data_logged_as_a_statement_stops_the_router() {
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, setup) = fresh("load_stmt").await;
    let db = setup.db.clone();
    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    sql(&mut conn, &[insert_sql(&db, "row-logged")]).await;
    wait_for_count(&topics, 1, Duration::from_secs(30));
    let before = binlog_position(&mut conn).await;

    let file = setup.dir.path().join("events.tsv");
    std::fs::write(&file, "ld-1\tOrder\to-1\tT\t{}\nld-2\tOrder\to-2\tT\t{}\n").unwrap();
    let local = std::env::var("OUTBOX_LOCAL_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| repo_root().join(".local"));
    let status = Command::new("mariadb")
        .arg(format!(
            "--defaults-file={}",
            local.join("mariadb/my.cnf").display()
        ))
        .args(["-uroot", "--local-infile=1", "-e"])
        .arg(format!(
            "SET SESSION binlog_format = 'STATEMENT'; LOAD DATA LOCAL INFILE '{}' INTO TABLE {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload)",
            file.display()
        ))
        .status()
        .unwrap();
    assert!(status.success(), "LOAD DATA failed");
    let rows: u64 = conn
        .query_first(format!("SELECT COUNT(*) FROM {db}.outbox"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rows, 3, "the load wrote its rows");

    let log = router.expect_failure("LOAD DATA under statement logging");
    assert!(
        log.contains("a data change logged as a statement at mysql-bin.")
            && log.contains("LOAD DATA LOCAL INFILE")
            && log.contains(&format!("it writes outbox table {db}.outbox")),
        "{log}"
    );
    assert_checkpoint_before(&setup, &before, &log);
}

/// `binlog_row_metadata=MINIMAL` set at run time: the rows carry no column names. Under
/// `on_invalid = "dead-letter"` every good row went to the dead-letter topic as invalid
/// and the router went on; a server setting is not a row's data: it stops, nothing is
/// dead-lettered.
#[tokio::test(flavor = "multi_thread")]
async fn row_metadata_changed_at_runtime_stops_whatever_the_policy() {
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, mut setup) = fresh("meta_min").await;
    let db = setup.db.clone();
    let dlq = format!("it.{db}.dlq");
    setup.outbox_toml = format!("on_invalid = \"dead-letter\"\ndead_letter_topic = \"{dlq}\"\n");
    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    sql(&mut conn, &[insert_sql(&db, "good-1")]).await;
    wait_for_count(&topics, 1, Duration::from_secs(30));

    let _restore = RestoreGlobal("binlog_row_metadata", "'FULL'".into());
    sql(
        &mut conn,
        &["SET GLOBAL binlog_row_metadata = 'MINIMAL'".into()],
    )
    .await;
    let before = binlog_position(&mut conn).await;
    let mut writer = app_conn().await;
    sql(&mut writer, &[insert_sql(&db, "good-2")]).await;
    let log = router.expect_failure("a row without column names");
    assert!(
        log.contains("the server's settings changed under the router")
            && log.contains("carries no column names")
            && log.contains("binlog_row_metadata=FULL"),
        "{log}"
    );
    assert_checkpoint_before(&setup, &before, &log);
    assert_eq!(count(&[dlq]), 0, "a good row was dead-lettered");
}

/// `binlog_row_image=MINIMAL` in a writer's session leaves columns that took a constant
/// default out of the INSERT image (here `region`, mapped to a header); a mapped
/// optional column then vanished silently. Under `on_invalid = "skip"` the router stops
/// all the same.
#[tokio::test(flavor = "multi_thread")]
async fn minimal_row_image_stops_whatever_the_policy() {
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, mut setup) = fresh("image_min").await;
    let db = setup.db.clone();
    sql(
        &mut conn,
        &[format!(
            "ALTER TABLE {db}.outbox ADD COLUMN region VARCHAR(8) NOT NULL DEFAULT 'eu'"
        )],
    )
    .await;
    setup.start_here(&mut conn).await;
    setup.outbox_toml = "on_invalid = \"skip\"\n".into();
    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    sql(&mut conn, &[insert_sql(&db, "full-1")]).await;
    wait_for_count(&topics, 1, Duration::from_secs(30));
    let before = binlog_position(&mut conn).await;
    sql(
        &mut conn,
        &[
            "SET SESSION binlog_row_image = 'MINIMAL'".into(),
            insert_sql(&db, "minimal-1"),
        ],
    )
    .await;
    let log = router.expect_failure("an INSERT image without every column");
    assert!(
        log.contains("lacks column(s) region") && log.contains("binlog_row_image=FULL"),
        "{log}"
    );
    assert_checkpoint_before(&setup, &before, &log);
    assert_eq!(count(&topics), 1);
}

/// An XA branch prepared, the checkpoint moved to the server's current position, then
/// `XA COMMIT`: the router logged "already delivered" and never published the row.
/// Moves refuse while branches are prepared (naming them); forced past, the router
/// stops at the commit naming the branch.
#[tokio::test(flavor = "multi_thread")]
async fn moves_past_a_prepared_xa_branch_are_refused_or_stop_at_its_commit() {
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, setup) = fresh("xa_move").await;
    let db = setup.db.clone();
    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    sql(&mut conn, &[insert_sql(&db, "plain-1")]).await;
    let log = drain_and_stop(&mut router, &topics, 1);

    let gtrid = format!("{db}-a");
    // A branch left prepared by a failing run would refuse every later first start.
    let _rollback = RollbackIfPrepared(gtrid.clone());
    // Declared after the guard: dropped (disconnected) first, so the guard can end it.
    let mut conn = app_conn().await;
    let hex: String = gtrid.bytes().map(|b| format!("{b:02x}")).collect();
    let xid = format!("X'{hex}',X'',1");
    prepare_branch(&mut conn, &db, &gtrid, "xa-1").await;
    let (file, offset) = binlog_position(&mut conn).await;
    let here = format!("{file}:{offset}");

    let refused = setup.cli(&["checkpoint", "set", &here]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "checkpoint set went past {xid}");
    assert!(
        err.contains(&xid) && err.contains("--ignore-prepared-xa"),
        "{err}"
    );
    let refused = setup.cli(&["recover", "--since", "0"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && err.contains(&xid), "{err}");

    let forced = setup.cli(&["checkpoint", "set", &here, "--ignore-prepared-xa"]);
    assert!(forced.status.success(), "{forced:?}");
    sql(&mut conn, &[format!("XA COMMIT '{gtrid}'")]).await;
    let mut router = setup.start_router();
    let stopped = router.expect_failure("an XA COMMIT whose PREPARE was never read");
    assert!(
        stopped.contains(&format!("XA COMMIT of branch {xid}"))
            && stopped.contains("never read")
            && !stopped.contains("already delivered"),
        "{stopped}"
    );
    assert_eq!(count(&topics), 1, "{log}");
}

/// One time zone for every read, on a server whose `time_zone` is not UTC: a
/// `TIMESTAMP(3)` column as the record timestamp (every row was invalid: "timestamp
/// column holds Bytes(…)"), and `recover`'s window over a DATETIME written in UTC (the
/// table read used the session's zone, the stream UTC: the window was off by 5 hours).
#[tokio::test(flavor = "multi_thread")]
async fn timestamp_columns_and_time_windows_mean_the_same_in_every_zone() {
    let _settings = SERVER_SETTINGS.write().await;
    let _restore = RestoreGlobal("time_zone", "'SYSTEM'".into());
    let mut root = app_conn().await;
    sql(&mut root, &["SET GLOBAL time_zone = '+05:00'".into()]).await;
    let (_, mut setup) = fresh("tz").await;
    let mut conn = app_conn().await;
    let db = setup.db.clone();
    sql(
        &mut conn,
        &[
            format!("ALTER TABLE {db}.outbox ADD COLUMN created_ts TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)"),
            format!("ALTER TABLE {db}.outbox MODIFY created_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6))"),
        ],
    )
    .await;
    setup.start_here(&mut conn).await;
    setup.columns_toml = "timestamp = \"created_ts\"\n".into();
    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    sql(&mut conn, &[insert_sql(&db, "ts-1")]).await;
    let log = drain_and_stop(&mut router, &topics, 1);
    let epoch_ms: i64 = conn
        .query_first(format!(
            "SELECT CAST(UNIX_TIMESTAMP(created_ts) * 1000 AS SIGNED) FROM {db}.outbox WHERE event_id = 'ts-1'"
        ))
        .await
        .unwrap()
        .unwrap();
    let msgs = read_all(&topics);
    assert_eq!(msgs.len(), 1, "{log}");
    assert_eq!(msgs[0].timestamp_ms, Some(epoch_ms), "{log}");

    // recover's window, by the DATETIME column written in UTC.
    let written: i64 = conn
        .query_first(format!(
            "SELECT CAST(FLOOR(UNIX_TIMESTAMP(CONVERT_TZ(created_at, '+00:00', @@session.time_zone))) AS SIGNED) FROM {db}.outbox WHERE event_id = 'ts-1'"
        ))
        .await
        .unwrap()
        .unwrap();
    let dry = |since: i64| {
        let out = setup.cli(&[
            "recover",
            "--dry-run",
            "--since",
            &since.to_string(),
            "--timestamp-column",
            "created_at",
        ]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let inside = dry(written - 60);
    assert!(inside.contains("dry run: 1 event(s)"), "{inside}");
    let after = dry(written + 60);
    assert!(after.contains("dry run: 0 event(s)"), "{after}");
}

/// Rolls an XA branch back when dropped, if it is still prepared.
struct RollbackIfPrepared(String);

impl Drop for RollbackIfPrepared {
    fn drop(&mut self) {
        let gtrid = self.0.clone();
        std::thread::spawn(move || {
            tokio::runtime::Runtime::new().unwrap().block_on(async {
                let mut conn = app_conn().await;
                // Another session may end the branch only once the one that prepared it
                // has disconnected, which a failing test's connection does as it drops.
                for _ in 0..40 {
                    let prepared: Vec<mysql_async::Row> = conn.query("XA RECOVER").await.unwrap();
                    let ours = prepared.iter().any(|r| {
                        r.get::<Vec<u8>, _>(3)
                            .is_some_and(|d| d == gtrid.as_bytes())
                    });
                    if !ours {
                        return;
                    }
                    let _ = conn.query_drop(format!("XA ROLLBACK '{gtrid}'")).await;
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            })
        })
        .join()
        .unwrap();
    }
}

/// SIGTERM while Kafka is unreachable: the admin call creating the topic waited its own
/// 60 s whatever `pipeline.shutdown_timeout_secs` said (20 here); every stop is bounded
/// by that setting now.
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_while_kafka_is_unreachable_is_bounded_by_the_shutdown_timeout() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("stop_bound").await;
    let db = setup.db.clone();
    // Nothing listens there: every Kafka call waits for its own timeout. The console's
    // control topic off: with it, a router that cannot read it does not stream at all
    // (its stop is then trivially bounded), and the sink's waits are what is tested.
    setup.kafka_bootstrap = "127.0.0.1:9".into();
    setup.monitor_toml = "control_topic = \"off\"".into();
    let mut router = setup.start_router();
    let before = binlog_position(&mut conn).await;
    sql(&mut conn, &[insert_sql(&db, "never-sent")]).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !router.log().contains("position=") && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    // The reader has routed the row; the sink is waiting for Kafka.
    std::thread::sleep(Duration::from_secs(3));
    let asked = std::time::Instant::now();
    let status = router.stop(Duration::from_secs(90));
    let took = asked.elapsed();
    println!("stop with Kafka unreachable: {took:?}, {status}");
    assert!(
        took < Duration::from_secs(20 + 6),
        "the stop took {took:?} with shutdown_timeout_secs = 20:\n{}",
        router.log()
    );
    // Unrelated transactions of other tests may pass; the undelivered row may not.
    assert_checkpoint_before(&setup, &before, &router.log());
}

/// At-least-once with `checkpoint.name` (the chart's single shape): `run --init` is safe
/// as a pod's every start. The first start is recorded on the checkpoint topic; an
/// emptied volume is then refused, by `run --init` and `checkpoint init` alike, naming
/// the way back; `recover --since` brings every event back and the run resumes.
#[tokio::test(flavor = "multi_thread")]
async fn an_at_least_once_lost_volume_is_refused_when_named() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("alo_named").await;
    let db = setup.db.clone();
    let topics = vec![setup.topic("Order")];
    let pid = std::process::id();
    setup.extra_toml = format!(
        "[delivery]\ncheckpoint_topic = \"it.checkpoints.alo_named.{pid}\"\n[checkpoint]\nname = \"it-alo-{pid}\"\n"
    );
    let store = setup.dir.path().join("checkpoint");

    let mut router = setup.start_router_with(&[], &["--init"]);
    sql(&mut conn, &[insert_sql(&db, "alo-1")]).await;
    let log = drain_and_stop(&mut router, &topics, 1);
    assert!(log.contains("recorded this router's first start"), "{log}");
    // A restart with the volume: nothing recorded again, nothing refused.
    let mut router = setup.start_router_with(&[], &["--init"]);
    sql(&mut conn, &[insert_sql(&db, "alo-2")]).await;
    let log = drain_and_stop(&mut router, &topics, 2);
    assert!(!log.contains("first start"), "{log}");
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 5;

    // The volume lost while events keep coming.
    std::fs::remove_dir_all(&store).unwrap();
    sql(&mut conn, &[insert_sql(&db, "alo-3")]).await;
    let mut router = setup.start_router_with(&[], &["--init"]);
    let log = router.expect_failure("an emptied volume after a recorded first start");
    assert!(
        log.contains("checkpoint.name")
            && log.contains("recover --since")
            && log.contains("first start recorded at unix ms"),
        "{log}"
    );
    let init = setup.cli(&["checkpoint", "init"]);
    assert_eq!(init.status.code(), Some(4), "checkpoint init: {init:?}");
    let run = setup.cli(&["run", "--init"]);
    assert_eq!(run.status.code(), Some(4), "run --init: {run:?}");
    assert!(!store.exists(), "a refusal created the store");
    assert_eq!(count(&topics), 2, "nothing published past the refusals");

    // The way back the error names; then the pod's own start resumes.
    let out = setup.cli(&["recover", "--since", &since.to_string()]);
    assert!(out.status.success(), "{out:?}");
    let mut router = setup.start_router_with(&[], &["--init"]);
    sql(&mut conn, &[insert_sql(&db, "alo-4")]).await;
    let log = drain_and_stop(&mut router, &topics, 4);
    let mut ids: Vec<String> = read_all(&topics).iter().map(Msg::id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids, ["alo-1", "alo-2", "alo-3", "alo-4"], "{log}");
}

/// Exactly-once mode with no commit marker and an empty store (a recreated checkpoint
/// topic, a renamed transactional id, a deleted marker, or `run --init` on an empty
/// volume) began at `source.start` without a word: events committed before it were
/// never published. Then it refused every `run --init`, the chart's first install
/// included. Now `run` refuses until a first start is recorded; `run --init` records it
/// where no position exists anywhere and refuses where one may have existed (a store
/// without a marker, a deleted marker), leaving the checkpoint where it was; a lost
/// store with a marker resumes at the marker. A checkpoint topic of the wrong shape is
/// refused.
#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_first_start_is_explicit_and_its_topic_checked() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("eos_first").await;
    let db = setup.db.clone();
    let topics = vec![setup.topic("Order")];

    let pid = std::process::id();
    let fresh_topic = format!("it.checkpoints.eos_first_run.{pid}");
    let swap = |setup: &mut RouterSetup, topic: &str| {
        setup.extra_toml = format!(
            "[delivery]\nmode = \"exactly-once\"\ntransactional_id = \"it-eos_first-{pid}\"\ncheckpoint_topic = \"{topic}\"\n"
        );
    };
    // An empty store made in at-least-once mode (exactly-once's `checkpoint init` would
    // record a first start), then `run` alone against a topic nobody used.
    setup.extra_toml.clear();
    assert!(setup.cli(&["checkpoint", "init"]).status.success());
    swap(&mut setup, &fresh_topic);
    let refused = setup.cli(&["run"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && err.contains("found no commit marker")
            && err.contains("run --init"),
        "{err}"
    );

    // The chart's first install: `run --init` on an empty volume and an empty topic.
    let _ = std::fs::remove_dir_all(setup.dir.path().join("checkpoint"));
    let mut router = setup.start_router_with(&[], &["--init"]);
    sql(&mut conn, &[insert_sql(&db, "eos-1")]).await;
    let log = drain_and_stop(&mut router, &topics, 1);
    assert!(
        log.contains("recorded this router's first start on the checkpoint topic"),
        "{log}"
    );
    let delivered = setup
        .checkpoint()
        .expect("a checkpoint after the first run");

    // The store lost (an empty volume): the marker on Kafka is where it resumes.
    std::fs::remove_dir_all(setup.dir.path().join("checkpoint")).unwrap();
    sql(&mut conn, &[insert_sql(&db, "eos-2")]).await;
    let mut router = setup.start_router_with(&[], &["--init"]);
    let log = drain_and_stop(&mut router, &topics, 2);
    let ids: Vec<String> = read_all(&topics).iter().map(Msg::id).collect();
    assert_eq!(ids, ["eos-1", "eos-2"], "{log}");

    // The marker lost, the store kept (a recreated topic): refused, store untouched.
    // (`checkpoint show` gives the fleet's marker while one exists; with none on the
    // recreated topic it gives the store, which may be ahead of the marker.)
    sql(&mut conn, &[insert_sql(&db, "eos-3")]).await;
    swap(&mut setup, &format!("{fresh_topic}.recreated"));
    let delivered = setup.checkpoint().unwrap_or(delivered);
    for args in [&["--init"][..], &[]] {
        let mut router = setup.start_router_with(&[], args);
        let log = router.expect_failure("a store without a commit marker");
        assert!(
            log.contains("but the checkpoint store") && log.contains("checkpoint set"),
            "run {args:?}: {log}"
        );
        assert_eq!(setup.checkpoint(), Some(delivered.clone()), "run {args:?}");
    }

    // The marker deleted (a tombstone under its key), the store lost: refused.
    swap(&mut setup, &fresh_topic);
    let producer: rdkafka::producer::BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .unwrap();
    let key = format!("it-eos_first-{pid}");
    producer
        .send(
            rdkafka::producer::BaseRecord::<str, [u8]>::to(&fresh_topic)
                .partition(0)
                .key(&key),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    rdkafka::producer::Producer::flush(&producer, Duration::from_secs(10)).unwrap();
    std::fs::remove_dir_all(setup.dir.path().join("checkpoint")).unwrap();
    let mut router = setup.start_router_with(&[], &["--init"]);
    let log = router.expect_failure("a deleted commit marker");
    assert!(
        log.contains("tombstone") && log.contains("not a first start"),
        "{log}"
    );
    let init = setup.cli(&["checkpoint", "init"]);
    assert!(
        !init.status.success(),
        "checkpoint init over a deleted marker: {init:?}"
    );
    let ids: Vec<String> = read_all(&topics).iter().map(Msg::id).collect();
    assert_eq!(
        ids,
        ["eos-1", "eos-2"],
        "nothing published past the refusals"
    );

    // Checkpoint topics the router did not make: three partitions, then delete-only.
    let admin = crate::topics::admin();
    let opts = rdkafka::admin::AdminOptions::new();
    for (name, partitions, policy) in [("parts", 3, "compact"), ("delete", 1, "delete")] {
        let topic = format!("it.checkpoints.{db}.{name}");
        let new = rdkafka::admin::NewTopic::new(
            &topic,
            partitions,
            rdkafka::admin::TopicReplication::Fixed(1),
        )
        .set("cleanup.policy", policy);
        admin.create_topics(&[new], &opts).await.unwrap();
        let mut other =
            RouterSetup::new(&db, setup.server_id + 1, binlog_position(&mut conn).await);
        other.delivery(Some(&format!(
            "mode = \"exactly-once\"\ntransactional_id = \"it-{db}-{name}\"\ncheckpoint_topic = \"{topic}\""
        )));
        let out = other.cli(&["checkpoint", "init"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && err.contains(&format!("the checkpoint topic {topic} exists in a shape")),
            "{name}: {err}"
        );
        // `run` checks the topic beside `init_transactions`: refused all the same, and
        // nothing published.
        let log = other.start_router().expect_failure(name);
        assert!(
            log.contains(&format!("the checkpoint topic {topic} exists in a shape")),
            "{name}, run: {log}"
        );
    }
    let ids: Vec<String> = read_all(&topics).iter().map(Msg::id).collect();
    assert_eq!(
        ids,
        ["eos-1", "eos-2"],
        "nothing published by the refused runs"
    );
}

/// A prepared XA branch holds the checkpoint (and exactly-once mode's commit marker)
/// before its PREPARE, so a restart reads its rows again; the transactions delivered
/// meanwhile were re-delivered with it, even to `read_committed` consumers and even
/// after a graceful stop. The checkpoint now also says how far delivery got: a resume
/// re-reads the branch and publishes nothing else up to there.
#[tokio::test(flavor = "multi_thread")]
async fn a_pending_xa_branch_costs_no_duplicates_across_restarts() {
    let _settings = SERVER_SETTINGS.write().await;
    let (_, mut setup) = fresh("xa_eos").await;
    let db = setup.db.clone();
    setup.delivery(Some(&exactly_once_delivery("xa_eos", false)));
    let topics = vec![setup.topic("Order")];
    let gtrid = format!("{db}-p");
    let _rollback = RollbackIfPrepared(gtrid.clone());
    // Declared after the guard: dropped (disconnected) first, so the guard can end it.
    let mut conn = app_conn().await;
    let mut router = setup.start_router();
    // Prepared after the first start (which refuses while branches are prepared).
    wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(30)).await;
    // An earlier branch, prepared before the pending one and committed after it: a
    // resume before the pending one's PREPARE reads this one's commit without its
    // PREPARE, and must know it was published.
    let early = format!("{db}-e");
    let _rollback_early = RollbackIfPrepared(early.clone());
    let mut early_conn = app_conn().await;
    prepare_branch(&mut early_conn, &db, &early, "xa-0").await;
    prepare_branch(&mut conn, &db, &gtrid, "xa-1").await;
    sql(&mut early_conn, &[format!("XA COMMIT '{early}'")]).await;
    let mut other = app_conn().await;
    for i in 1..=5 {
        sql(&mut other, &[insert_sql(&db, &format!("plain-{i}"))]).await;
    }
    drain_and_stop(&mut router, &topics, 6);
    // Restarted twice while the branch is prepared, once after its commit.
    let mut router = setup.start_router();
    sql(&mut other, &[insert_sql(&db, "plain-6")]).await;
    drain_and_stop(&mut router, &topics, 7);
    let mut router = setup.start_router();
    sql(&mut conn, &[format!("XA COMMIT '{gtrid}'")]).await;
    sql(&mut other, &[insert_sql(&db, "plain-7")]).await;
    drain_and_stop(&mut router, &topics, 9);
    let mut router = setup.start_router();
    std::thread::sleep(Duration::from_secs(2));
    let log = drain_and_stop(&mut router, &topics, 9);

    let mut ids: Vec<String> = read_all(&topics).iter().map(Msg::id).collect();
    ids.sort();
    let mut want: Vec<String> = (1..=7).map(|i| format!("plain-{i}")).collect();
    want.extend(["xa-0".into(), "xa-1".into()]);
    want.sort();
    assert_eq!(ids, want, "each event exactly once\n{log}");
}

/// A Kafka transaction open longer than the producer's `transaction.timeout.ms` is
/// aborted by the coordinator, which librdkafka reports as a fence: the router stopped
/// as "fenced by another producer", and the same binlog transaction outlived the timeout
/// again after every restart. Now the error says what happened and the restart gets
/// twice the time. The first commit here waits 16 s (a failpoint) on a 3 s timeout.
#[cfg(feature = "failpoints")]
#[tokio::test(flavor = "multi_thread")]
async fn a_kafka_transaction_outliving_its_timeout_is_named_and_retried_longer() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("txn_timeout").await;
    let db = setup.db.clone();
    setup.delivery(Some(&exactly_once_delivery("txn_timeout", false)));
    setup.kafka_properties = vec![
        ("transaction.timeout.ms".into(), "3000".into()),
        ("message.timeout.ms".into(), "3000".into()),
    ];
    let topics = vec![setup.topic("Order")];
    // Past the timeout and the coordinator's sweep for expired transactions (10 s).
    let mut router = setup.start_router_env(&[("FAILPOINTS", "txn.before_commit=1*sleep(16000)")]);
    sql(&mut conn, &[insert_sql(&db, "slow-1")]).await;
    wait_for_count(&topics, 1, Duration::from_secs(120));
    let log = drain_and_stop(&mut router, &topics, 1);
    assert!(
        log.contains("longer than its transaction.timeout.ms = 3000")
            && log.contains("Retrying with transaction.timeout.ms = 6000"),
        "{log}"
    );
    let ids: Vec<String> = read_all(&topics).iter().map(Msg::id).collect();
    assert_eq!(ids, ["slow-1"], "{log}");
}

/// A failover to a server without usable GTIDs: the checkpoint's `FILE:OFFSET` names a
/// place in the old server's binlog, and the new one has files of the same names. The
/// router resumed there by position (reading whatever the new server has at that
/// offset), and `prune` compared file numbers and deleted rows nobody delivered. The
/// checkpoint now records the server's `server_id`: a file position of another server
/// is refused by `run` (resume_by = "position") and by `prune`; a GTID resume goes on
/// and the next checkpoint names the new server.
#[tokio::test(flavor = "multi_thread")]
async fn file_positions_of_another_server_are_refused() {
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, mut setup) = fresh("other_server").await;
    let db = setup.db.clone();
    let topics = vec![setup.topic("Order")];
    let old_id: u32 = conn
        .query_first("SELECT @@global.server_id")
        .await
        .unwrap()
        .unwrap();
    let new_id = 4_000_000_007u32;
    setup.source_toml = "resume_by = \"position\"\n".into();
    let mut router = setup.start_router();
    sql(&mut conn, &[insert_sql(&db, "old-1")]).await;
    drain_and_stop(&mut router, &topics, 1);
    let show = setup.cli(&["checkpoint", "show"]);
    assert!(
        String::from_utf8_lossy(&show.stdout).contains(&format!("server_id: {old_id}")),
        "{}",
        String::from_utf8_lossy(&show.stdout)
    );

    // The "new server": same files, another identity.
    let _restore = RestoreGlobal("server_id", old_id.to_string());
    sql(&mut conn, &[format!("SET GLOBAL server_id = {new_id}")]).await;
    let mut router = setup.start_router();
    let log = router.expect_failure("a file position of another server");
    assert!(
        log.contains(&format!("binlog of server_id {old_id}"))
            && log.contains(&format!("source points at server_id {new_id}")),
        "{log}"
    );
    // By GTID the same checkpoint is valid here; the next one names this server.
    setup.source_toml = "resume_by = \"auto\"\n".into();
    let mut router = setup.start_router();
    sql(&mut conn, &[insert_sql(&db, "new-1")]).await;
    drain_and_stop(&mut router, &topics, 2);
    let show = setup.cli(&["checkpoint", "show"]);
    assert!(
        String::from_utf8_lossy(&show.stdout).contains(&format!("server_id: {new_id}")),
        "{}",
        String::from_utf8_lossy(&show.stdout)
    );

    // The old server's checkpoint, without GTID and far ahead in a file of the same
    // name; then undelivered rows on the new one.
    sql(&mut conn, &[format!("SET GLOBAL server_id = {old_id}")]).await;
    let (file, offset) = binlog_position(&mut conn).await;
    let ahead = format!("{file}:{}", offset + 1_000_000_000);
    let out = setup.cli(&["checkpoint", "set", &ahead]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    sql(&mut conn, &[format!("SET GLOBAL server_id = {new_id}")]).await;
    crate::ops::insert_aged(&mut conn, &db, "undelivered", 20, 30).await;
    crate::ops::pruner_user(&mut setup);
    let out = setup.cli(&["prune", "--older-than", "7d", "--wait", "2s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "prune trusted another server's file position"
    );
    assert!(
        stderr.contains(&format!("binlog of server_id {old_id}")),
        "{stderr}"
    );
    let left: i64 = conn
        .query_first(format!(
            "SELECT COUNT(*) FROM {db}.outbox WHERE event_id LIKE 'undelivered-%'"
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(left, 20, "undelivered rows were pruned");
}

/// A prepared XA branch's rows were held whole until its `XA COMMIT`, whatever their
/// size: a branch of gigabytes took gigabytes. Held branches are bounded together by
/// `source.max_xa_held_bytes` now: past it the router stops, naming the branch and the
/// bound, with the checkpoint before the branch and nothing of it published. Here a
/// branch of 2,000 rows × 4 KB (about 8 MB of row events) against a 256 KiB bound: the
/// error says what was held when it stopped (at most one row event past the bound), and
/// the router's peak RSS is printed.
#[tokio::test(flavor = "multi_thread")]
async fn prepared_xa_branches_are_held_up_to_a_bound() {
    let _settings = SERVER_SETTINGS.read().await;
    let (_, mut setup) = fresh("xa_bound").await;
    let db = setup.db.clone();
    let limit = 256 * 1024;
    setup.source_toml = format!("max_xa_held_bytes = {limit}\n");
    let topics = vec![setup.topic("Order")];
    let gtrid = format!("{db}-big");
    let _rollback = RollbackIfPrepared(gtrid.clone());
    let mut conn = app_conn().await;
    let mut router = setup.start_router();
    wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(30)).await;
    sql(
        &mut conn,
        &[
            format!("XA START '{gtrid}'"),
            format!("INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) SELECT CONCAT('xa-big-', seq), 'Order', 'o-1', 'Created', REPEAT('x', 4000) FROM {db}.seq_1_to_2000"),
            format!("XA END '{gtrid}'"),
            format!("XA PREPARE '{gtrid}'"),
        ],
    )
    .await;
    let prepared_at = binlog_position(&mut app_conn().await).await;
    // The process's high-water RSS, read until it exits.
    let mut peak_kb = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while let Some(kb) = router.peak_rss_kb() {
        peak_kb = kb;
        if std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = router.expect_failure("an XA branch past source.max_xa_held_bytes");
    let held: u64 = log
        .split("would hold ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the error names what was held:\n{log}"));
    assert!(
        log.contains(&format!("source.max_xa_held_bytes = {limit}")) && held > limit,
        "{log}"
    );
    assert!(
        held <= limit + 16 * 1024,
        "read {held} bytes of the branch before stopping"
    );
    assert_checkpoint_before(&setup, &prepared_at, &log);
    assert_eq!(count(&topics), 0, "nothing of the branch published");
    println!("XA branch of ~8 MB against a {limit}-byte bound: stopped holding {held} bytes, peak RSS {peak_kb} kB");
}
