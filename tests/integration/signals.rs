//! The operator's signals at the moments they used to mislead: a first start with Kafka
//! away (lag, in-flight, readiness, runway), two routers sharing a server id, errors no
//! retry fixes (topic creation denied, a missing topic with creation off), read-only
//! commands on a wrong or busy store, and `/metrics` matching docs/monitoring.md.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::util::*;

/// A private broker of this file's own (fresh_broker.rs uses 9292).
const PRIVATE_KAFKA_PORT: u16 = 9392;

async fn metrics_of(port: u16) -> String {
    let (code, text) = http_get(port, "/metrics").await;
    assert_eq!(code, 200, "{text}");
    text
}

/// A first start (`source.start = "latest"`), then Kafka goes away before the first
/// event: the event waits inside the router. Lag must grow from its commit time (not
/// read 0), it must count as in flight, `/ready` must turn 503 within
/// `monitor.ready_max_stall_secs`, and the first start's checkpoint (in a file no longer
/// being written) must not read as a negative retention runway or a critical verdict.
#[tokio::test(flavor = "multi_thread")]
async fn first_start_with_kafka_down_lags_is_in_flight_and_not_ready() {
    // Exclusive: it rotates the binlog, which tests comparing file names do not expect.
    let _settings = SERVER_SETTINGS.write().await;
    let broker = PrivateBroker::new(PRIVATE_KAFKA_PORT);
    broker.wipe();
    broker.services("up");
    let (mut conn, mut setup) = fresh("signals_first").await;
    let db = setup.db.clone();
    setup.start = "latest".into();
    setup.kafka_bootstrap = broker.bootstrap();
    setup.monitor_toml = "ready_max_stall_secs = 4\n".into();
    let port = setup.monitor_port;
    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    wait_http_ok(port, "/ready", Duration::from_secs(30)).await;

    broker.services("down");
    insert_txn(&mut conn, &db, &[Ev::new("first-1", "Order", "a", "{}")]).await;
    // The first start's file is no longer the one being written: its runway clock runs.
    root_sql("FLUSH BINARY LOGS");

    let inserted = Instant::now();
    let mut lags = Vec::new();
    let not_ready_after = loop {
        let (code, body) = http_get(port, "/ready").await;
        let text = metrics_of(port).await;
        let in_flight = metric(&text, "outbox_router_in_flight_records");
        let lag = metric(&text, "outbox_router_lag_seconds");
        if inserted.elapsed() > Duration::from_millis(1500) {
            assert!(
                in_flight >= 1.0,
                "the waiting event is not in flight:\n{text}"
            );
            assert!(lag >= 1.0, "lag {lag} s while an event waits:\n{text}");
            lags.push(lag);
        }
        if code == 503 {
            assert!(body.contains("without a delivery"), "{body}");
            break inserted.elapsed();
        }
        assert!(
            inserted.elapsed() < Duration::from_secs(20),
            "/ready still {code} {body:?} after {:?} with Kafka down:\n{text}",
            inserted.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let text = metrics_of(port).await;
    let lag = metric(&text, "outbox_router_lag_seconds");
    assert!(
        lag > lags[0] + 1.0,
        "lag does not grow: {lags:?} then {lag}"
    );
    assert_eq!(metric(&text, "outbox_router_ready"), 0.0, "{text}");
    assert!(metric(&text, "outbox_router_delivery_stall_seconds") >= 4.0);

    // The watcher has judged the first start's checkpoint at least once since the flush.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, status) = http_get(port, "/status").await;
    let st: serde_json::Value = serde_json::from_str(&status).unwrap();
    let runway = st["runway_secs"].as_i64().unwrap_or(-1);
    assert!(
        runway > 7000,
        "a first start's checkpoint has a full runway ahead, got {runway}: {st}"
    );
    assert_ne!(st["verdict"], "critical", "{st}");
    assert_eq!(st["live"]["ready"], false, "{st}");
    assert!(st["live"]["in_flight_records"].as_u64() >= Some(1), "{st}");
    assert!(
        !router.log().contains("status critical"),
        "{}",
        router.log()
    );

    broker.services("up");
    assert_eq!(
        Kafka::at(&broker.bootstrap()).wait_for_count(&topics, 1, Duration::from_secs(90)),
        1,
        "{}",
        router.log()
    );
    wait_http_ok(port, "/ready", Duration::from_secs(30)).await;
    println!("first start, Kafka down: /ready 503 after {not_ready_after:?}, lag samples {lags:?} ms, runway {runway} s");
    assert!(router.stop(Duration::from_secs(30)).success());
}

/// Two routers with the same `server_id` take the stream from each other: each time a
/// warning that says what it is, counted; after `source.server_id_conflicts_max` (5) a
/// clear stop instead of flapping forever. The one left streams on.
#[tokio::test(flavor = "multi_thread")]
async fn routers_sharing_a_server_id_warn_then_one_stops() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, first) = fresh("signals_same_id").await;
    let db = first.db.clone();
    let mut second = RouterSetup::new(&db, first.server_id, binlog_position(&mut conn).await);
    second.start = first.start.clone();
    let topics = vec![first.topic("Order")];
    let mut a = first.start_router();
    wait_http_ok(first.monitor_port, "/ready", Duration::from_secs(30)).await;
    let mut b = second.start_router();

    let deadline = Instant::now() + Duration::from_secs(90);
    let (stopped, survivor, survivor_setup) = loop {
        if a.wait(Duration::from_millis(50)).is_some() {
            break (a, b, &second);
        }
        if b.wait(Duration::from_millis(50)).is_some() {
            break (b, a, &first);
        }
        assert!(
            Instant::now() < deadline,
            "both routers still flapping after 90 s:\n{}\n---\n{}",
            a.log(),
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let log = stopped.log();
    assert!(
        log.contains("another replica with this source.server_id is connected"),
        "no warning naming the cause:\n{log}"
    );
    assert!(
        log.contains(&format!(
            "another replica with source.server_id = {} took the binlog stream 5 times",
            first.server_id
        )),
        "no clear final error:\n{log}"
    );
    // The survivor keeps streaming and delivering; it saw the conflicts too.
    let mut survivor = survivor;
    insert_txn(&mut conn, &db, &[Ev::new("after-1", "Order", "a", "{}")]).await;
    assert_eq!(
        wait_for_count(&topics, 1, Duration::from_secs(60)),
        1,
        "{}",
        survivor.log()
    );
    let text = metrics_of(survivor_setup.monitor_port).await;
    assert!(
        metric(&text, "outbox_router_server_id_conflicts_total") >= 1.0,
        "{text}"
    );
    assert!(
        metric(
            &text,
            "outbox_router_restarts_total{reason=\"server_id_conflict\"}"
        ) >= 1.0,
        "{text}"
    );
    assert!(survivor.stop(Duration::from_secs(30)).success());
}

/// A Kafka user without CREATE (carol, ACLs enforced by the local broker's
/// StandardAuthorizer) cannot create the console's control topic, nor (with it off)
/// the event's topic: each time the router stops at once, naming the topic and what
/// to change, instead of retrying forever.
#[tokio::test(flavor = "multi_thread")]
async fn topic_creation_denied_stops_naming_the_topic() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("signals_acl").await;
    let db = setup.db.clone();
    setup.kafka_bootstrap = kafka_sasl_bootstrap();
    setup.kafka_properties = [
        ("security.protocol", "SASL_PLAINTEXT"),
        ("sasl.mechanism", "PLAIN"),
        ("sasl.username", "carol"),
        ("sasl.password", "carol-secret"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    insert_txn(&mut conn, &db, &[Ev::new("denied-1", "Order", "a", "{}")]).await;
    // The console's control topic first: refused, it stops the router naming it and
    // the way out, rather than streaming past pauses it cannot see.
    let mut router = setup.start_router();
    let log = router.expect_failure("a control topic the Kafka user may not create");
    let control = format!("{}.control", setup.topic_prefix);
    assert!(
        log.contains(&format!("cannot follow monitor.control_topic {control}"))
            && log.contains("monitor.control_topic = \"off\""),
        "the control topic or the fix is not named:\n{log}"
    );
    assert!(!log.contains("carol-secret"), "password leaked:\n{log}");
    setup.monitor_toml = "control_topic = \"off\"".into();
    let started = Instant::now();
    let mut router = setup.start_router();
    let log = router.expect_failure("a topic the Kafka user may not create");
    let topic = setup.topic("Order");
    assert!(
        log.contains(&format!("Kafka refused topic {topic}")),
        "the topic is not named:\n{log}"
    );
    assert!(log.contains("CREATE"), "no fix given:\n{log}");
    assert!(!log.contains("carol-secret"), "password leaked:\n{log}");
    assert!(
        !log.contains("resuming from the last checkpoint"),
        "retried an error no retry fixes:\n{log}"
    );
    println!(
        "topic creation denied: stopped after {:?}",
        started.elapsed()
    );
}

/// With `kafka.topics.create = false` and no broker auto-creation, a missing topic
/// stops the router at once, naming it and the setting (it used to cost a full
/// `message.timeout.ms` on every restart, forever).
#[tokio::test(flavor = "multi_thread")]
async fn missing_topic_with_creation_off_stops_at_once() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("signals_missing").await;
    let db = setup.db.clone();
    setup.extra_toml = "[kafka.topics]\ncreate = false\n".into();
    setup
        .kafka_properties
        .push(("allow.auto.create.topics".into(), "false".into()));
    insert_txn(&mut conn, &db, &[Ev::new("missing-1", "Order", "a", "{}")]).await;
    let started = Instant::now();
    let mut router = setup.start_router();
    let log = router.expect_failure("a missing topic with creation off");
    let elapsed = started.elapsed();
    assert!(
        log.contains(&format!(
            "topic {} does not exist and kafka.topics.create = false",
            setup.topic("Order")
        )),
        "{log}"
    );
    assert!(
        elapsed < Duration::from_secs(30),
        "took {elapsed:?} to tell:\n{log}"
    );
    assert_eq!(count(&[setup.topic("Order")]), 0);
}

/// `status` and `checkpoint show` on a directory without a store say so plainly and
/// create nothing there; on the store of a running router (no monitor endpoint) they
/// read it instead of failing on its lock.
#[tokio::test(flavor = "multi_thread")]
async fn read_only_commands_create_nothing_and_read_a_busy_store() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("signals_readonly").await;
    let db = setup.db.clone();
    setup.monitor_off = true;

    let config = std::fs::read_to_string(setup.config_path()).unwrap();
    let real = setup.dir.path().join("checkpoint");
    let wrong = setup.dir.path().join("not-the-store");
    let wrong_config = setup.dir.path().join("wrong.toml");
    std::fs::write(
        &wrong_config,
        config.replace(
            &format!("dir = \"{}\"", real.display()),
            &format!("dir = \"{}\"", wrong.display()),
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(router_bin())
            .arg("--config")
            .arg(&wrong_config)
            .args(args)
            .env("IT_CDC_PASSWORD", "cdc-secret")
            .output()
            .unwrap()
    };
    let out = run(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "status on a wrong dir: {out:?}");
    assert!(
        text.contains(&format!("no checkpoint at {}", wrong.display())),
        "{text}"
    );
    for json in [false, true] {
        let args: &[&str] = if json {
            &["checkpoint", "show", "--json"]
        } else {
            &["checkpoint", "show"]
        };
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?} on a wrong dir: {out:?}"
        );
        assert!(
            err.contains(&format!("no checkpoint at {}", wrong.display())),
            "{err}"
        );
    }
    assert!(
        !wrong.exists(),
        "a read-only command created {}",
        wrong.display()
    );

    let mut router = setup.start_router();
    insert_txn(&mut conn, &db, &[Ev::new("busy-1", "Order", "a", "{}")]).await;
    assert_eq!(
        wait_for_count(&[setup.topic("Order")], 1, Duration::from_secs(60)),
        1
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let show = setup.cli(&["checkpoint", "show"]);
    assert!(
        show.status.success(),
        "checkpoint show on a running router's store: {show:?}"
    );
    assert!(String::from_utf8_lossy(&show.stdout).contains("position: "));
    let status = setup.cli(&["status", "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&status.stdout)
        .unwrap_or_else(|e| panic!("status on a running router's store: {e} {status:?}"));
    assert!(st["checkpoint"].is_string(), "{st}");
    assert!(router.stop(Duration::from_secs(30)).success());
}

/// Every metric docs/monitoring.md documents is on `/metrics`, and every metric there is
/// documented.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_endpoint_matches_the_docs() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("signals_readme").await;
    let db = setup.db.clone();
    setup
        .kafka_properties
        .push(("statistics.interval.ms".into(), "500".into()));
    setup.outbox_toml = "on_invalid = \"dead-letter\"".into();
    let mut router = setup.start_router();
    wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(30)).await;
    insert_txn(&mut conn, &db, &[Ev::new("doc-1", "Order", "a", "{}")]).await;
    assert_eq!(
        wait_for_count(&[setup.topic("Order")], 1, Duration::from_secs(60)),
        1
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let text = metrics_of(setup.monitor_port).await;
    assert!(router.stop(Duration::from_secs(30)).success());

    let exposed: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect();
    let readme = std::fs::read_to_string(repo_root().join("docs/monitoring.md")).unwrap();
    let section = readme
        .split("<!-- metrics -->")
        .nth(1)
        .expect("docs/monitoring.md marks its metrics table with <!-- metrics -->");
    let documented: BTreeSet<String> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(|name| {
            let name = name.split('{').next().unwrap();
            name.strip_suffix("_total").unwrap_or(name).to_string()
        })
        .collect();
    let undocumented: Vec<&String> = exposed.difference(&documented).collect();
    let missing: Vec<&String> = documented.difference(&exposed).collect();
    assert!(
        undocumented.is_empty() && missing.is_empty(),
        "on /metrics but not in docs/monitoring.md: {undocumented:?}; there but not on /metrics: {missing:?}\n{text}"
    );
    // The dashboard, the alert rules and the docs use only metrics that exist.
    let dashboard =
        std::fs::read_to_string(repo_root().join("docker/grafana-dashboard.json")).unwrap();
    let rules = std::fs::read_to_string(repo_root().join("deploy/prometheus/alerts.yml")).unwrap();
    for (what, text) in [
        ("dashboard", dashboard.as_str()),
        ("alert rules", rules.as_str()),
        ("docs/monitoring.md", readme.as_str()),
    ] {
        for used in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if !used.starts_with("outbox_router_") {
                continue;
            }
            let name = used.strip_suffix("_total").unwrap_or(used);
            assert!(
                exposed.contains(name),
                "the {what} uses {used}, which /metrics does not have"
            );
        }
    }
    println!("metrics documented and exposed: {}", documented.len());
}

/// `status` right after a start, while the first observation is not there yet, and after
/// a kill -9: starting, then running, never stopped while the process runs — with the
/// endpoint on (it answers "no observation yet") and off (the store's run lock tells) —
/// and stopped once the process is gone. The start is held 6 s by a failpoint, as a
/// slow source or broker would hold it.
#[tokio::test(flavor = "multi_thread")]
async fn status_tells_starting_from_running_from_stopped() {
    let _settings = SERVER_SETTINGS.read().await;
    for monitor_off in [false, true] {
        let (mut conn, mut setup) = fresh("signals_starting").await;
        setup.monitor_off = monitor_off;
        // The default interval: the first observation must not wait for it.
        setup.monitor_toml = "interval_secs = 10\n".into();
        let db = setup.db.clone();
        let status = |setup: &RouterSetup| {
            let out = setup.cli(&["status", "--json"]);
            let st: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("status --json: {e}: {out:?}"));
            (out.status.code(), st)
        };
        let started = Instant::now();
        let mut router = setup.start_router_with(
            &[(
                "FAILPOINTS",
                "pipeline.before_first_observation=sleep(6000)",
            )],
            &["--init"],
        );
        for (at, expected) in [(500, "starting"), (2_000, "starting"), (12_000, "running")] {
            let at = Duration::from_millis(at);
            tokio::time::sleep(at.saturating_sub(started.elapsed())).await;
            let (code, st) = status(&setup);
            let context = format!("monitor off: {monitor_off}, {at:?} after the start: {st}");
            assert_eq!(st["router"], expected, "{context}\n{}", router.log());
            assert_eq!(code, Some(0), "{context}");
            if expected == "starting" {
                let text = String::from_utf8(setup.cli(&["status"]).stdout).unwrap();
                assert!(
                    text.starts_with("OK: router starting (started ")
                        && text.contains("no observation yet"),
                    "{text}"
                );
            }
        }
        // Streaming, really: an event goes through.
        insert_txn(&mut conn, &db, &[Ev::new("st-1", "Order", "a", "{}")]).await;
        assert_eq!(
            wait_for_count(&[setup.topic("Order")], 1, Duration::from_secs(60)),
            1
        );
        router.kill9();
        let (code, st) = status(&setup);
        assert_eq!(st["router"], "stopped", "after kill -9: {st}");
        assert_eq!(code, Some(1), "a stopped router is a warning: {st}");
    }
}

/// SIGTERM while `run --init` waits on a broker that does not answer (a first start
/// during an outage, or an orchestrator stopping a pod mid-start): honoured within
/// `pipeline.shutdown_timeout_secs`. Before, the marker read, the topic creation and the
/// first-start send ran on to their own minute-long timeouts.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_during_run_init_is_honoured_within_the_shutdown_timeout() {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, mut setup) = fresh("signals_init_term").await;
    setup.delivery(Some(&exactly_once_delivery("signals_init_term", false)));
    // Nothing listens there: every Kafka call waits out its own timeout.
    setup.kafka_bootstrap = "127.0.0.1:9".into();
    setup.pipeline_toml = "shutdown_timeout_secs = 3".into();
    let mut router = setup.start_router_with(&[], &["--init"]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    router.expect_term_within(Duration::from_secs(3 + 3), "during run --init");
}
