//! GTID failover: the router stops mid-stream on the primary and resumes on a replica
//! (GTID replication with log_slave_updates) from the same checkpoint, losing nothing.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::util::*;

fn replica_port() -> u16 {
    mariadb_port() + 1
}

/// Waits until the replica has applied everything the primary has written.
async fn wait_replica_caught_up(primary: &mut Conn) {
    let target: String = primary
        .query_first("SELECT @@global.gtid_binlog_pos")
        .await
        .unwrap()
        .unwrap();
    let mut replica = app_conn_at(replica_port()).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let waited: Option<i64> = replica
            .query_first(format!("SELECT MASTER_GTID_WAIT('{target}', 1)"))
            .await
            .unwrap();
        if waited == Some(0) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "replica did not reach {target}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn resumes_by_gtid_on_a_replica_after_failover() {
    // Alone: the replica applies every test's traffic, and must catch up quickly here.
    let _settings = SERVER_SETTINGS.write().await;
    services("up", "replica");
    let (mut conn, setup) = fresh("failover").await;
    let db = setup.db.clone();
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();

    write_stream(db.clone(), 0, 30, 50, 20).await;
    let mut router = setup.start_router();
    wait_for_count(&topics, 500, Duration::from_secs(60));
    let status = router.stop(Duration::from_secs(30));
    assert!(status.success(), "{}", router.log());
    let log = router.log();
    assert!(
        log.contains("by_gtid=false"),
        "a fresh start is by position:\n{log}"
    );

    // More events on the primary while the router is away; the replica gets them all.
    write_stream(db.clone(), 30, 30, 50, 20).await;
    wait_replica_caught_up(&mut conn).await;

    // Fail over: the same checkpoint, the replica's address.
    let mut on_replica = RouterSetup {
        source_port: replica_port(),
        ..setup
    };
    on_replica.start = "latest".into(); // ignored: the checkpoint decides
    let mut router = on_replica.start_router();
    let total = 60 * 50;
    let log = drain_and_stop(&mut router, &topics, total);
    assert!(
        log.contains("by_gtid=true"),
        "the replica must be joined by GTID:\n{log}"
    );
    let cp = on_replica.checkpoint().unwrap();
    let duplicates = check_stream(&topics, total);
    println!(
        "gtid failover: events={total} lost=0 duplicates={duplicates} checkpoint_on_replica={cp:?}"
    );
}

/// A GTID connect names the file where the server found the checkpoint's GTID state with
/// a rotate to its start (`FILE:4`), then skips the transactions that state covers. The
/// reader took that rotate for a position: after a quiet failover it checkpointed the
/// replica's `FILE:4` beside the GTID state, so a later resume by position (the `auto`
/// fallback, the archive path) re-published everything that file held before the state
/// — duplicates for `read_committed` consumers in exactly-once mode. Now the position
/// moves with the first transaction the server sends, never to a rotate's file start: a
/// resume by position after the quiet failover either repeats nothing or is refused as a
/// position of the other server.
#[tokio::test(flavor = "multi_thread")]
async fn a_quiet_gtid_failover_leaves_no_file_start_to_resume_from() {
    let _settings = SERVER_SETTINGS.write().await;
    services("up", "replica");
    let (mut conn, mut setup) = fresh("failover_quiet").await;
    let db = setup.db.clone();
    setup.delivery(Some(&exactly_once_delivery("failover_quiet", false)));
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    // The replica's current file holds these too: they precede the GTID state there.
    services_sql_replica_flush().await;
    write_stream(db.clone(), 0, 10, 50, 20).await;
    let mut router = setup.start_router();
    drain_and_stop(&mut router, &topics, 500);
    wait_replica_caught_up(&mut conn).await;

    // Quiet failover by GTID: connects, nothing new, stops.
    let mut on_replica = RouterSetup {
        source_port: replica_port(),
        ..setup
    };
    on_replica.source_toml = "resume_by = \"gtid\"\n".into();
    let mut router = on_replica.start_router();
    wait_http_ok(on_replica.monitor_port, "/ready", Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        router.stop(Duration::from_secs(30)).success(),
        "{}",
        router.log()
    );
    let quiet_log = router.log();
    let after = on_replica.checkpoint();
    println!("quiet GTID failover left the checkpoint at {after:?}");

    // More on the primary (and so the replica), then a resume by file position there.
    write_stream(db.clone(), 10, 2, 50, 20).await;
    wait_replica_caught_up(&mut conn).await;
    on_replica.source_toml = "resume_by = \"position\"\n".into();
    let mut router = on_replica.start_router();
    match router.wait(Duration::from_secs(15)) {
        Some(status) => {
            let log = router.log();
            assert!(
                !status.success() && log.contains("is a position in the binlog of server_id"),
                "{status}:\n{log}"
            );
        }
        None => {
            drain_and_stop(&mut router, &topics, 600);
            let duplicates = check_stream(&topics, 600);
            assert_eq!(
                duplicates, 0,
                "read_committed duplicates after the quiet failover left {after:?}:\n{quiet_log}"
            );
        }
    }
}

/// Starts a new binlog file on the replica, so the file a GTID connect finds there
/// begins before the events the test writes next.
async fn services_sql_replica_flush() {
    let mut replica = app_conn_at(replica_port()).await;
    replica.query_drop("FLUSH BINARY LOGS").await.unwrap();
}
