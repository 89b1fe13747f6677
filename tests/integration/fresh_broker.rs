//! The demo's first moments, where an acknowledged event went missing: a freshly
//! started broker, fresh topics, a new router, events in separate transactions.
//! A new partition's first batch failed with NOT_LEADER, the next one was accepted, and
//! librdkafka reported the first as delivered without an offset ("implicitly acked").
//!
//! Runs: `IT_FRESH_BROKER_RUNS` (default 4), alternating topics the router creates
//! (it waits for their leaders) and topics the broker auto-creates (only the
//! delivery-proof check stands between them and a loss).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::util::*;

const PORT: u16 = 9292;
/// Events per run.
const EVENTS: usize = 40;

fn runs() -> usize {
    std::env::var("IT_FRESH_BROKER_RUNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(4)
}

/// `scripts/services ACTION kafka` for a private broker on PORT under `state`.
fn broker(state: &PathBuf, action: &str) {
    let status = Command::new(repo_root().join("scripts/services"))
        .args([action, "kafka"])
        .env("OUTBOX_LOCAL_DIR", state)
        .env("OUTBOX_KAFKA_PORT", PORT.to_string())
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "private broker {action} failed");
}

#[tokio::test(flavor = "multi_thread")]
async fn acknowledged_events_are_in_a_fresh_broker() {
    let _settings = SERVER_SETTINGS.read().await;
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().to_path_buf();
    // The jars of the shared local broker, not a second download.
    let local = std::env::var("OUTBOX_LOCAL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join(".local"));
    std::fs::create_dir_all(state_dir.join("kafka")).unwrap();
    std::os::unix::fs::symlink(local.join("kafka/libs"), state_dir.join("kafka/libs")).unwrap();
    let bootstrap = format!("127.0.0.1:{PORT}");
    let mut unproven = 0;
    for run in 0..runs() {
        let _ = std::fs::remove_dir_all(state_dir.join("kafka/data"));
        broker(&state_dir, "up");
        let (mut conn, mut setup) = fresh("fresh_broker").await;
        let db = setup.db.clone();
        setup.kafka_bootstrap = bootstrap.clone();
        let create = run % 2 == 0;
        setup.extra_toml = format!("[kafka.topics]\ncreate = {create}\n");
        // A few new partitions, each written again and again by single-event
        // transactions milliseconds apart (one key per type: one partition each), so
        // a partition's second batch can overtake its failed first one.
        let types: Vec<String> = ["Order", "Payment", "Customer", "Invoice"]
            .iter()
            .map(|t| t.to_string())
            .collect();
        let topics: Vec<String> = types.iter().map(|t| setup.topic(t)).collect();
        let mut router = setup.start_router();
        // Streaming first, so events arrive a few milliseconds apart as new batches
        // (a backlog would go out as one batch per partition: no second batch to race).
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !router.log().contains("streaming binlog") {
            assert!(
                std::time::Instant::now() < deadline,
                "router did not start:\n{}",
                router.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut ids = Vec::new();
        for i in 0..EVENTS {
            let id = format!("e-{i}");
            ids.push(id.clone());
            let t = &types[i % types.len()];
            let ev = Ev::new(id, t, &format!("{t}-1"), "{}");
            insert_txn(&mut conn, &db, &[ev]).await;
        }
        conn.disconnect().await.unwrap();
        wait_for_count_at(
            &bootstrap,
            &topics,
            ids.len() as i64,
            Duration::from_secs(20),
        );
        std::thread::sleep(Duration::from_secs(1));
        router.stop(Duration::from_secs(30));
        let log = router.log();
        let found: Vec<String> = read_all_at(&bootstrap, &topics)
            .iter()
            .map(|m| m.id())
            .collect();
        let lost: Vec<&String> = ids.iter().filter(|id| !found.contains(id)).collect();
        assert!(
            lost.is_empty(),
            "run {run} (create = {create}): acknowledged events missing from Kafka: {lost:?}\n{log}"
        );
        unproven += log.matches("as delivered without an offset").count();
        broker(&state_dir, "down");
        println!(
            "fresh broker run {run} (router creates topics: {create}): {} events, 0 lost",
            ids.len()
        );
    }
    println!(
        "fresh broker: runs={} events={} lost=0 unproven_deliveries={unproven}",
        runs(),
        runs() * EVENTS
    );
}
