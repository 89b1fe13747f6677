//! Hot standby (`[ha]`): two instances with the same config, one lock group. Each test
//! writes events while it kills, pauses, cuts or restarts the leader, then counts with a
//! `read_committed` consumer: 0 lost, 0 duplicates, per-key order.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::crash::write_mixed_at;
use crate::util::*;

/// The lock group's session timeout: the broker's minimum (group.min.session.timeout.ms).
const SESSION_MS: u64 = 6000;

/// Two routers, `a` and `b`, on one outbox with one transactional id and lock group.
pub(crate) struct Pair {
    pub a: RouterSetup,
    pub b: RouterSetup,
    pub topics: Vec<String>,
}

pub(crate) async fn pair(name: &str) -> Pair {
    pair_on(name, kafka_bootstrap(), Vec::new()).await
}

/// `pair` on the Kafka listener at `bootstrap` with these client properties.
pub(crate) async fn pair_on(
    name: &str,
    bootstrap: String,
    properties: Vec<(String, String)>,
) -> Pair {
    let (_conn, mut a) = fresh(name).await;
    a.kafka_bootstrap = bootstrap;
    a.kafka_properties = properties;
    let pid = std::process::id();
    let ha = format!(
        "[delivery]\n{}\n\
         [ha]\nenabled = true\nsession_timeout_ms = {SESSION_MS}\nstandby_check_secs = 1\nlock_topic = \"it.lock.{name}.{pid}\"\n",
        exactly_once_delivery(name, true)
    );
    a.flush_interval_ms = 20;
    a.extra_toml = format!("{ha}instance = \"a\"\n");
    let mut b = RouterSetup::new(&a.db, a.server_id, ("x".into(), 4));
    b.start = a.start.clone();
    b.kafka_bootstrap = a.kafka_bootstrap.clone();
    b.kafka_properties = a.kafka_properties.clone();
    b.flush_interval_ms = 20;
    b.extra_toml = format!("{ha}instance = \"b\"\n");
    let topics = TYPES.iter().map(|t| a.topic(t)).collect();
    Pair { a, b, topics }
}

/// Writes events in mixed transactions until stopped; `stop` returns how many.
pub(crate) struct Writer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<usize>,
}

impl Writer {
    pub(crate) fn start(db: &str) -> Self {
        Self::start_at(mariadb_port(), db)
    }

    /// `start` with `per_tick` events every 50 ms rather than 300 (fewer events, when
    /// each one is followed through something slower than Kafka).
    pub(crate) fn start_sized(db: &str, per_tick: usize) -> Self {
        Self::start_with(mariadb_port(), db, per_tick)
    }

    /// `start` on the server at `port`.
    pub(crate) fn start_at(port: u16, db: &str) -> Self {
        Self::start_with(port, db, 300)
    }

