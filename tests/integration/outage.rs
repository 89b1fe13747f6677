//! Outages of the real services: the Kafka broker killed and restarted (shorter and
//! longer than the producer's message timeout), MariaDB restarted, connections cut.

use std::time::Duration;

use crate::util::*;

/// The broker is SIGKILLed twice mid-stream: 5 s down, then longer than
/// message.timeout.ms. The router stalls, never skips, and resumes.
#[tokio::test(flavor = "multi_thread")]
async fn kafka_broker_killed_and_restarted() {
    broker_killed_and_restarted("kafka_down", None).await;
}

/// The same outages in exactly-once mode: open transactions die with the broker and
/// are aborted; a read_committed consumer sees every event once.
#[tokio::test(flavor = "multi_thread")]
async fn kafka_broker_killed_and_restarted_exactly_once() {
    let delivery = exactly_once_delivery("eos-outage", false);
    let duplicates = broker_killed_and_restarted("eos_kafka_down", Some(&delivery)).await;
    assert_eq!(
        duplicates, 0,
        "exactly-once mode re-delivered {duplicates} events"
    );
}

/// Kills the broker twice under a stream; returns the duplicates seen.
async fn broker_killed_and_restarted(name: &str, delivery: Option<&str>) -> usize {
    let _settings = SERVER_SETTINGS.write().await;
    let (_conn, mut setup) = fresh(name).await;
    setup.delivery(delivery);
    let db = setup.db.clone();
    setup
        .kafka_properties
        .push(("message.timeout.ms".into(), "5000".into()));
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();

    write_stream(db.clone(), 0, 40, 50, 20).await;
    let mut router = setup.start_router();
    wait_for_count(&topics, 500, Duration::from_secs(60));
    for (round, down) in [(1, Duration::from_secs(5)), (2, Duration::from_secs(12))] {
        kill_kafka();
        // Events keep committing while the broker is away.
        write_stream(db.clone(), 40 * round, 40, 50, 20).await;
        tokio::time::sleep(down).await;
        services("up", "kafka");
        assert!(
            router.wait(Duration::from_millis(10)).is_none(),
            "router exited during the outage:\n{}",
            router.log()
        );
    }
    let total = 120 * 50;
    let log = drain_and_stop(&mut router, &topics, total);
    assert!(
        log.contains("resuming from the last checkpoint"),
        "the long outage should restart the pipeline:\n{log}"
    );
    let duplicates = check_stream(&topics, total);
    println!("kafka outage ({name}): events={total} lost=0 duplicates={duplicates}");
    duplicates
}

/// MariaDB restarts mid-stream (its binlog rotates); the router reconnects from its
/// checkpoint and follows into the new file.
#[tokio::test(flavor = "multi_thread")]
async fn mariadb_restarted_mid_stream() {
    mariadb_restarted("db_restart", None).await;
}

/// The same restart in exactly-once mode: 0 duplicates for read_committed.
#[tokio::test(flavor = "multi_thread")]
async fn mariadb_restarted_mid_stream_exactly_once() {
    let duplicates = mariadb_restarted(
        "eos_db_restart",
        Some(&exactly_once_delivery("db-restart", false)),
    )
    .await;
    assert_eq!(
        duplicates, 0,
        "exactly-once mode re-delivered {duplicates} events"
    );
}

async fn mariadb_restarted(name: &str, delivery: Option<&str>) -> usize {
    let _settings = SERVER_SETTINGS.write().await;
    let (conn, mut setup) = fresh(name).await;
    setup.delivery(delivery);
    let db = setup.db.clone();
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();

    write_stream(db.clone(), 0, 100, 50, 20).await;
    drop(conn);
    let mut router = setup.start_router();
    wait_for_count(&topics, 500, Duration::from_secs(60));
    services("down", "mariadb");
    tokio::time::sleep(Duration::from_secs(2)).await;
    services("up", "mariadb");
    write_stream(db.clone(), 100, 40, 50, 20).await;
    let total = 140 * 50;
    let log = drain_and_stop(&mut router, &topics, total);
    assert!(
        log.contains("resuming from the last checkpoint"),
        "no reconnect logged:\n{log}"
    );
    let duplicates = check_stream(&topics, total);
    println!("mariadb restart ({name}): events={total} lost=0 duplicates={duplicates}");
    duplicates
}

