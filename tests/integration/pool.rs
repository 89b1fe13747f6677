//! A pool: several sources over several instances, one Kafka group deciding which
//! instance leads which source. Events flow into every source while instances are
//! killed and come back; then each source's topics are counted with a
//! `read_committed` consumer: 0 lost, 0 duplicates, per-key order.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::standby::Writer;
use crate::util::*;

/// The second MariaDB server's port (`scripts/services up rds`).
fn rds_port() -> u16 {
    mariadb_port() + 2
}

/// The group's session timeout: the broker's minimum (group.min.session.timeout.ms).
const SESSION_MS: u64 = 6000;

/// A pool's sources and the files two instances run it from.
pub(crate) struct Pool {
    pub(crate) sources: Vec<RouterSetup>,
    pub(crate) names: Vec<String>,
    dir: tempfile::TempDir,
    /// Extra keys of every instance's [monitor] section.
    pub(crate) monitor_toml: String,
}

impl Pool {
    /// `n` sources, each its own database and outbox, its own transactional id.
    pub(crate) async fn new(name: &str, n: usize) -> Self {
        Self::new_with(name, n, |_| {}).await
    }

    /// `new`, each source's setup changed by `shape` before its file is written.
    pub(crate) async fn new_with(name: &str, n: usize, shape: impl Fn(&mut RouterSetup)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sources.d")).unwrap();
        let (mut sources, mut names) = (Vec::new(), Vec::new());
        // Every other source on a second, independent MariaDB server.
        services("up", "rds");
        for i in 0..n {
            let source = format!("{name}{i}");
            let port = if i % 2 == 1 {
                rds_port()
            } else {
                mariadb_port()
            };
            let (db, server_id) = unique(&source);
            let mut conn = app_conn_at(port).await;
            outbox_db(&mut conn, &db).await;
            let mut setup = RouterSetup::new(&db, server_id, binlog_position(&mut conn).await);
            setup.source_port = port;
            setup.flush_interval_ms = 20;
            setup.extra_toml = format!("[delivery]\n{}\n", exactly_once_delivery(&source, true));
            shape(&mut setup);
            // The pool file's sections, and each instance's own store under its state_dir.
            let mut table: toml::Table =
                toml::from_str(&std::fs::read_to_string(setup.config_path()).unwrap()).unwrap();
            table.remove("kafka");
            table.remove("monitor");
            table["checkpoint"].as_table_mut().unwrap().remove("dir");
            std::fs::write(
                dir.path().join(format!("sources.d/{source}.toml")),
                toml::to_string(&table).unwrap(),
            )
            .unwrap();
            sources.push(setup);
            names.push(source);
        }
        Self {
            sources,
            names,
            dir,
            monitor_toml: String::new(),
        }
    }