    fn start_with(port: u16, db: &str, per_tick: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (db, flag) = (db.to_string(), stop.clone());
        let task = tokio::spawn(async move {
            let mut written = 0;
            while !flag.load(Ordering::Relaxed) {
                write_mixed_at(port, &db, written, written + per_tick, 40).await;
                written += per_tick;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            written
        });
        Self { stop, task }
    }

    pub(crate) async fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// A gauge from the router's `/metrics` (`None` when it does not answer).
pub(crate) async fn gauge(port: u16, name: &str) -> Option<f64> {
    let (code, body) = tokio::time::timeout(Duration::from_secs(2), try_http_get(port, "/metrics"))
        .await
        .ok()??;
    if code != 200 {
        return None;
    }
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// True while the instance answers as the leader with its binlog stream connected.
pub(crate) async fn streams(port: u16) -> bool {
    gauge(port, "outbox_router_leader").await == Some(1.0)
        && gauge(port, "outbox_router_connected").await == Some(1.0)
}

/// Waits until the instance on `port` streams; returns how long it took.
pub(crate) async fn wait_streaming(port: u16, timeout: Duration, who: &RouterProcess) -> Duration {
    let started = Instant::now();
    while !streams(port).await {
        assert!(
            started.elapsed() < timeout,
            "no takeover within {timeout:?}:\n{}",
            who.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed()
}

/// An old leader that lost the lock while it could not see it (paused, cut from Kafka)
/// either exits naming the fence, when its next commit meets the new leader's epoch
/// first, or steps down to standby, when it sees the lock gone first; both are safe.
/// Never does it keep leading: panics after 120 s of neither.
async fn fenced_or_standby_again(old: &mut RouterProcess, port: u16) -> &'static str {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = old.wait(Duration::from_millis(200)) {
            let log = old.log();
            assert!(!status.success(), "{status}:\n{log}");
            // The final line, not only librdkafka's lines above it (it blamed `PurgeQueue`).
            let last = log
                .lines()
                .rev()
                .find(|l| l.starts_with("outbox-router: error:"))
                .unwrap_or_default();
            assert!(
                last.contains("this router was fenced: another producer with transactional.id"),
                "the exit must name the fence:\n{log}"
            );
            return "was fenced and exited";
        }
        if gauge(port, "outbox_router_leader").await == Some(0.0) {
            return "is a standby again";
        }
        assert!(
            Instant::now() < deadline,
            "the old leader neither stopped nor stepped down:\n{}",
            old.log()
        );
    }
}

/// Waits until the instance on `port` is a standby that could take over (`/ready` 200).
pub(crate) async fn wait_standby_ready(port: u16, who: &RouterProcess) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let standby = gauge(port, "outbox_router_leader").await == Some(0.0)
            && gauge(port, "outbox_router_standby_ready").await == Some(1.0);
        let ready = try_http_get(port, "/ready")
            .await
            .is_some_and(|(code, _)| code == 200);
        if standby && ready {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no ready standby:\n{}",
            who.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts `a` (leader) and `b` (standby) with events flowing.
pub(crate) async fn leader_and_standby(p: &Pair) -> (RouterProcess, RouterProcess, Writer) {
    let a = p.a.start_router();
    wait_streaming(p.a.monitor_port, Duration::from_secs(60), &a).await;
    let b = p.b.start_router();
    wait_standby_ready(p.b.monitor_port, &b).await;
    // A healthy standby is neither stopped nor a start that never ends.
    let out = p.b.cli(&["status", "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["router"], "standby", "{st}");
    assert_eq!(out.status.code(), Some(0), "{st}");
    let writer = Writer::start(&p.a.db);
    tokio::time::sleep(Duration::from_secs(3)).await;
    (a, b, writer)
}

/// Stops the writer, lets `leader` deliver everything, and counts.
pub(crate) async fn finish(p: &Pair, leader: &mut RouterProcess, writer: Writer, scenario: &str) {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let total = writer.stop().await;
    drain_and_stop(leader, &p.topics, total);
    let duplicates = check_stream(&p.topics, total);
    println!("standby {scenario}: events={total} lost=0 duplicates={duplicates}");
    if duplicates > 0 {
        for dir in [p.a.dir.path(), p.b.dir.path()] {
            for e in std::fs::read_dir(dir).unwrap().flatten() {
                if e.file_name().to_string_lossy().starts_with("router-") {
                    let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                    let keep: Vec<&str> = text
                        .lines()
                        .filter(|l| !l.contains("Kafka transaction committed"))
                        .collect();
                    println!("== {}:\n{}", e.path().display(), keep.join("\n"));
                }
            }
        }
    }
    assert_eq!(duplicates, 0, "{scenario}: read_committed duplicates");
}

#[tokio::test(flavor = "multi_thread")]
async fn standby_takes_over_after_kill9() {
    let _settings = SERVER_SETTINGS.read().await;
    kill9_takeover(pair("ha_kill").await, "kill -9").await;
}

/// The exactly-once + standby shape on the SASL_SSL listener (SCRAM-SHA-512, the
/// password from the environment): the lock group, the transactional producer and the
/// commit-marker reader all authenticate; the takeover loses and repeats nothing.
#[tokio::test(flavor = "multi_thread")]
async fn standby_takes_over_after_kill9_over_sasl_ssl() {
    let _settings = SERVER_SETTINGS.read().await;
    std::env::set_var("IT_HA_SCRAM_PASSWORD", "alice-scram-secret");
    let properties = [
        ("security.protocol", "SASL_SSL"),
        ("ssl.ca.location", &crate::secured_kafka::tls_file("ca.pem")),
        ("sasl.mechanism", "SCRAM-SHA-512"),
        ("sasl.username", "alice"),
        ("sasl.password", "${env:IT_HA_SCRAM_PASSWORD}"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let p = pair_on(
        "ha_kill_sasl",
        crate::secured_kafka::sasl_ssl_bootstrap(),
        properties,
    )
    .await;
    kill9_takeover(p, "kill -9 over SASL_SSL").await;
}

/// Leader `a` killed with SIGKILL mid-stream: `b` takes over and delivers the rest.
async fn kill9_takeover(p: Pair, scenario: &str) {
    let (mut a, mut b, writer) = leader_and_standby(&p).await;
    a.kill9();
    let took = wait_streaming(p.b.monitor_port, Duration::from_secs(90), &b).await;
    if std::env::var_os("IT_HA_LOG").is_some() {
        println!("{}", b.log());
    }
    println!(
        "standby kill -9: streaming {} ms after the leader died (session timeout {SESSION_MS} ms)",
        took.as_millis()
    );
    // Counted by the task that saw the new term connect, a moment after it did.
    let deadline = Instant::now() + Duration::from_secs(5);
    while gauge(p.b.monitor_port, "outbox_router_takeovers_total").await != Some(1.0) {
        assert!(
            Instant::now() < deadline,
            "takeovers_total: {:?}",
            gauge(p.b.monitor_port, "outbox_router_takeovers_total").await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    finish(&p, &mut b, writer, scenario).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn paused_leader_is_fenced_and_nothing_it_buffered_shows() {
    let _settings = SERVER_SETTINGS.read().await;
    let p = pair("ha_pause").await;
    let (mut a, mut b, writer) = leader_and_standby(&p).await;
    a.pause();
    let took = wait_streaming(p.b.monitor_port, Duration::from_secs(90), &b).await;
    println!(
        "standby SIGSTOP: streaming {} ms after the pause",
        took.as_millis()
    );
    // Let the new leader commit a few transactions while the old one is frozen.
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.resume();
    // Fenced either way (b's transactional id took a's epoch): whichever a notices first,
    // the failed commit or the lost lock, decides whether it exits or waits as standby.
    let outcome = fenced_or_standby_again(&mut a, p.a.monitor_port).await;
    println!("standby SIGSTOP: the resumed old leader {outcome}");
    assert!(
        streams(p.b.monitor_port).await,
        "the new leader stopped:\n{}",
        b.log()
    );
    finish(&p, &mut b, writer, "SIGSTOP/SIGCONT").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rolling_restart_under_load() {
    let _settings = SERVER_SETTINGS.read().await;
    let p = pair("ha_rolling").await;
    let (mut a, mut b, writer) = leader_and_standby(&p).await;
    // a stops → b leads; a comes back as standby; b stops → a leads; b comes back.
    for (from, to) in [(&p.a, &p.b), (&p.b, &p.a)] {
        let (stopping, taking) = if from.monitor_port == p.a.monitor_port {
            (&mut a, &b)
        } else {
            (&mut b, &a)
        };
        let status = stopping.stop(Duration::from_secs(60));
        assert!(status.success(), "{status}:\n{}", stopping.log());
        let took = wait_streaming(to.monitor_port, Duration::from_secs(60), taking).await;
        println!(
            "standby rolling restart: the standby streamed {} ms after the leader stopped",
            took.as_millis()
        );
        *stopping = from.start_router();
        wait_standby_ready(from.monitor_port, stopping).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    finish(&p, &mut a, writer, "rolling restart").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn leader_cut_from_mariadb_keeps_the_lock_no_split_brain() {
    let _settings = SERVER_SETTINGS.read().await;
    let mut p = pair("ha_cut_db").await;
    let proxy = CutProxy::start(mariadb_port()).await;
    p.a.source_port = proxy.port;
    let (mut a, b, writer) = leader_and_standby(&p).await;
    // Every connection the leader makes to MariaDB is cut for 10 s.
    let until = Instant::now() + Duration::from_secs(10);
    let mut standby_led = false;
    while Instant::now() < until {
        proxy.cut();
        standby_led |= gauge(p.b.monitor_port, "outbox_router_leader").await == Some(1.0);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !standby_led,
        "the standby led while the leader held the lock:\n{}",
        b.log()
    );
    assert_eq!(
        gauge(p.a.monitor_port, "outbox_router_leader").await,
        Some(1.0)
    );
    wait_streaming(p.a.monitor_port, Duration::from_secs(60), &a).await;
    finish(&p, &mut a, writer, "leader cut from MariaDB").await;
}

/// Only the leader loses Kafka (its connections go through a proxy to the broker's
/// proxied listener; the standby's do not): the standby takes over after the session
/// timeout, and the old leader, reconnected, is fenced or finds the lock gone — never
/// two writers.
#[tokio::test(flavor = "multi_thread")]
async fn leader_cut_from_kafka_standby_takes_over() {
    let _settings = SERVER_SETTINGS.read().await;
    let mut p = pair("ha_cut_kafka").await;
    let proxy = CutProxy::start_on(kafka_proxy_front_port(), kafka_proxied_port()).await;
    p.a.kafka_bootstrap = format!("127.0.0.1:{}", proxy.port);
    let (mut a, mut b, writer) = leader_and_standby(&p).await;
    proxy.block();
    let took = wait_streaming(p.b.monitor_port, Duration::from_secs(90), &b).await;
    println!(
        "standby leader cut from Kafka: the standby streamed {} ms after the cut",
        took.as_millis()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.unblock();
    // The old leader, back on Kafka: fenced (exits naming it) or a standby again.
    let outcome = fenced_or_standby_again(&mut a, p.a.monitor_port).await;
    println!("standby leader cut from Kafka: the old leader {outcome}");
    if std::env::var_os("IT_HA_LOG").is_some() {
        println!("OLD LEADER:\n{}\nNEW LEADER:\n{}", a.log(), b.log());
    }
    // Still the leader (its stream may be reconnecting after the old one's last reads).
    wait_streaming(p.b.monitor_port, Duration::from_secs(60), &b).await;
    finish(&p, &mut b, writer, "leader cut from Kafka").await;
}

/// Exactly-once ordered the local store and the commit marker by the wall clock that
/// wrote them. With separate volumes, an instance whose clock ran ahead by more than the
/// other's leadership resumed from its own stale store after each takeover back, and
/// re-published what the other had committed meanwhile: duplicates for `read_committed`
/// consumers. Commit numbers carried in both order them now; `a`'s wall clock (every
/// checkpoint time it writes) runs a day ahead, and leadership moves back and forth
/// `IT_EOS_CYCLES` times.
#[tokio::test(flavor = "multi_thread")]
async fn a_clock_running_ahead_changes_nothing_across_takeovers() {
    let _settings = SERVER_SETTINGS.read().await;
    let p = pair("ha_clock").await;
    let ahead = [("FAILPOINTS", "clock.wall_offset_ms=return(86400000)")];
    let mut a = p.a.start_router_env(&ahead);
    wait_streaming(p.a.monitor_port, Duration::from_secs(60), &a).await;
    let mut b = p.b.start_router();
    wait_standby_ready(p.b.monitor_port, &b).await;
    let writer = Writer::start(&p.a.db);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cycles: usize = std::env::var("IT_EOS_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    for cycle in 0..cycles {
        // a (ahead) stops with its store written "tomorrow"; b leads.
        let status = a.stop(Duration::from_secs(60));
        assert!(status.success(), "{status}:\n{}", a.log());
        wait_streaming(p.b.monitor_port, Duration::from_secs(60), &b).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        a = p.a.start_router_env(&ahead);
        wait_standby_ready(p.a.monitor_port, &a).await;
        // b stops; a takes over and must resume at b's marker, not its own store.
        let status = b.stop(Duration::from_secs(60));
        assert!(status.success(), "{status}:\n{}", b.log());
        wait_streaming(p.a.monitor_port, Duration::from_secs(60), &a).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        b = p.b.start_router();
        wait_standby_ready(p.b.monitor_port, &b).await;
        println!("clock ahead: cycle {} of {cycles} done", cycle + 1);
    }
    finish(&p, &mut a, writer, "a clock a day ahead").await;
    assert!(
        a.log()
            .contains("resuming from the last committed Kafka transaction"),
        "{}",
        a.log()
    );
}

/// The standby shape's first install as the chart runs it: empty volumes, a checkpoint
/// topic and transactional id nobody used, both instances started at once with `run
/// --init`. Both exited 1 ("found no commit marker"), so every pod crash-looped. Now
/// the first start is recorded, both agree on one start position (one leads, the other
/// stands by), and a takeover after kill -9 loses and repeats nothing.
#[tokio::test(flavor = "multi_thread")]
async fn first_install_of_the_standby_shape_with_run_init() {
    let _settings = SERVER_SETTINGS.read().await;
    let p = pair("ha_first").await;
    let mut a = p.a.start_router_with(&[], &["--init"]);
    let mut b = p.b.start_router_with(&[], &["--init"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let a_leads = loop {
        for (who, name) in [(&mut a, "a"), (&mut b, "b")] {
            if let Some(status) = who.wait(Duration::ZERO) {
                panic!("{name} exited on first install: {status}\n{}", who.log());
            }
        }
        if streams(p.a.monitor_port).await {
            break true;
        }
        if streams(p.b.monitor_port).await {
            break false;
        }
        assert!(
            Instant::now() < deadline,
            "nobody leads:\n{}\n{}",
            a.log(),
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (leader, standby, leader_setup, standby_setup) = match a_leads {
        true => (&mut a, &mut b, &p.a, &p.b),
        false => (&mut b, &mut a, &p.b, &p.a),
    };
    wait_standby_ready(standby_setup.monitor_port, standby).await;
    let writer = Writer::start(&p.a.db);
    tokio::time::sleep(Duration::from_secs(3)).await;
    leader.kill9();
    // Its log goes with it when the pod restarts (a new process, a new log file), and it
    // may be the one that recorded the first start.
    let killed_log = leader.log();
    wait_streaming(standby_setup.monitor_port, Duration::from_secs(90), standby).await;
    // The killed pod restarts with the same command.
    *leader = leader_setup.start_router_with(&[], &["--init"]);
    wait_standby_ready(leader_setup.monitor_port, leader).await;
    let logs = format!("{killed_log}\n{}\n{}", a.log(), b.log());
    let recorded = logs.matches("recorded this router's first start").count();
    assert!(recorded >= 1, "{logs}");
    let new_leader = if a_leads { &mut b } else { &mut a };
    finish(&p, new_leader, writer, "first install with run --init").await;
}