/// Connections between router and MariaDB are cut three times by a proxy.
#[tokio::test(flavor = "multi_thread")]
async fn connections_cut_by_a_proxy() {
    connections_cut("cut", None).await;
}

/// The same cuts in exactly-once mode: 0 duplicates for read_committed.
#[tokio::test(flavor = "multi_thread")]
async fn connections_cut_by_a_proxy_exactly_once() {
    let duplicates = connections_cut("eos_cut", Some(&exactly_once_delivery("cut", false))).await;
    assert_eq!(
        duplicates, 0,
        "exactly-once mode re-delivered {duplicates} events"
    );
}

async fn connections_cut(name: &str, delivery: Option<&str>) -> usize {
    let _settings = SERVER_SETTINGS.read().await;
    let (db, server_id) = unique(name);
    let mut conn = app_conn().await;
    outbox_db(&mut conn, &db).await;
    let proxy = CutProxy::start(mariadb_port()).await;
    let mut setup = RouterSetup::new(&db, server_id, binlog_position(&mut conn).await);
    setup.source_port = proxy.port;
    setup.delivery(delivery);
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();

    let writer = tokio::spawn(write_stream(db.clone(), 0, 150, 40, 20));
    let mut router = setup.start_router();
    let mut cuts = 0;
    for n in [600, 1800, 3000] {
        wait_for_count(&topics, n, Duration::from_secs(60));
        // Cut only a live stream: right after a cut the router may still be backing off.
        proxy.wait_live(Duration::from_secs(60)).await;
        cuts += proxy.cut();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    writer.await.unwrap();
    let total = 150 * 40;
    let log = drain_and_stop(&mut router, &topics, total);
    assert!(cuts >= 3, "only {cuts} connections were cut");
    assert!(
        log.contains("resuming from the last checkpoint"),
        "no reconnect logged:\n{log}"
    );
    let duplicates = check_stream(&topics, total);
    println!("connection cuts ({name}): cuts={cuts} events={total} lost=0 duplicates={duplicates}");
    duplicates
}

/// A private broker of this test's own (fresh_broker.rs uses 9292, signals.rs 9392).
const STALLED_KAFKA_PORT: u16 = 9592;

/// SIGTERM while Kafka does not answer, in exactly-once mode: a broker frozen (SIGSTOP:
/// its sockets open, nothing answers) with a Kafka transaction open — the stop asked
/// during the freeze, right after a freeze longer than the transaction timeout (the
/// coordinator aborts the open transaction once it runs again), and with the stop's last
/// commit failing as an unanswered commit marker does (failpoint). Each stop ends within
/// `pipeline.shutdown_timeout_secs` with status 0 and says what it left: what it could
/// not commit is aborted and read again. A restart then delivers every event once to a
/// read_committed reader.
#[tokio::test(flavor = "multi_thread")]
async fn stops_while_kafka_does_not_answer_end_cleanly() {
    let _settings = SERVER_SETTINGS.read().await;
    let broker = PrivateBroker::new(STALLED_KAFKA_PORT);
    broker.wipe();
    broker.services("up");
    let kafka = Kafka::at(&broker.bootstrap());
    let (_conn, mut setup) = fresh("stop_stalled").await;
    setup.kafka_bootstrap = broker.bootstrap();
    setup.delivery(Some(&exactly_once_delivery("stop-stalled", true)));
    setup.kafka_properties.extend(
        [
            ("transaction.timeout.ms", "10000"),
            ("message.timeout.ms", "10000"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let db = setup.db.clone();
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    // (what, frozen before SIGTERM, frozen after it, failpoints)
    let rounds: [(&str, u64, u64, &str); 4] = [
        ("SIGTERM during a 6 s freeze", 3, 3, ""),
        ("SIGTERM right after a 20 s freeze", 20, 0, ""),
        ("SIGTERM during a 25 s freeze", 20, 5, ""),
        (
            "the stop's last commit unanswered",
            0,
            0,
            "txn.stop_commit_fails=return",
        ),
    ];
    let mut batches = 0;
    for (round, (what, before, after, failpoints)) in rounds.into_iter().enumerate() {
        // Stopped while the writer still writes: a Kafka transaction is open.
        let written = if failpoints.is_empty() { 200 } else { 2000 };
        let writer = tokio::spawn(write_stream(db.clone(), batches, written, 20, 20));
        let mut router = setup.start_router_env(&[("FAILPOINTS", failpoints)]);
        // This run streams before anything is frozen or stopped: the count below can be
        // met by earlier rounds' aborted records alone (a read_uncommitted count), and a
        // SIGTERM before the process is up tests nothing of a stop.
        wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(60)).await;
        kafka.wait_for_count(
            &topics,
            (batches * 20 + 1000) as i64,
            Duration::from_secs(60),
        );
        batches += written;
        let frozen = before + after > 0;
        if frozen {
            broker.signal("-STOP");
        }
        tokio::time::sleep(Duration::from_secs(before)).await;
        let asked = std::time::Instant::now();
        router.signal_term();
        tokio::time::sleep(Duration::from_secs(after)).await;
        if frozen {
            broker.signal("-CONT");
        }
        let status = router.wait(Duration::from_secs(40));
        let log = router.log();
        let took = asked.elapsed();
        assert!(
            status.is_some_and(|s| s.success()),
            "round {round} ({what}): stop ended with {status:?} after {took:?}:\n{log}"
        );
        assert!(
            took < Duration::from_secs(34),
            "round {round} ({what}): stop took {took:?}:\n{log}"
        );
        if !failpoints.is_empty() {
            assert!(
                log.contains("the stop's last step failed") && log.contains("commit marker"),
                "round {round} ({what}): the stop does not say what it left:\n{log}"
            );
        }
        println!("stop while Kafka does not answer: {what}: exit 0 after {took:?}");
        writer.await.unwrap();
    }
    let mut router = setup.start_router();
    let total = batches * 20;
    kafka.drain_and_stop(&mut router, &topics, total);
    assert_eq!(
        kafka.check_stream(&topics, total),
        0,
        "duplicates for read_committed"
    );
    broker.services("down");
}

/// The server silent for longer than a read may wait, right after the router asked for
/// its binlog — what a server does while it looks for a GTID in a large binlog file (it
/// reads the file from its start, sending nothing, not even heartbeats; a 1 GB file took
/// longer than the read timeout under CI's load). The router waits for it (saying so)
/// instead of presuming the connection dead: before, every reconnect started the search
/// again and the router never streamed. Each start, the first and a restart by GTID,
/// streams every event: 0 lost, 0 duplicates.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_silent_while_it_looks_for_the_start_position_is_waited_for() {
    let _settings = SERVER_SETTINGS.read().await;
    let (db, server_id) = unique("locate_slow");
    let mut conn = app_conn().await;
    outbox_db(&mut conn, &db).await;
    // 8 s: twice the read timeout at the tests' heartbeat of 1 s (3 × 1 + 1 s).
    let proxy = StallProxy::start(mariadb_port(), Duration::from_secs(8)).await;
    let mut setup = RouterSetup::new(&db, server_id, binlog_position(&mut conn).await);
    setup.source_port = proxy.port;
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    let mut total = 0;
    for round in 0..2 {
        crate::crash::write_mixed(&db, total, total + 200, 20).await;
        total += 200;
        let mut router = setup.start_router();
        assert_eq!(
            wait_for_ids(&topics, total, Duration::from_secs(60)),
            total,
            "round {round}:\n{}",
            router.log()
        );
        let log = drain_and_stop(&mut router, &topics, total);
        assert!(
            log.contains("still looking for the start position"),
            "round {round}: the wait is said:\n{log}"
        );
        assert!(
            !log.contains("presumed dead") && !log.contains("resuming from the last checkpoint"),
            "round {round}: the router gave up on a server that was searching:\n{log}"
        );
    }
    assert!(proxy.stalled.load(std::sync::atomic::Ordering::Relaxed) >= 2);
    assert_eq!(check_stream(&topics, total), 0);
    println!("a server silent 8 s at each binlog request: {total} events in 2 starts, 0 lost, 0 duplicates");
}
