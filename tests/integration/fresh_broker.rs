//! The demo's first moments, where an acknowledged event went missing: a freshly
//! started broker, fresh topics, a new router, events in separate transactions.
//! A new partition's first batch failed with NOT_LEADER, the next one was accepted, and
//! librdkafka reported the first as delivered without an offset ("implicitly acked").
//!
//! Runs: `IT_FRESH_BROKER_RUNS` (default 4), rotating: topics the router creates and
//! waits for; the same without the wait (failpoint `sink.skip_leader_wait`); topics the
//! broker auto-creates. On the code before the fix this lost an acknowledged event in
//! about one run of twenty here.

use std::time::Duration;

use mysql_async::prelude::Queryable;

use crate::util::*;

const PORT: u16 = 9292;
/// Events per run (the demo's four).
const EVENTS: usize = 4;

fn runs() -> usize {
    std::env::var("IT_FRESH_BROKER_RUNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(4)
}

#[tokio::test(flavor = "multi_thread")]
async fn acknowledged_events_are_in_a_fresh_broker() {
    let _settings = SERVER_SETTINGS.read().await;
    let broker = PrivateBroker::new(PORT);
    let bootstrap = broker.bootstrap();
    let mut unproven = 0;
    for run in 0..runs() {
        broker.wipe();
        broker.services("up");
        let (mut conn, mut setup) = fresh("fresh_broker").await;
        let db = setup.db.clone();
        setup.kafka_bootstrap = bootstrap.clone();
        // As the demo (the router creates the topics and waits for their leaders);
        // the same without that wait (a failpoint); the broker auto-creating them. In
        // the last two only the delivery-proof check stands between the race and a loss.
        let create = run % 3 != 2;
        let wait_for_leaders = run % 3 == 0;
        setup.extra_toml = format!("[kafka.topics]\ncreate = {create}\n");
        // The demo's shape: new topics appear one after another (each creation delays
        // the next transaction), and the first topic's partition gets a second batch
        // while its first may be failing.
        let types = ["Order", "Payment", "Customer"];
        let topics: Vec<String> = types.iter().map(|t| setup.topic(t)).collect();
        let mut router = if wait_for_leaders {
            setup.start_router()
        } else {
            setup.start_router_env(&[("FAILPOINTS", "sink.skip_leader_wait=return")])
        };
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
        let mut statements = Vec::new();
        for (i, group) in [vec![0], vec![1, 0], vec![2]].into_iter().enumerate() {
            let rows: Vec<String> = group
                .iter()
                .enumerate()
                .map(|(j, t)| {
                    let id = format!("e-{i}-{j}");
                    ids.push(id.clone());
                    let t = types[*t];
                    format!("('{id}', '{t}', '{t}-1', 'Happened', '{{}}')")
                })
                .collect();
            statements.push(format!(
                "INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES {}",
                rows.join(", ")
            ));
        }
        // One round trip, as the demo's client sends them.
        conn.query_drop(statements.join("; ")).await.unwrap();
        conn.disconnect().await.unwrap();
        Kafka::at(&bootstrap).wait_for_count(&topics, ids.len() as i64, Duration::from_secs(20));
        std::thread::sleep(Duration::from_secs(1));
        router.stop(Duration::from_secs(30));
        let log = router.log();
        let found: Vec<String> = Kafka::at(&bootstrap)
            .read_all(&topics)
            .iter()
            .map(|m| m.id())
            .collect();
        let lost: Vec<&String> = ids.iter().filter(|id| !found.contains(id)).collect();
        assert!(
            lost.is_empty(),
            "run {run} (create = {create}, leader wait = {wait_for_leaders}): acknowledged events missing from Kafka: {lost:?}\n{log}"
        );
        unproven += log.matches("as delivered without an offset").count();
        broker.services("down");
        let resent = found.len() - ids.len();
        println!(
            "fresh broker run {run} (router creates topics: {create}, waits for leaders: {wait_for_leaders}): {} events, 0 lost, {resent} re-sent",
            ids.len()
        );
    }
    println!(
        "fresh broker: runs={} events={} lost=0 unproven_deliveries={unproven}",
        runs(),
        runs() * EVENTS
    );
}