    /// The pool file of instance `instance`, its endpoint on `port`.
    pub(crate) fn file(&self, instance: &str, port: u16) -> PathBuf {
        let path = self.dir.path().join(format!("pool-{instance}.toml"));
        let pid = std::process::id();
        let text = format!(
            "[pool]\nsources_dir = \"sources.d\"\nstate_dir = \"{state}\"\ngroup_id = \"it-pool-{pid}-{first}\"\n\
             lock_topic_prefix = \"it.pool.{pid}.\"\nsession_timeout_ms = {SESSION_MS}\ninstance = \"{instance}\"\nwatch_secs = 2\n\
             [kafka]\nbootstrap_servers = \"{bootstrap}\"\n\
             [monitor]\nlisten = \"127.0.0.1:{port}\"\ninterval_secs = 1\ndetect_hours = 0.25\nrepair_hours = 0.25\n\
             status_topic = \"it.pool.{pid}.{first}.status\"\ncontrol_topic = \"it.pool.{pid}.{first}.control\"\n{monitor_extra}",
            state = self.dir.path().join(format!("state-{instance}")).display(),
            first = self.names[0],
            bootstrap = kafka_bootstrap(),
            monitor_extra = self.monitor_toml,
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    pub(crate) fn start(&self, instance: &str, port: u16, args: &[&str]) -> RouterProcess {
        self.start_file(instance, &self.file(instance, port), args, &[])
    }

    /// Instance `instance` from `file`, with `run`'s `args` and extra environment.
    pub(crate) fn start_file(
        &self,
        instance: &str,
        file: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> RouterProcess {
        static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = self.dir.path().join(format!("{instance}-{run}.log"));
        let child = std::process::Command::new(router_bin())
            .arg("--config")
            .arg(file)
            .arg("run")
            .args(args)
            .env("IT_CDC_PASSWORD", "cdc-secret")
            .envs(env.iter().copied())
            .env(
                "OUTBOX_ROUTER_LOG",
                "info,outbox_router=debug,rdkafka=warn,outbox_router::pipeline::ack=info",
            )
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        RouterProcess::adopt(child, log)
    }

    /// An operator's command for source `name`, with instance `instance`'s pool file
    /// (its endpoint on `port`).
    pub(crate) fn cli(
        &self,
        instance: &str,
        port: u16,
        name: &str,
        args: &[&str],
    ) -> std::process::Output {
        std::process::Command::new(router_bin())
            .arg("--config")
            .arg(self.file(instance, port))
            .args(["--source", name])
            .args(args)
            .env("IT_CDC_PASSWORD", "cdc-secret")
            .output()
            .unwrap()
    }

    /// Source `i`'s file in the sources directory.
    fn source_file(&self, i: usize) -> PathBuf {
        self.dir
            .path()
            .join(format!("sources.d/{}.toml", self.names[i]))
    }

    /// Where source `i`'s file is put aside, out of the sources directory.
    fn aside(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("{}.toml", self.names[i]))
    }

    pub(crate) fn writer(&self, i: usize) -> Writer {
        Writer::start_at(self.sources[i].source_port, &self.sources[i].db)
    }

    pub(crate) fn topics(&self, i: usize) -> Vec<String> {
        TYPES.iter().map(|t| self.sources[i].topic(t)).collect()
    }
}

/// The sources instance at `port` streams (leader and connected), by `/metrics`.
pub(crate) async fn streaming_sources(port: u16) -> Option<Vec<String>> {
    let (code, body) = tokio::time::timeout(Duration::from_secs(2), try_http_get(port, "/metrics"))
        .await
        .ok()??;
    if code != 200 {
        return None;
    }
    let value = |metric: &str, line: &str| -> Option<(String, f64)> {
        let rest = line.strip_prefix(metric)?.strip_prefix("{")?;
        let source = rest.split("source=\"").nth(1)?.split('"').next()?;
        Some((source.to_string(), rest.rsplit(' ').next()?.parse().ok()?))
    };
    let on = |metric: &str| -> Vec<String> {
        body.lines()
            .filter_map(|l| value(metric, l))
            .filter(|(_, v)| *v == 1.0)
            .map(|(s, _)| s)
            .collect()
    };
    let connected = on("outbox_router_connected");
    Some(
        on("outbox_router_leader")
            .into_iter()
            .filter(|s| connected.contains(s))
            .collect(),
    )
}

/// Each source's last takeover (lock assigned → binlog stream connected), in ms, from
/// the instance on `ports` that leads it.
async fn takeover_ms(ports: &[u16]) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for port in ports {
        let led = streaming_sources(*port).await.unwrap_or_default();
        let body = try_http_get(*port, "/metrics")
            .await
            .map(|(_, b)| b)
            .unwrap_or_default();
        for line in body
            .lines()
            .filter(|l| l.starts_with("outbox_router_takeover_seconds{"))
        {
            let Some(source) = line
                .split("source=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
            else {
                continue;
            };
            let secs: f64 = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            if led.iter().any(|s| s == source) {
                out.push((source.to_string(), (secs * 1000.0) as u64));
            }
        }
    }
    out.sort();
    out
}

/// Waits until the instances on `ports` stream every source between them, each source
/// on exactly one, no instance more than one source above another; returns how long
/// it took and who streams what.
pub(crate) async fn wait_balanced(
    ports: &[u16],
    sources: usize,
    timeout: Duration,
    logs: &[&RouterProcess],
) -> (Duration, Vec<Vec<String>>) {
    let started = Instant::now();
    loop {
        let mut each = Vec::new();
        for port in ports {
            each.push(streaming_sources(*port).await.unwrap_or_default());
        }
        let total: usize = each.iter().map(Vec::len).sum();
        let mut all: Vec<&String> = each.iter().flatten().collect();
        all.sort();
        all.dedup();
        let (min, max) = (
            each.iter().map(Vec::len).min().unwrap_or(0),
            each.iter().map(Vec::len).max().unwrap_or(0),
        );
        if total == sources && all.len() == sources && max - min <= 1 {
            return (started.elapsed(), each);
        }
        if started.elapsed() > timeout {
            let logs: Vec<String> = logs.iter().map(|p| p.log()).collect();
            panic!(
                "not balanced within {timeout:?}: {each:?}\n{}",
                logs.join("\n======\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Stops the writers, waits for every event, stops the instances, and counts each
/// source's topics: 0 lost, 0 duplicates, per-key order.
pub(crate) async fn finish(
    pool: &Pool,
    writers: Vec<Writer>,
    instances: &mut [&mut RouterProcess],
) {
    finish_sources(pool, writers.into_iter().enumerate().collect(), instances).await
}

/// `finish` for the sources whose writers are given (by index).
async fn finish_sources(
    pool: &Pool,
    writers: Vec<(usize, Writer)>,
    instances: &mut [&mut RouterProcess],
) {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut totals = Vec::new();
    for (i, w) in writers {
        totals.push((i, w.stop().await));
    }
    let logs = |instances: &[&mut RouterProcess]| {
        let logs: Vec<String> = instances.iter().map(|p| p.log()).collect();
        logs.join("\n======\n")
    };
    for (i, total) in &totals {
        let i = *i;
        let seen = wait_for_count(&pool.topics(i), *total as i64, Duration::from_secs(120));
        assert!(
            seen >= *total as i64,
            "source {}: {seen} of {total}:\n{}",
            pool.names[i],
            logs(instances)
        );
    }
    for p in instances.iter_mut() {
        let status = p.stop(Duration::from_secs(60));
        assert!(status.success(), "{status}:\n{}", p.log());
    }
    for (i, total) in &totals {
        let i = *i;
        let duplicates = check_stream(&pool.topics(i), *total);
        println!(
            "pool source {}: events={total} lost=0 duplicates={duplicates}",
            pool.names[i]
        );
        assert_eq!(
            duplicates, 0,
            "source {}: read_committed duplicates",
            pool.names[i]
        );
    }
    let log = logs(instances);
    assert!(!log.contains("cdc-secret"), "a secret in the log");
}

/// Starts instance `a` (with `--init`, the sources' first start) until it streams every
/// source, then `b` until the two are balanced, events flowing into every source.
async fn two_balanced(
    pool: &Pool,
    pa: u16,
    pb: u16,
) -> (RouterProcess, RouterProcess, Vec<Writer>) {
    let n = pool.sources.len();
    let a = pool.start("a", pa, &["--init"]);
    let (took, _) = wait_balanced(&[pa], n, Duration::from_secs(90), &[&a]).await;
    println!(
        "pool: one instance streams all {n} sources {} ms after launch",
        took.as_millis()
    );
    let writers: Vec<Writer> = (0..pool.sources.len()).map(|i| pool.writer(i)).collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let b = pool.start("b", pb, &[]);
    let (took, each) = wait_balanced(&[pa, pb], n, Duration::from_secs(90), &[&a, &b]).await;
    println!(
        "pool: a second instance joined, balanced in {} ms: {each:?}",
        took.as_millis()
    );
    assert_eq!(each[1].len(), n / 2, "{each:?}");
    (a, b, writers)
}

/// Six sources on two MariaDB servers and three instances: the first leads all six;
/// a second and a third joining take their shares; the first killed -9, then back; the
/// third leaving (SIGTERM) hands its sources over drained. Balanced within one source
/// after each change; every source's events counted at the end: 0 lost, 0 duplicates.
#[tokio::test(flavor = "multi_thread")]
async fn sources_are_balanced_and_moved_without_loss_or_duplicates() {
    let _settings = SERVER_SETTINGS.read().await;
    const SOURCES: usize = 6;
    let pool = Pool::new("pool", SOURCES).await;
    let (pa, pb, pc) = (monitor_port(), monitor_port(), monitor_port());
    let (mut a, mut b, writers) = two_balanced(&pool, pa, pb).await;

    // `status --source` with the pool file: the source's own status.
    let out = pool.cli("a", pa, &pool.names[0], &["status", "--json"]);
    let st: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert!(st["checkpoint"].is_string(), "{st}");

    let mut c = pool.start("c", pc, &[]);
    let (took, each) = wait_balanced(
        &[pa, pb, pc],
        SOURCES,
        Duration::from_secs(90),
        &[&a, &b, &c],
    )
    .await;
    println!(
        "pool: a third instance joined, balanced in {} ms: {each:?}",
        took.as_millis()
    );

    tokio::time::sleep(Duration::from_secs(2)).await;
    a.kill9();
    let (took, each) = wait_balanced(&[pb, pc], SOURCES, Duration::from_secs(90), &[&b, &c]).await;
    println!(
        "pool: kill -9 of an instance; the other two stream all {SOURCES} sources {} ms later (session timeout {SESSION_MS} ms): {each:?}",
        took.as_millis()
    );
    println!(
        "pool: takeover per source (lock assigned → streaming), ms: {:?}",
        takeover_ms(&[pb, pc]).await
    );

    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut a = pool.start("a", pa, &[]);
    let (took, each) = wait_balanced(
        &[pa, pb, pc],
        SOURCES,
        Duration::from_secs(90),
        &[&a, &b, &c],
    )
    .await;
    println!(
        "pool: the killed instance back, balanced in {} ms: {each:?}",
        took.as_millis()
    );

    tokio::time::sleep(Duration::from_secs(2)).await;
    let left = Instant::now();
    c.signal_term();
    let (took, each) = wait_balanced(&[pa, pb], SOURCES, Duration::from_secs(90), &[&a, &b]).await;
    println!(
        "pool: an instance left (SIGTERM), its sources streaming elsewhere {} ms later: {each:?}",
        took.as_millis()
    );
    let status = c
        .wait(Duration::from_secs(60))
        .expect("the leaving instance stops");
    assert!(status.success(), "{status}:\n{}", c.log());
    println!(
        "pool: the leaving instance exited {} ms after SIGTERM",
        left.elapsed().as_millis()
    );
    finish(&pool, writers, &mut [&mut a, &mut b]).await;
}

/// An instance frozen (SIGSTOP) past the session timeout: the other takes its sources;
/// thawed, its producers are fenced or its leases gone — nothing it held becomes
/// visible — and it stays in the pool, taking its share again.
#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_instance_is_fenced_and_rejoins() {
    let _settings = SERVER_SETTINGS.read().await;
    const SOURCES: usize = 4;
    let pool = Pool::new("poolstop", SOURCES).await;
    let (pa, pb) = (monitor_port(), monitor_port());
    let (mut a, mut b, writers) = two_balanced(&pool, pa, pb).await;
    a.pause();
    let (took, _) = wait_balanced(&[pb], SOURCES, Duration::from_secs(90), &[&b]).await;
    println!(
        "pool: SIGSTOP of an instance; the other streams all {SOURCES} sources {} ms later",
        took.as_millis()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    a.resume();
    let (took, each) = wait_balanced(&[pa, pb], SOURCES, Duration::from_secs(90), &[&a, &b]).await;
    println!(
        "pool: thawed, balanced again in {} ms: {each:?}",
        took.as_millis()
    );
    assert!(
        a.wait(Duration::ZERO).is_none(),
        "the thawed instance exited:\n{}",
        a.log()
    );
    finish(&pool, writers, &mut [&mut a, &mut b]).await;
}

/// One source's database password wrong: that source fails, is retried and says so in
/// `/status`, while the pool's other sources stream; the password fixed, it catches up.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_source_stops_only_itself() {
    let _settings = SERVER_SETTINGS.read().await;
    const SOURCES: usize = 3;
    let pool = Pool::new("poolpw", SOURCES).await;
    let secret = pool.dir.path().join("broken-password");
    std::fs::write(&secret, "not-the-password\n").unwrap();
    let broken = pool
        .dir
        .path()
        .join(format!("sources.d/{}.toml", pool.names[1]));
    let text = std::fs::read_to_string(&broken).unwrap().replace(
        "${env:IT_CDC_PASSWORD}",
        &format!("${{file:{}}}", secret.display()),
    );
    std::fs::write(&broken, text).unwrap();
    let writers: Vec<Writer> = (0..pool.sources.len()).map(|i| pool.writer(i)).collect();
    let pa = monitor_port();
    // The broken source's first start needs its database (its position is fixed when
    // recorded): refused at launch, it is tried again with the source, and recorded
    // once the password is fixed.
    let mut a = pool.start("a", pa, &["--init"]);
    let healthy = [pool.names[0].clone(), pool.names[2].clone()];
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let streaming = streaming_sources(pa).await.unwrap_or_default();
        if healthy.iter().all(|h| streaming.contains(h)) {
            assert!(!streaming.contains(&pool.names[1]), "{streaming:?}");
            break;
        }
        assert!(Instant::now() < deadline, "{streaming:?}:\n{}", a.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (code, status) = http_get(pa, &format!("/sources/{}/status", pool.names[1])).await;
    println!("pool: the failing source's /status ({code}): {status}");
    let log = a.log();
    assert!(
        log.contains(&format!("source={}", pool.names[1])) && log.contains("Access denied"),
        "the failing source must be named with its error:\n{log}"
    );
    assert!(!log.contains("not-the-password"), "a secret in the log");
    tokio::time::sleep(Duration::from_secs(2)).await;
    std::fs::write(&secret, "cdc-secret\n").unwrap();
    let (took, _) = wait_balanced(&[pa], SOURCES, Duration::from_secs(90), &[&a]).await;
    println!(
        "pool: the password fixed, the source streams {} ms later",
        took.as_millis()
    );
    finish(&pool, writers, &mut [&mut a]).await;
}

/// Sources added and removed while the pool runs: a source file put in the directory
/// joins after its first start is recorded (`checkpoint init --source`) and SIGHUP; a
/// file taken away leaves at the next read of the directory (`watch_secs`), drained
/// first — every event of it written before counted, nothing twice.
#[tokio::test(flavor = "multi_thread")]
async fn sources_are_added_and_removed_without_a_restart() {
    let _settings = SERVER_SETTINGS.read().await;
    let pool = Pool::new("poolhup", 3).await;
    let (file, aside) = (|i| pool.source_file(i), |i| pool.aside(i));
    std::fs::rename(file(2), aside(2)).unwrap();
    let (pa, pb) = (monitor_port(), monitor_port());
    let mut a = pool.start("a", pa, &["--init"]);
    let mut b = pool.start("b", pb, &[]);
    wait_balanced(&[pa, pb], 2, Duration::from_secs(90), &[&a, &b]).await;
    let mut writers: Vec<(usize, Writer)> = (0..3).map(|i| (i, pool.writer(i))).collect();
    tokio::time::sleep(Duration::from_secs(2)).await;

    std::fs::rename(aside(2), file(2)).unwrap();
    let init = pool.cli("a", pa, &pool.names[2], &["checkpoint", "init"]);
    assert!(init.status.success(), "{init:?}");
    let added = Instant::now();
    a.signal_hup();
    b.signal_hup();
    let (took, each) = wait_balanced(&[pa, pb], 3, Duration::from_secs(90), &[&a, &b]).await;
    println!(
        "pool: a source added (SIGHUP), streaming and balanced {} ms later: {each:?}",
        took.as_millis()
    );
    assert!(added.elapsed() < Duration::from_secs(30));

    // Removed: its writer stops, and the file goes; no signal, the watch sees it.
    let (_, w0) = writers.remove(0);
    let total0 = w0.stop().await;
    let seen = wait_for_count(&pool.topics(0), total0 as i64, Duration::from_secs(120));
    assert!(seen >= total0 as i64, "source 0: {seen} of {total0}");
    std::fs::rename(file(0), aside(0)).unwrap();
    let removed = Instant::now();
    let (took, each) = loop {
        let (took, each) = wait_balanced(&[pa, pb], 2, Duration::from_secs(90), &[&a, &b]).await;
        let metrics = [
            http_get(pa, "/metrics").await.1,
            http_get(pb, "/metrics").await.1,
        ];
        let shown = metrics
            .iter()
            .any(|m| m.contains(&format!("source=\"{}\"", pool.names[0])));
        if !shown {
            break (took, each);
        }
        assert!(
            removed.elapsed() < Duration::from_secs(60),
            "source 0 still shown"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!(
        "pool: a source removed (watched directory), gone {} ms later; the rest: {each:?} ({} ms)",
        removed.elapsed().as_millis(),
        took.as_millis()
    );
    let duplicates = check_stream(&pool.topics(0), total0);
    assert_eq!(
        duplicates, 0,
        "the removed source: read_committed duplicates"
    );
    finish_sources(&pool, writers, &mut [&mut a, &mut b]).await;
}

/// A reload whose new subscription the group refuses (a coordinator out of reach, here
/// a failpoint refusing 30 times) leaves no source unled: a changed source restarts
/// where its lock still is and keeps delivering while the refusals last, an added one
/// is shown failed and joins at a later reload. Before, the changed source stayed
/// stopped on the instance that still owned its lock partition, so no instance led it.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_resubscription_leaves_no_source_unled() {
    let _settings = SERVER_SETTINGS.read().await;
    let pool = Pool::new("poolsub", 3).await;
    let (file, aside) = (|i| pool.source_file(i), pool.aside(2));
    std::fs::rename(file(2), &aside).unwrap();
    let (pa, pb) = (monitor_port(), monitor_port());
    let refused = [("FAILPOINTS", "lock.resubscribe_refused=30*return")];
    let mut a = pool.start_file("a", &pool.file("a", pa), &["--init"], &refused);
    let mut b = pool.start_file("b", &pool.file("b", pb), &[], &refused);
    wait_balanced(&[pa, pb], 2, Duration::from_secs(90), &[&a, &b]).await;
    let writers: Vec<(usize, Writer)> = (0..3).map(|i| (i, pool.writer(i))).collect();
    tokio::time::sleep(Duration::from_secs(2)).await;

    // A ConfigMap edit: source 0 changed (a setting, so it restarts), source 2 added.
    let mut changed: toml::Table =
        toml::from_str(&std::fs::read_to_string(file(0)).unwrap()).unwrap();
    changed["pipeline"]
        .as_table_mut()
        .unwrap()
        .insert("shutdown_timeout_secs".into(), 21.into());
    std::fs::write(file(0), toml::to_string(&changed).unwrap()).unwrap();
    std::fs::rename(&aside, file(2)).unwrap();
    let init = pool.cli("a", pa, &pool.names[2], &["checkpoint", "init"]);
    assert!(init.status.success(), "{init:?}");
    a.signal_hup();
    b.signal_hup();

    // While the group refuses (30 refusals, at one reload every 2 s per instance): the
    // added source is failed on both instances, the changed one is led again within
    // 20 s and delivers on (a takeover on a loaded CI machine has taken over 10 s).
    let deadline = Instant::now() + Duration::from_secs(30);
    for port in [pa, pb] {
        while source_failed(port, &pool.names[2]).await != Some(1.0) {
            assert!(
                Instant::now() < deadline,
                "{} not shown failed on {port}:\n{}\n=====\n{}",
                pool.names[2],
                a.log(),
                b.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let refusing = Instant::now();
    let log = format!("{}\n{}", a.log(), b.log());
    assert!(
        log.contains("cannot subscribe to its lock topic yet"),
        "no refusal logged:\n{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("pool reload: stopping the source")
                && l.contains(&format!("source={}", pool.names[0]))
                && l.contains("restarted=true")),
        "the change of source 0 was not seen:\n{log}"
    );
    wait_led_within(
        &[pa, pb],
        &pool.names[..2],
        &[&a, &b],
        Duration::from_secs(20),
    )
    .await;
    // Delivering: 500 more of its events within 20 s (the whole backlog can take longer
    // on a loaded machine; every event is counted at the end).
    let before = wait_for_ids(&pool.topics(0), 0, Duration::ZERO);
    let seen = wait_for_ids(&pool.topics(0), before + 500, Duration::from_secs(20));
    let during = refusing.elapsed();
    assert!(
        seen >= before + 500,
        "the changed source delivered {} events in 20 s during the refusals:\n{}\n=====\n{}",
        seen - before.min(seen),
        a.log(),
        b.log()
    );
    // Still within the refusals, or the count above proves nothing about them.
    for port in [pa, pb] {
        let led = streaming_sources(port).await.unwrap_or_default();
        assert!(
            !led.contains(&pool.names[2]),
            "the refusals ended before the changed source's count ({} ms): lengthen them",
            during.as_millis()
        );
    }
    println!(
        "pool: resubscription refused; the changed source delivered on, {} ms into the refusals",
        during.as_millis()
    );

    // The refusals run out: the added source joins at a later reload.
    let (took, each) = wait_balanced(&[pa, pb], 3, Duration::from_secs(90), &[&a, &b]).await;
    println!(
        "pool: the added source led {} ms after the refusals were seen: {each:?}",
        took.as_millis()
    );
    finish_sources(&pool, writers, &mut [&mut a, &mut b]).await;
}

/// Waits until each of `names` streams on exactly one of the instances on `ports`.
pub(crate) async fn wait_led(ports: &[u16], names: &[String], logs: &[&RouterProcess]) {
    wait_led_within(ports, names, logs, Duration::from_secs(90)).await
}

/// `wait_led`, failing after `timeout`.
async fn wait_led_within(
    ports: &[u16],
    names: &[String],
    logs: &[&RouterProcess],
    timeout: Duration,
) {
    let deadline = Instant::now() + timeout;
    loop {
        let mut led = Vec::new();
        for port in ports {
            led.extend(streaming_sources(*port).await.unwrap_or_default());
        }
        if names
            .iter()
            .all(|n| led.iter().filter(|l| *l == n).count() == 1)
        {
            return;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = logs.iter().map(|p| p.log()).collect();
            panic!("{names:?} not led: {led:?}\n{}", logs.join("\n======\n"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `outbox_router_source_failed` of `source` on the instance at `port`.
async fn source_failed(port: u16, source: &str) -> Option<f64> {
    let (_, body) = try_http_get(port, "/metrics").await?;
    body.lines().find_map(|l| {
        l.strip_prefix("outbox_router_source_failed{")
            .filter(|rest| rest.contains(&format!("source=\"{source}\"")))
            .and_then(|rest| rest.rsplit(' ').next()?.parse().ok())
    })
}

/// A source's own trouble at start is that source's: a file that does not parse (a
/// typo beside an inline secret), a lock topic the broker refuses (`x.eu` and `x_eu`
/// collide), a first start refused (its marker deleted), a database that is not there.
/// Before, any of them made every instance exit at its next start ("config file … is
/// invalid"): every source of the pool stopped. Now a restarted instance leads the
/// healthy sources, each broken one is named in the log, `/status` and
/// `outbox_router_source_failed`, the secret nowhere, and nothing is lost.
#[tokio::test(flavor = "multi_thread")]
async fn one_sources_trouble_at_start_stops_only_that_source() {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let _settings = SERVER_SETTINGS.read().await;
    let pool = Pool::new("poolbad", 2).await;
    let (pa, pb) = (monitor_port(), monitor_port());
    let mut a = pool.start("a", pa, &["--init"]);
    let mut b = pool.start("b", pb, &["--init"]);
    wait_led(&[pa, pb], &pool.names, &[&a, &b]).await;
    let writers: Vec<Writer> = (0..pool.sources.len()).map(|i| pool.writer(i)).collect();

    // The broken sources, as a ConfigMap edit would bring them.
    let dir = pool.dir.path().join("sources.d");
    let healthy = std::fs::read_to_string(dir.join(format!("{}.toml", pool.names[0]))).unwrap();
    let pid = std::process::id();
    let variant = |name: &str, server_id: u32| {
        let txid = format!("it-{name}-{pid}");
        let text = healthy
            .lines()
            .map(|l| match l.split(" = ").next() {
                Some("transactional_id") => format!("transactional_id = \"{txid}\""),
                Some("checkpoint_topic") => {
                    format!("checkpoint_topic = \"it.checkpoints.{name}.{pid}\"")
                }
                Some("server_id") => format!("server_id = {server_id}"),
                // A database that is not there: it never streams another's outbox.
                Some("tables") => format!("tables = [\"nodb_{pid}.outbox\"]"),
                _ => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(dir.join(format!("{name}.toml")), text).unwrap();
        (txid, format!("it.checkpoints.{name}.{pid}"))
    };
    std::fs::write(
        dir.join("typo.toml"),
        "[source]\nhost = \"127.0.0.1\"\npassword = \"canary-pw-7431\n",
    )
    .unwrap();
    let base = unique("poolbad-x").1;
    variant("x.eu", base);
    variant("x_eu", base + 1);
    // A first start that must be refused: the source's marker was deleted (tombstone).
    let (dead_txid, dead_topic) = variant("xdead", base + 2);
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .unwrap();
    admin
        .create_topics(
            &[NewTopic::new(&dead_topic, 1, TopicReplication::Fixed(1))
                .set("cleanup.policy", "compact")],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .unwrap();
    producer
        .send(
            FutureRecord::<str, [u8]>::to(&dead_topic)
                .partition(0)
                .key(&dead_txid),
            Duration::from_secs(10),
        )
        .await
        .unwrap();

    // A rolling update: a restarts with the chart's command, then b.
    for (who, port, name) in [(&mut a, pa, "a"), (&mut b, pb, "b")] {
        let status = who.stop(Duration::from_secs(60));
        assert!(status.success(), "{status}:\n{}", who.log());
        *who = pool.start(name, port, &["--init"]);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            who.wait(Duration::ZERO).is_none(),
            "{name} exited:\n{}",
            who.log()
        );
    }
    wait_led(&[pa, pb], &pool.names, &[&a, &b]).await;
    // Each broken source named, on the instance that found it broken.
    let deadline = Instant::now() + Duration::from_secs(60);
    for broken in ["typo", "x_eu", "xdead", "x.eu"] {
        loop {
            let failed = [
                source_failed(pa, broken).await,
                source_failed(pb, broken).await,
            ];
            if failed.contains(&Some(1.0)) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{broken} not shown failed: {failed:?}\n{}\n=====\n{}",
                a.log(),
                b.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    wait_http_ok(pa, "/health", Duration::from_secs(30)).await;
    wait_http_ok(pb, "/health", Duration::from_secs(30)).await;
    let (_, status) = http_get(pa, "/sources/typo/status").await;
    assert!(
        status.contains("failure") && status.contains("typo.toml"),
        "{status}"
    );
    // Named on whichever instance found its lock topic refused: of `x_eu` and `x.eu`,
    // the one whose lock topic Kafka created second (which one depends on timing).
    loop {
        let mut said = Vec::new();
        for port in [pa, pb] {
            for source in ["x_eu", "x.eu"] {
                let answer = try_http_get(port, &format!("/sources/{source}/status")).await;
                said.push(answer.map(|(_, body)| body).unwrap_or_default());
            }
        }
        if said.iter().any(|s| s.contains("lock topic")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{said:?}\n{}\n=====\n{}",
            a.log(),
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for port in [pa, pb] {
        for path in ["/metrics", "/status", "/health", "/sources/typo/status"] {
            let (_, body) = http_get(port, path).await;
            assert!(!body.contains("canary-pw-7431"), "the secret in {path}");
        }
    }
    for who in [&a, &b] {
        let log = who.log();
        assert!(log.contains("source=typo"), "{log}");
        assert!(
            !log.contains("canary-pw-7431"),
            "the secret in the log:\n{log}"
        );
    }
    finish(&pool, writers, &mut [&mut a, &mut b]).await;
}

/// The fleet contract in a pool: one source led by instance a, its checkpoint topic
/// deleted while the pool is down, rows written meanwhile. Instance b, which never led
/// it, starts first with `--init` (the chart's start): before, it recorded a first start
/// and streamed from `latest`, skipping every row. Now the source fails on b (the lock
/// topic notes where its markers lived), and on a (its store has no marker); the
/// operator's `checkpoint set --source` commits the old leader's position for the
/// fleet, and every row arrives once.
#[tokio::test(flavor = "multi_thread")]
async fn a_source_never_led_here_refuses_a_lost_checkpoint_topic() {
    let _settings = SERVER_SETTINGS.read().await;
    let pool = Pool::new("poolfleet", 1).await;
    let name = pool.names[0].clone();
    let topics = pool.topics(0);
    let db = pool.sources[0].db.clone();
    let (pa, pb) = (monitor_port(), monitor_port());
    let mut a = pool.start("a", pa, &["--init"]);
    wait_led(&[pa], &pool.names, &[&a]).await;
    write_stream(db.clone(), 0, 20, 10, 7).await;
    assert_eq!(
        wait_for_ids(&topics, 200, Duration::from_secs(120)),
        200,
        "{}",
        a.log()
    );
    assert!(a.stop(Duration::from_secs(60)).success());
    let checkpoint_topic = format!("it.checkpoints.{name}.{}", std::process::id());
    crate::fleet::delete_topic(&checkpoint_topic).await;
    write_stream(db.clone(), 20, 20, 10, 7).await;

    let mut b = pool.start("b", pb, &["--init"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while source_failed(pb, &name).await != Some(1.0) {
        assert!(
            Instant::now() < deadline,
            "b: {name} not failed:\n{}",
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(streaming_sources(pb).await.unwrap_or_default().is_empty());
    let (_, status) = http_get(pb, &format!("/sources/{name}/status")).await;
    assert!(status.contains("lock topic"), "{status}");

    // The old leader's position, carried over by the operator for the fleet.
    let cli = |args: &[&str]| pool.cli("a", pa, &name, args);
    let shown: serde_json::Value =
        serde_json::from_slice(&cli(&["checkpoint", "show", "--json"]).stdout).unwrap();
    let position = format!(
        "{}:{}",
        shown["position"]["file"].as_str().unwrap(),
        shown["position"]["offset"]
    );
    let set = cli(&["checkpoint", "set", &position]);
    let said = String::from_utf8_lossy(&set.stdout);
    assert!(
        set.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&set.stderr)
    );
    assert!(said.contains("whole fleet"), "{said}");
    let mut a = pool.start("a", pa, &["--init"]);
    assert_eq!(
        wait_for_ids(&topics, 400, Duration::from_secs(120)),
        400,
        "{}\n=====\n{}",
        a.log(),
        b.log()
    );
    for p in [&mut a, &mut b] {
        assert!(p.stop(Duration::from_secs(60)).success(), "{}", p.log());
    }
    assert_eq!(check_stream(&topics, 400), 0);
}

/// SIGTERM while a pool's `run --init` waits on a broker that does not answer (every
/// source's first-start check at once): honoured within the sources'
/// `pipeline.shutdown_timeout_secs`, as a single router's is.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_during_a_pool_s_init_is_honoured_within_the_shutdown_timeout() {
    let _settings = SERVER_SETTINGS.read().await;
    let pool = Pool::new("pool_init_term", 2).await;
    for name in &pool.names {
        let path = pool.dir.path().join(format!("sources.d/{name}.toml"));
        let mut table: toml::Table =
            toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let pipeline = table
            .entry("pipeline")
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        pipeline
            .as_table_mut()
            .unwrap()
            .insert("shutdown_timeout_secs".into(), 3.into());
        std::fs::write(&path, toml::to_string(&table).unwrap()).unwrap();
    }
    // Nothing listens there: every Kafka call waits out its own timeout.
    let port = monitor_port();
    let file = pool.file("a", port);
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace(&kafka_bootstrap(), "127.0.0.1:9");
    std::fs::write(&file, text).unwrap();
    let mut router = pool.start_file("a", &file, &["--init"], &[]);
    wait_http_ok(port, "/health", Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    router.expect_term_within(Duration::from_secs(3 + 3), "during a pool's run --init");
}
