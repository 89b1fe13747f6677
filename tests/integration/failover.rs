//! GTID failover: the router stops mid-stream on the primary and resumes on a replica
//! (GTID replication with log_slave_updates) from the same checkpoint, losing nothing.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::util::*;
use crate::{check_stream, write_stream, TYPES};

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
