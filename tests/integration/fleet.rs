//! The contract across instances: a first start, a lost or renamed checkpoint topic and
//! an operator's position are facts of the fleet, not of the instance that happens to
//! start first or to hold a volume. Each test runs a standby pair (exactly-once, one lock
//! group) as the chart starts it (`run --init`), then counts with a `read_committed`
//! consumer: 0 lost, and duplicates only where an operator asked for them.

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;

use crate::standby::{pair, streams, wait_standby_ready, wait_streaming, Pair};
use crate::util::*;

const INIT: &[&str] = &["--init"];

/// The refusal exit code: an operator must set the position.
const NEEDS_OPERATOR: i32 = 4;

/// The checkpoint topic of `setup` as its config names it.
fn checkpoint_topic(setup: &RouterSetup) -> String {
    let text = std::fs::read_to_string(setup.config_path()).unwrap();
    let config: toml::Table = toml::from_str(&text).unwrap();
    config["delivery"]["checkpoint_topic"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Deletes `topic` and waits until the broker no longer lists it.
pub(crate) async fn delete_topic(topic: &str) {
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .unwrap();
    let result = admin
        .delete_topics(&[topic], &AdminOptions::new())
        .await
        .unwrap();
    assert!(result.iter().all(|r| r.is_ok()), "{result:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let listed = admin
            .inner()
            .fetch_metadata(None, Duration::from_secs(5))
            .unwrap()
            .topics()
            .iter()
            .any(|t| t.name() == topic);
        if !listed {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{topic} still listed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs an operator's command on `setup`, expects it to succeed, returns what it said.
fn operator(setup: &RouterSetup, args: &[&str]) -> String {
    let out = setup.cli(args);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{args:?}: {said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    said
}

/// Both started as the chart starts them; every one of `total` events once.
async fn deliver_once(p: &Pair, total: usize, scenario: &str) {
    let [(mut leader, _), (mut standby, _)] = start_both(p).await;
    drain_and_stop(&mut leader, &p.topics, total);
    standby.stop(Duration::from_secs(30));
    let duplicates = check_stream(&p.topics, total);
    println!("fleet {scenario}: events={total} lost=0 duplicates={duplicates}");
    assert_eq!(duplicates, 0, "{scenario}");
}

/// Starts `setup` with `run --init` and expects the start refused for the operator
/// (exit 4) within 60 s, naming the command that recovers; returns its log.
fn expect_refused(setup: &RouterSetup, who: &str) -> String {
    let mut router = setup.start_router_with(&[], INIT);
    let Some(status) = router.wait(Duration::from_secs(60)) else {
        let log = router.log();
        router.kill9();
        panic!("{who} must refuse to start, it runs:\n{log}");
    };
    let log = router.log();
    assert_eq!(
        status.code(),
        Some(NEEDS_OPERATOR),
        "{who}: {status}\n{log}"
    );
    assert!(
        log.contains("checkpoint set"),
        "{who} names no command:\n{log}"
    );
    log
}

/// Both started with `run --init`; returns (leader, standby) once one streams and the
/// other is a ready standby, leader's setup first.
async fn start_both(p: &Pair) -> [(RouterProcess, &RouterSetup); 2] {
    let mut a = p.a.start_router_with(&[], INIT);
    let b = p.b.start_router_with(&[], INIT);
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        if streams(p.a.monitor_port).await {
            wait_standby_ready(p.b.monitor_port, &b).await;
            return [(a, &p.a), (b, &p.b)];
        }
        if streams(p.b.monitor_port).await {
            wait_standby_ready(p.a.monitor_port, &a).await;
            return [(b, &p.b), (a, &p.a)];
        }
        if let Some(status) = a.wait(Duration::ZERO) {
            panic!("a exited: {status}\n{}", a.log());
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nobody leads:\n{}\n{}",
            a.log(),
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `a` started with `run --init` until it streams, then `b` until it is a ready
/// standby: the pair as the chart starts it, `a` leading.
async fn a_leads_b_stands_by(p: &Pair) -> (RouterProcess, RouterProcess) {
    let a = p.a.start_router_with(&[], INIT);
    wait_streaming(p.a.monitor_port, Duration::from_secs(60), &a).await;
    let b = p.b.start_router_with(&[], INIT);
    wait_standby_ready(p.b.monitor_port, &b).await;
    (a, b)
}

/// A pair that delivered 200 events and stopped (`a` led, `b` never did).
async fn delivered_and_stopped(p: &Pair) {
    let (mut a, mut b) = a_leads_b_stands_by(p).await;
    write_stream(p.a.db.clone(), 0, 20, 10, 7).await;
    assert_eq!(wait_for_ids(&p.topics, 200, Duration::from_secs(60)), 200);
    b.stop(Duration::from_secs(30));
    a.stop(Duration::from_secs(30));
}

/// After both refused: the operator carries the old leader's position over with
/// `checkpoint set` (it commits the marker for the fleet); both start as the chart
/// starts them and every event arrives once.
async fn recover_and_count(p: &Pair, scenario: &str) {
    let (file, offset) = p.a.checkpoint().expect("the old leader's store");
    let position = format!("{file}:{offset}");
    let said = operator(&p.a, &["checkpoint", "set", &position]);
    assert!(said.contains("whole fleet"), "{said}");
    deliver_once(p, 400, scenario).await;
}

/// The measured case: the checkpoint topic deleted while both are down, 200
/// rows written meanwhile; the instance that never led starts first. Before, it
/// recorded a first start and streamed from `latest`: 0 of the 200 ever arrived.
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_checkpoint_topic_is_refused_by_the_instance_that_never_led() {
    let _settings = SERVER_SETTINGS.read().await;
    let p = pair("fleet_lost").await;
    delivered_and_stopped(&p).await;
    delete_topic(&checkpoint_topic(&p.a)).await;
    write_stream(p.a.db.clone(), 20, 20, 10, 7).await;
    let log = expect_refused(&p.b, "the instance that never led");
    assert!(log.contains("lock topic"), "{log}");
    expect_refused(&p.a, "the old leader");
    recover_and_count(&p, "deleted checkpoint topic, never-led first").await;
}

/// The other order, and the other way to lose the topic: `delivery.checkpoint_topic`
/// renamed in both configs; the old leader starts first, then the instance that never
/// led. Both refuse naming the old topic; `checkpoint move-topic` carries the marker
/// over, and every row arrives once.
#[tokio::test(flavor = "multi_thread")]
async fn a_renamed_checkpoint_topic_is_refused_in_the_other_order_too() {
    let _settings = SERVER_SETTINGS.read().await;
    let mut p = pair("fleet_renamed").await;
    delivered_and_stopped(&p).await;
    let old = checkpoint_topic(&p.a);
    for setup in [&mut p.a, &mut p.b] {
        setup.extra_toml = setup
            .extra_toml
            .replace("it.checkpoints.", "it.checkpoints-renamed.");
    }
    assert_ne!(checkpoint_topic(&p.a), old);
    write_stream(p.a.db.clone(), 20, 20, 10, 7).await;
    let log = expect_refused(&p.a, "the old leader");
    assert!(log.contains(&old), "{log}");
    let log = expect_refused(&p.b, "the instance that never led");
    assert!(log.contains(&old), "{log}");
    assert!(log.contains("checkpoint move-topic --from"), "{log}");
    // The explicit move: the marker carried over for the fleet.
    let said = operator(&p.b, &["checkpoint", "move-topic", "--from", &old]);
    assert!(
        said.contains("carried over") && said.contains("whole fleet"),
        "{said}"
    );
    deliver_once(&p, 400, "renamed checkpoint topic, moved").await;
}

/// `latest` is fixed when the first start is recorded, not when some instance first
/// leads. Before, the leader decided its own "latest" at the lock: every row committed
/// between the recorded first start and that moment was skipped (272 of 277 measured).
#[tokio::test(flavor = "multi_thread")]
async fn a_first_start_begins_where_it_was_recorded_whoever_leads() {
    let _settings = SERVER_SETTINGS.read().await;
    let mut p = pair("fleet_latest").await;
    p.a.start = "latest".into();
    p.b.start = "latest".into();
    operator(&p.b, &["checkpoint", "init"]);
    // Committed after the first start was recorded, before anyone leads.
    write_stream(p.a.db.clone(), 0, 10, 10, 7).await;
    let mut a = p.a.start_router_with(&[], INIT);
    wait_streaming(p.a.monitor_port, Duration::from_secs(60), &a).await;
    write_stream(p.a.db.clone(), 10, 10, 10, 7).await;
    let arrived = wait_for_ids(&p.topics, 200, Duration::from_secs(60));
    assert_eq!(
        arrived,
        200,
        "rows committed after the recorded first start were skipped:\n{}",
        a.log()
    );
    drain_and_stop(&mut a, &p.topics, 200);
    assert_eq!(check_stream(&p.topics, 200), 0);
}

/// After an operator's command on the stopped standby `b` (`said`: its output): it
/// says it fenced the leader `a`, which stops at its next commit (batch `next`); both
/// restarted as the chart would, 1,000 rows, the leader killed -9, the other takes
/// over, 90 rows more. Returns the new leader and its setup.
async fn fenced_then_taken_over<'p>(
    p: &'p Pair,
    mut a: RouterProcess,
    said: &str,
    next: usize,
) -> (RouterProcess, &'p RouterSetup) {
    assert!(
        said.contains("instance a") && said.contains("fenced"),
        "{said}"
    );
    write_stream(p.a.db.clone(), next, 1, 10, 7).await;
    let status = a.wait(Duration::from_secs(60));
    assert!(status.is_some(), "the fenced leader runs on:\n{}", a.log());

    let [(mut leader, _), (standby, standby_setup)] = start_both(p).await;
    write_stream(p.a.db.clone(), next + 1, 100, 10, 7).await;
    let written = (next + 101) * 10;
    assert_eq!(
        wait_for_ids(&p.topics, written, Duration::from_secs(60)),
        written
    );
    leader.kill9();
    wait_streaming(
        standby_setup.monitor_port,
        Duration::from_secs(90),
        &standby,
    )
    .await;
    write_stream(p.a.db.clone(), next + 101, 9, 10, 7).await;
    (standby, standby_setup)
}

/// `checkpoint set` run on a stopped standby. Before, it waited in that instance's
/// store and was applied when it next led, over a marker that had moved on: every event
/// the leader delivered since went out again (1,000 duplicates measured). Now it is
/// committed as the fleet's marker at once, fencing the leader, and says so; after it
/// and a takeover nothing is delivered twice — and an operator's move back still
/// re-delivers exactly what it asks for.
#[tokio::test(flavor = "multi_thread")]
async fn checkpoint_set_on_a_standby_takes_effect_for_the_fleet_at_once() {
    let _settings = SERVER_SETTINGS.read().await;
    let p = pair("fleet_set").await;
    let mut conn = app_conn().await;
    let (a, mut b) = a_leads_b_stands_by(&p).await;
    write_stream(p.a.db.clone(), 0, 30, 10, 7).await;
    assert_eq!(wait_for_ids(&p.topics, 300, Duration::from_secs(60)), 300);

    // The standby stopped, the operator sets the current position on it.
    b.stop(Duration::from_secs(30));
    let (file, offset) = binlog_position(&mut conn).await;
    let said = operator(&p.b, &["checkpoint", "set", &format!("{file}:{offset}")]);
    let (mut leader, standby_setup) = fenced_then_taken_over(&p, a, &said, 30).await;
    let total = 1400;
    let seen = wait_for_ids(&p.topics, total, Duration::from_secs(60));
    let duplicates = check_stream(&p.topics, total);
    println!(
        "fleet checkpoint set on a standby: events={total} seen={seen} duplicates={duplicates}"
    );
    assert_eq!(
        duplicates, 0,
        "an operator's record was applied after the marker moved on"
    );

    // The operator's move is still possible: back to before 100 delivered rows, from
    // the instance that is down; the leader is fenced, and those 100 arrive again.
    let (file, offset) = binlog_position(&mut conn).await;
    write_stream(p.a.db.clone(), 140, 10, 10, 7).await;
    assert_eq!(wait_for_ids(&p.topics, 1500, Duration::from_secs(60)), 1500);
    let down = if std::ptr::eq(standby_setup, &p.a) {
        &p.b
    } else {
        &p.a
    };
    operator(down, &["checkpoint", "set", &format!("{file}:{offset}")]);
    write_stream(p.a.db.clone(), 150, 1, 10, 7).await;
    assert!(
        leader.wait(Duration::from_secs(60)).is_some(),
        "the fenced leader runs on:\n{}",
        leader.log()
    );
    let [(mut leader, _), (mut standby, _)] = start_both(&p).await;
    drain_and_stop(&mut leader, &p.topics, 1610);
    standby.stop(Duration::from_secs(30));
    assert_redelivered(&p.topics, 1510, 1400..1500, "the move");
}

/// Every one of `total` events is in the topics, those of `again` twice and the rest
/// once: what an operator asked to be sent again, and nothing else.
fn assert_redelivered(topics: &[String], total: usize, again: std::ops::Range<u64>, what: &str) {
    let mut times: HashMap<String, usize> = HashMap::new();
    for m in &read_all(topics) {
        *times.entry(m.id()).or_default() += 1;
    }
    let mut twice: Vec<u64> = times
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| id.trim_start_matches("s-").parse().unwrap())
        .collect();
    twice.sort();
    println!(
        "fleet {what}: events={total} delivered={} twice={} (asked for {})",
        times.len(),
        twice.len(),
        again.end - again.start
    );
    assert_eq!(
        twice,
        again.collect::<Vec<u64>>(),
        "{what} re-delivered other events"
    );
    assert_eq!(times.len(), total, "{what}: events missing");
    assert!(times.values().all(|n| *n <= 2), "{what}: sent three times");
}

/// `recover` run on a stopped standby, as after a purge: it re-publishes the rows of its
/// window and commits its position as the fleet's marker at once, fencing the leader
/// (before, like `checkpoint set`, it waited in the standby's store and was applied
/// when that instance next led, over a marker that had moved on). After it, 1,000 rows
/// and a takeover: the window's rows twice, as asked, and nothing else.
#[tokio::test(flavor = "multi_thread")]
async fn recover_on_a_standby_takes_effect_for_the_fleet_at_once() {
    let _settings = SERVER_SETTINGS.read().await;
    let p = pair("fleet_recover").await;
    let (a, mut b) = a_leads_b_stands_by(&p).await;
    write_stream(p.a.db.clone(), 0, 30, 10, 7).await;
    assert_eq!(wait_for_ids(&p.topics, 300, Duration::from_secs(60)), 300);
    // The recover window starts at the next whole second: rows before it are outside.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let since = now.as_secs() + 1;
    tokio::time::sleep(Duration::from_secs(since) - now + Duration::from_millis(200)).await;
    write_stream(p.a.db.clone(), 30, 10, 10, 7).await;
    assert_eq!(wait_for_ids(&p.topics, 400, Duration::from_secs(60)), 400);

    b.stop(Duration::from_secs(30));
    let said = operator(&p.b, &["recover", "--since", &since.to_string()]);
    let (mut leader, _) = fenced_then_taken_over(&p, a, &said, 40).await;
    drain_and_stop(&mut leader, &p.topics, 1500);
    assert_redelivered(&p.topics, 1500, 300..400, "recover on a standby");
}

/// Debezium's offset of connector `name` (server `shop`) at `file:pos`, on a Connect
/// offsets topic of its own; returns the `--offsets` argument that reads it.
async fn debezium_offset_topic(scenario: &str, name: &str, file: &str, pos: u64) -> String {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let topic = format!("connect-offsets-{scenario}-{}", std::process::id());
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .unwrap();
    let key = serde_json::json!([name, {"server": "shop"}]).to_string();
    let value = serde_json::json!({"file": file, "pos": pos}).to_string();
    producer
        .send(
            FutureRecord::to(&topic).key(&key).payload(&value),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
    format!("kafka:{topic}")
}

/// What an operator reads or changes on any instance is the fleet's position, not that
/// instance's volume. Before, the instance that never led showed no checkpoint ("the
/// next run starts at source.start"), and `import-debezium` there found its empty store
/// and committed Debezium's old offset as the fleet's marker: every event since was
/// delivered again. Both instances, both orders.
#[tokio::test(flavor = "multi_thread")]
async fn any_instance_shows_and_guards_the_fleet_s_position() {
    let _settings = SERVER_SETTINGS.read().await;
    let p = pair("fleet_read").await;
    let mut conn = app_conn().await;
    let (old_file, old_pos) = binlog_position(&mut conn).await;
    delivered_and_stopped(&p).await;
    let (file, offset) = p.a.checkpoint().expect("the leader's store");

    for (who, setup) in [("b, which never led", &p.b), ("a, which led", &p.a)] {
        assert_eq!(
            setup.checkpoint(),
            Some((file.clone(), offset)),
            "{who} shows another position than the fleet's"
        );
        let human = operator(setup, &["checkpoint", "show"]);
        assert!(
            human.contains(&format!("{file}:{offset}")) && human.contains("commit marker"),
            "{who}: {human}"
        );
        let debezium: serde_json::Value = serde_json::from_str(&operator(
            setup,
            &["checkpoint", "show", "--debezium", "shop"],
        ))
        .unwrap();
        assert_eq!(
            debezium["offsets"][0]["offset"]["pos"].as_u64(),
            Some(offset),
            "{who}: {debezium}"
        );
    }

    // Debezium's offset from before the 200 events, imported on either instance.
    let connector = serde_json::json!({
        "name": "dbz-fleet",
        "config": {
            "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
            "database.hostname": "127.0.0.1",
            "database.port": mariadb_port().to_string(),
            "topic.prefix": "shop",
        }
    });
    let offsets = debezium_offset_topic("fleet_read", "dbz-fleet", &old_file, old_pos).await;
    for (who, setup) in [("b, which never led", &p.b), ("a, which led", &p.a)] {
        let file = setup.dir.path().join("connector.json");
        std::fs::write(&file, connector.to_string()).unwrap();
        let file = file.to_str().unwrap();
        let out = setup.cli(&["import-debezium", file, "--offsets", &offsets]);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{who} imported over the fleet's position: {}{said}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(said.contains("already has a checkpoint"), "{who}: {said}");
    }
    assert_eq!(p.a.checkpoint(), Some((file, offset)), "the fleet moved");
    // Nothing moved: 200 more, each once.
    write_stream(p.a.db.clone(), 20, 20, 10, 7).await;
    deliver_once(&p, 400, "import refused").await;
}

const BORN_TOGETHER_KAFKA_PORT: u16 = 9692;

/// Two instances started together with `run --init` both create the commit-marker topic:
/// the one whose creation loses meets a topic its partner created a moment ago, which
/// the broker briefly describes with no partitions and no configs. That is a topic being
/// born, not a shape to refuse (CI saw "0 partitions, cleanup.policy=" stop the pair's
/// second instance).
#[tokio::test(flavor = "multi_thread")]
async fn instances_creating_the_marker_topic_at_once_both_accept_it() {
    // Its own broker, alone: the load that widens the window would slow every other
    // test's broker, and a third JVM starting beside busy tests took over 90 s.
    let _settings = SERVER_SETTINGS.write().await;
    let broker = PrivateBroker::new(BORN_TOGETHER_KAFKA_PORT);
    broker.services("up");
    let bootstrap = broker.bootstrap();
    let cfg: outbox_router::kafka::KafkaConfig =
        toml::from_str(&format!("bootstrap_servers = \"{bootstrap}\"")).unwrap();
    // A pool starts one instance per node; more racers widen the window.
    const RACERS: usize = 4;
    let pid = std::process::id();
    let admin = || -> AdminClient<DefaultClientContext> {
        rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .create()
            .unwrap()
    };
    // An admin client's futures never finish once it is dropped: one lives throughout.
    let cleaner = admin();
    for round in 0..10 {
        let topic = format!("it.checkpoints.born_together.{pid}.{round}");
        // A busy broker (other tests creating topics) applies a new topic's metadata
        // later: a topic of many partitions just before widens the window CI met.
        let busy = format!("it.busy.born_together.{pid}.{round}");
        let (busy_admin, busy_name) = (admin(), busy.clone());
        let busy_created = tokio::spawn(async move {
            let replication = rdkafka::admin::TopicReplication::Fixed(1);
            let busy_topic = rdkafka::admin::NewTopic::new(&busy_name, 60, replication);
            let opts = AdminOptions::new();
            busy_admin.create_topics(&[busy_topic], &opts).await
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(RACERS));
        let racers: Vec<_> = (0..RACERS)
            .map(|_| {
                let (cfg, topic, barrier) = (cfg.clone(), topic.clone(), barrier.clone());
                tokio::spawn(async move {
                    let creator = outbox_router::kafka::TopicCreator::new(&cfg).unwrap();
                    tokio::task::block_in_place(|| barrier.wait());
                    creator.ensure_compacted(&topic, "checkpoint")
                })
            })
            .collect();
        let busy_created = busy_created.await.unwrap().unwrap();
        for racer in racers {
            if let Err(e) = racer.await.unwrap() {
                panic!("round {round}: an instance refused the topic its partner created: {e}");
            }
        }
        assert!(busy_created.iter().all(|r| r.is_ok()), "{busy_created:?}");
        let gone = [busy.as_str(), topic.as_str()];
        cleaner
            .delete_topics(&gone, &AdminOptions::new())
            .await
            .unwrap();
    }
}
