//! The 3-node KRaft cluster (RF=3, min.insync.replicas=2): leaders that move while new
//! producers start, and an ISR below min.insync.replicas. One broker never moves a
//! leader, and the implicit-acknowledgement loss (a new idempotent producer's failed
//! first batch reported as delivered) only shows where leaders move.
//!
//! Cycles per test: `IT_CLUSTER_CYCLES` (default 3; the full run in the closing notes
//! uses more).

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use tokio::sync::Mutex;

use crate::util::*;

/// The cluster tests stop and start nodes: one at a time.
static CLUSTER: Mutex<()> = Mutex::const_new(());

const BOOTSTRAP: &str = "127.0.0.1:29092,127.0.0.1:29192,127.0.0.1:29292";

fn cycles() -> usize {
    std::env::var("IT_CLUSTER_CYCLES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(3)
}

fn node(action: &str, n: i32) {
    let status = std::process::Command::new(repo_root().join("scripts/services"))
        .args(["node", action, &n.to_string()])
        .status()
        .unwrap();
    assert!(
        status.success(),
        "scripts/services node {action} {n} failed"
    );
}

/// Starts every node and waits until each partition of `topics` has a full ISR again.
fn all_nodes_up(topics: &[String]) {
    for n in 1..=3 {
        node("start", n);
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while !topics.iter().all(|t| full_isr(t)) {
        assert!(Instant::now() < deadline, "ISR not full within 120 s");
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn metadata_client() -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", BOOTSTRAP)
        .create()
        .unwrap()
}

/// The node leading partition 0 of `topic` (None while it has none).
fn leader_of(topic: &str) -> Option<i32> {
    let md = metadata_client()
        .fetch_metadata(Some(topic), Duration::from_secs(5))
        .ok()?;
    let t = md.topics().first()?;
    let p = t.partitions().iter().find(|p| p.id() == 0)?;
    (p.leader() > 0).then_some(p.leader())
}

fn full_isr(topic: &str) -> bool {
    let Ok(md) = metadata_client().fetch_metadata(Some(topic), Duration::from_secs(5)) else {
        return false;
    };
    md.topics().first().is_some_and(|t| {
        !t.partitions().is_empty()
            && t.partitions()
                .iter()
                .all(|p| p.leader() > 0 && p.isr().len() == 3)
    })
}

/// A router on the cluster whose topics it creates with RF=3, min.insync.replicas=2.
async fn cluster_setup(name: &str) -> RouterSetup {
    services("up", "cluster");
    let (_conn, mut setup) = fresh(name).await;
    setup.kafka_bootstrap = BOOTSTRAP.to_string();
    setup.extra_toml = format!(
        r#"
[[kafka.topics.rule]]
pattern = "{}.*"
partitions = 3
replication_factor = 3
config = {{ "min.insync.replicas" = "2" }}
"#,
        setup.topic_prefix
    );
    setup
}

fn unproven(log: &str) -> usize {
    log.matches("as delivered without an offset").count()
}

/// Leaders move while new producers start: each cycle kills -9 the broker leading the
/// hot partition, shuts another one down (controlled), restarts them (preferred-leader
/// elections move leaders back within seconds), and kills -9 the router in between so a
/// new producer meets every move. 0 lost; duplicates only as re-sends with the same id
/// and content; per-key first occurrences in commit order.
#[tokio::test(flavor = "multi_thread")]
async fn leaders_move_under_new_producers() {
    leaders_move("leaders", None).await;
}

/// The same leader moves in exactly-once mode (the transaction log and checkpoint topic
/// RF=3 too): a read_committed consumer sees every event once.
#[tokio::test(flavor = "multi_thread")]
async fn leaders_move_under_new_producers_exactly_once() {
    let delivery = exactly_once_delivery("eos-leaders", false);
    let duplicates = leaders_move("eos_leaders", Some(&delivery)).await;
    assert_eq!(
        duplicates, 0,
        "exactly-once mode re-delivered {duplicates} events"
    );
}

async fn leaders_move(name: &str, delivery: Option<&str>) -> usize {
    let _cluster = CLUSTER.lock().await;
    let _settings = SERVER_SETTINGS.read().await;
    let mut setup = cluster_setup(name).await;
    setup.delivery(delivery);
    let db = setup.db.clone();
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    let per_cycle = 20;
    let mut written = 0;
    let mut unproven_reports = 0;
    let mut router = setup.start_router();
    write_stream(db.clone(), 0, 4, 50, 20).await;
    written += 4;
    Kafka::at(BOOTSTRAP).wait_for_count(&topics, 200, Duration::from_secs(60));
    // The router created its topics with the rule's replication factor.
    let md = metadata_client()
        .fetch_metadata(Some(&topics[0]), Duration::from_secs(5))
        .unwrap();
    let partitions = md.topics()[0].partitions();
    assert_eq!(partitions.len(), 3);
    assert!(
        partitions.iter().all(|p| p.replicas().len() == 3),
        "not RF=3"
    );
    for cycle in 0..cycles() {
        let writer = tokio::spawn(write_stream(db.clone(), written, per_cycle, 50, 20));
        written += per_cycle;
        let leader = leader_of(&topics[0]).unwrap_or(1);
        let other = if leader == 3 { 1 } else { leader + 1 };
        // Leaders move in the background: a crash of the hot partition's leader, its
        // restart, a controlled shutdown of another node and its restart (each restart
        // is followed by preferred-leader elections within seconds).
        let bounce = std::thread::spawn(move || {
            node("kill", leader);
            std::thread::sleep(Duration::from_secs(2));
            node("start", leader);
            std::thread::sleep(Duration::from_secs(3));
            node("stop", other);
            node("start", other);
        });
        // Meanwhile new producers, again and again: the router is killed -9 and started.
        while !bounce.is_finished() {
            tokio::time::sleep(Duration::from_millis(700)).await;
            router.kill9();
            unproven_reports += unproven(&router.log());
            router = setup.start_router();
        }
        bounce.join().unwrap();
        writer.await.unwrap();
        all_nodes_up(&topics);
        println!(
            "cluster cycle {cycle}: leader {leader} killed, node {other} shut down, both restarted"
        );
    }
    let total = written * 50;
    let log = Kafka::at(BOOTSTRAP).drain_and_stop(&mut router, &topics, total);
    unproven_reports += unproven(&log);
    let duplicates = Kafka::at(BOOTSTRAP).check_stream(&topics, total);
    println!(
        "cluster leader moves ({name}): cycles={} events={total} lost=0 duplicates={duplicates} unproven_deliveries={unproven_reports}",
        cycles()
    );
    duplicates
}

/// Two of three brokers down: below min.insync.replicas=2 nothing can be acknowledged.
/// The router must stall (checkpoint unchanged, nothing skipped) and resume when the
/// brokers are back.
#[tokio::test(flavor = "multi_thread")]
async fn isr_below_min_insync_stalls_then_resumes() {
    let _cluster = CLUSTER.lock().await;
    let _settings = SERVER_SETTINGS.read().await;
    let mut setup = cluster_setup("isr").await;
    setup
        .kafka_properties
        .push(("message.timeout.ms".into(), "8000".into()));
    let db = setup.db.clone();
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    let mut router = setup.start_router();
    write_stream(db.clone(), 0, 10, 30, 10).await;
    Kafka::at(BOOTSTRAP).wait_for_count(&topics, 300, Duration::from_secs(60));
    all_nodes_up(&topics);
    let before = Kafka::at(BOOTSTRAP).count(&topics);
    std::thread::sleep(Duration::from_millis(1000));

    node("stop", 2);
    node("kill", 3);
    write_stream(db.clone(), 10, 10, 30, 10).await;
    // Longer than message.timeout.ms: deliveries fail and the pipeline restarts.
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert!(
        router.wait(Duration::from_millis(10)).is_none(),
        "router exited below min.insync.replicas:\n{}",
        router.log()
    );
    let stalled = Kafka::at(BOOTSTRAP).count(&topics);
    // Partitions without a leader are not counted; none may have grown.
    assert!(
        stalled <= before,
        "records were committed with one in-sync replica (acks=all, min.insync.replicas=2): {stalled} > {before}"
    );
    // A restart during the stall: nothing was acknowledged, so everything is re-read.
    router.kill9();
    router = setup.start_router();
    all_nodes_up(&topics);
    let total = 600;
    let log = Kafka::at(BOOTSTRAP).drain_and_stop(&mut router, &topics, total);
    let duplicates = Kafka::at(BOOTSTRAP).check_stream(&topics, total);
    println!(
        "cluster ISR below min: events={total} lost=0 duplicates={duplicates} unproven_deliveries={}",
        unproven(&log)
    );
}
