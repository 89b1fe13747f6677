//! Shared helpers: the local MariaDB and Kafka (started by `scripts/services`), a router
//! process per test, and a Kafka reader that counts what arrived.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::RwLock;

/// Tests that change global server settings take this for writing; all others for reading.
pub static SERVER_SETTINGS: RwLock<()> = RwLock::const_new(());

pub fn mariadb_port() -> u16 {
    std::env::var("OUTBOX_MARIADB_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(3307)
}

pub fn kafka_bootstrap() -> String {
    let port = std::env::var("OUTBOX_KAFKA_PORT").unwrap_or_else(|_| "9092".into());
    format!("127.0.0.1:{port}")
}

/// A name unique to this test run, for databases, topics and server ids.
pub fn unique(name: &str) -> (String, u32) {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let n = N.fetch_add(1, Ordering::Relaxed);
    let tag = (nanos / 1000 + std::process::id() * 7 + n * 104_729) % 1_000_000;
    (format!("{name}_{tag}"), 100_000 + tag)
}

/// A monitoring port unique to this test run, below the ephemeral range (32768+) so no
/// outgoing connection can be holding it, never one of the 3-node cluster's
/// (29N92/29N93, up or not), and free when handed out.
pub fn monitor_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 20_000 + ((std::process::id() % 100) * 100 + n) as u16 % 12_000;
        if (29_000..29_400).contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// The local broker's SASL/PLAIN listener (users admin, alice, carol).
/// The shared broker's listener whose metadata points at `kafka_proxy_front_port()`,
/// where a test puts a `CutProxy`.
pub fn kafka_proxied_port() -> u16 {
    kafka_port() + 3
}

/// Where clients of the proxied listener connect (the test's proxy).
pub fn kafka_proxy_front_port() -> u16 {
    kafka_port() + 4
}

fn kafka_port() -> u16 {
    kafka_bootstrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

pub fn kafka_sasl_bootstrap() -> String {
    let port: u16 = kafka_bootstrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse::<u16>()
        .unwrap()
        + 2;
    format!("127.0.0.1:{port}")
}

/// A connection as the `app` user, who may write and change global settings.
pub async fn app_conn() -> Conn {
    app_conn_at(mariadb_port()).await
}

/// An `app` connection to the server on `port` (the primary, or its replica).
pub async fn app_conn_at(port: u16) -> Conn {
    conn_as(port, "app", "app-secret").await
}

/// A connection to the server on `port` as `user` (`app` writes, `cdc` replicates).
pub async fn conn_as(port: u16, user: &str, password: &str) -> Conn {
    let opts = OptsBuilder::default()
        .ip_or_hostname("127.0.0.1")
        .tcp_port(port)
        .user(Some(user))
        .pass(Some(password))
        .prefer_socket(false);
    Conn::new(opts).await.unwrap_or_else(|e| {
        panic!("connect to the local MariaDB on {port} as {user} (is scripts/services up?): {e}")
    })
}

/// The server's current binlog position, `FILE:OFFSET`.
pub async fn binlog_position(conn: &mut Conn) -> (String, u64) {
    let r: mysql_async::Row = conn
        .query_first("SHOW MASTER STATUS")
        .await
        .unwrap()
        .expect("log_bin is on");
    (r.get(0).unwrap(), r.get(1).unwrap())
}

/// A fresh database with an outbox table in the seeds' shape.
pub async fn outbox_db(conn: &mut Conn, db: &str) {
    conn.query_drop(format!("DROP DATABASE IF EXISTS {db}"))
        .await
        .unwrap();
    conn.query_drop(format!("CREATE DATABASE {db}"))
        .await
        .unwrap();
    conn.query_drop(format!(
        "CREATE TABLE {db}.outbox (
            event_id VARCHAR(64) PRIMARY KEY,
            aggregate_type VARCHAR(64) NULL,
            aggregate_id VARCHAR(64) NULL,
            event_type VARCHAR(64) NOT NULL,
            payload LONGTEXT NOT NULL,
            created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
        )"
    ))
    .await
    .unwrap();
}

/// A fresh outbox database and a router setup starting at the current binlog position.
pub async fn fresh(name: &str) -> (Conn, RouterSetup) {
    let (db, server_id) = unique(name);
    let mut conn = app_conn().await;
    outbox_db(&mut conn, &db).await;
    let setup = RouterSetup::new(&db, server_id, binlog_position(&mut conn).await);
    (conn, setup)
}

/// A Kafka cluster the tests read: the local broker (`Kafka::local()`, also behind the
/// free functions below) or another one by its address (the 3-node cluster, a private
/// broker).
#[derive(Clone, Debug)]
pub struct Kafka {
    bootstrap: String,
}

/// `Kafka::local().drain_and_stop(…)`.
pub fn drain_and_stop(router: &mut RouterProcess, topics: &[String], total: usize) -> String {
    Kafka::local().drain_and_stop(router, topics, total)
}

/// `Kafka::local().count(…)`.
pub fn count(topics: &[String]) -> i64 {
    Kafka::local().count(topics)
}

/// `Kafka::local().wait_for_count(…)`.
pub fn wait_for_count(topics: &[String], n: i64, timeout: Duration) -> i64 {
    Kafka::local().wait_for_count(topics, n, timeout)
}

/// `Kafka::local().read_all(…)`.
pub fn read_all(topics: &[String]) -> Vec<Msg> {
    Kafka::local().read_all(topics)
}

impl Kafka {
    /// The single local broker most tests use.
    pub fn local() -> Self {
        Self::at(&kafka_bootstrap())
    }

    /// The cluster at `bootstrap`.
    pub fn at(bootstrap: &str) -> Self {
        Self {
            bootstrap: bootstrap.to_string(),
        }
    }

    /// Waits until the topics hold `total` events, then stops the router gracefully;
    /// returns its log.
    pub fn drain_and_stop(
        &self,
        router: &mut RouterProcess,
        topics: &[String],
        total: usize,
    ) -> String {
        let seen = self.wait_for_count(topics, total as i64, Duration::from_secs(120));
        assert!(
            seen >= total as i64,
            "only {seen} of {total} events arrived:\n{}",
            router.log()
        );
        // Re-sent records count too: wait until `total` distinct event ids are there, or a
        // stop while the router still catches up reads as a loss.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let ids: std::collections::HashSet<String> =
                self.read_all(topics).iter().map(Msg::id).collect();
            if ids.len() >= total || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        std::thread::sleep(Duration::from_secs(1));
        let status = router.stop(Duration::from_secs(30));
        let log = router.log();
        assert!(status.success(), "graceful stop failed ({status}):\n{log}");
        log
    }

    /// Total messages now in the topics (0 for topics that do not exist yet).
    pub fn count(&self, topics: &[String]) -> i64 {
        let c = consumer(&self.bootstrap);
        let mut total = 0;
        for t in topics {
            let Ok(md) = c.fetch_metadata(Some(t), Duration::from_secs(5)) else {
                continue;
            };
            for topic in md.topics() {
                if topic.error().is_some() {
                    continue;
                }
                for p in topic.partitions() {
                    if let Ok((lo, hi)) = c.fetch_watermarks(t, p.id(), Duration::from_secs(5)) {
                        total += hi - lo;
                    }
                }
            }
        }
        total
    }

    /// Waits until the topics hold at least `n` messages; returns the count seen.
    pub fn wait_for_count(&self, topics: &[String], n: i64, timeout: Duration) -> i64 {
        let deadline = Instant::now() + timeout;
        loop {
            let c = self.count(topics);
            if c >= n || Instant::now() > deadline {
                return c;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Every message now in the topics, in offset order per partition.
    pub fn read_all(&self, topics: &[String]) -> Vec<Msg> {
        let c = consumer(&self.bootstrap);
        let mut tpl = TopicPartitionList::new();
        let mut remaining: HashMap<(String, i32), i64> = HashMap::new();
        for t in topics {
            let Ok(md) = c.fetch_metadata(Some(t), Duration::from_secs(5)) else {
                continue;
            };
            for topic in md.topics().iter().filter(|t| t.error().is_none()) {
                for p in topic.partitions() {
                    let (lo, hi) = watermarks(&c, t, p.id());
                    if hi > lo {
                        tpl.add_partition_offset(t, p.id(), Offset::Offset(lo))
                            .unwrap();
                        remaining.insert((t.clone(), p.id()), hi);
                    }
                }
            }
        }
        let mut out = Vec::new();
        if remaining.is_empty() {
            return out;
        }
        c.assign(&tpl).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !remaining.is_empty() && Instant::now() < deadline {
            let Some(m) = c.poll(Duration::from_millis(500)) else {
                continue;
            };
            let m = match m {
                Ok(m) => m,
                Err(rdkafka::error::KafkaError::PartitionEOF(_)) => {
                    let positions = c.position().unwrap();
                    for e in positions.elements() {
                        let key = (e.topic().to_string(), e.partition());
                        if let (Offset::Offset(at), Some(hi)) = (e.offset(), remaining.get(&key)) {
                            if at >= *hi {
                                remaining.remove(&key);
                            }
                        }
                    }
                    continue;
                }
                Err(e) => panic!("kafka read: {e}"),
            };
            let key = (m.topic().to_string(), m.partition());
            let mut headers = HashMap::new();
            if let Some(h) = m.headers() {
                for hd in h.iter() {
                    headers.insert(hd.key.to_string(), hd.value.unwrap_or_default().to_vec());
                }
            }
            out.push(Msg {
                topic: m.topic().to_string(),
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().unwrap_or_default().to_vec(),
                payload: m.payload().map(<[u8]>::to_vec),
                headers,
                timestamp_ms: m.timestamp().to_millis(),
            });
            if remaining.get(&key).is_some_and(|hi| m.offset() + 1 >= *hi) {
                remaining.remove(&key);
            }
        }
        assert!(
            remaining.is_empty(),
            "could not read partitions {remaining:?} to their end"
        );
        out
    }
}

/// One outbox row to insert.
#[derive(Clone, Debug)]
pub struct Ev {
    pub id: String,
    pub agg_type: String,
    pub agg_id: String,
    pub payload: String,
}

impl Ev {
    pub fn new(
        id: impl Into<String>,
        agg_type: &str,
        agg_id: &str,
        payload: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            agg_type: agg_type.into(),
            agg_id: agg_id.into(),
            payload: payload.into(),
        }
    }
}

/// Inserts events in one transaction, as one multi-row INSERT.
pub async fn insert_txn(conn: &mut Conn, db: &str, events: &[Ev]) {
    let mut tx = conn.start_transaction(Default::default()).await.unwrap();
    insert_in(&mut tx, db, events).await;
    tx.commit().await.unwrap();
}

/// Inserts events as one multi-row INSERT into an open transaction.
pub async fn insert_in(tx: &mut mysql_async::Transaction<'_>, db: &str, events: &[Ev]) {
    let placeholders = vec!["(?,?,?,?,?)"; events.len()].join(",");
    let params: Vec<mysql_async::Value> = events
        .iter()
        .flat_map(|e| {
            [
                e.id.clone().into(),
                e.agg_type.clone().into(),
                e.agg_id.clone().into(),
                format!("{}Happened", e.agg_type).into(),
                e.payload.clone().into(),
            ]
        })
        .collect();
    tx.exec_drop(
        format!("INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES {placeholders}"),
        params,
    )
    .await
    .unwrap();
}

/// Adds `extra` to `base`, table by table (a key in both: `extra`'s value).
fn merge(base: &mut toml::Table, extra: toml::Table) {
    for (key, value) in extra {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(inner)), toml::Value::Table(add)) => merge(inner, add),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// Settings of one test's router.
pub struct RouterSetup {
    pub dir: tempfile::TempDir,
    pub db: String,
    pub topic_prefix: String,
    pub server_id: u32,
    pub start: String,
    pub flush_interval_ms: u64,
    pub extra_tables: Vec<String>,
    pub monitor_port: u16,
    /// `[monitor] listen = "off"`: no endpoint (commands then read the store itself).
    pub monitor_off: bool,
    /// Port the router connects to (a proxy in connection-cut tests).
    pub source_port: u16,
    /// librdkafka properties added to the router's producer.
    pub kafka_properties: Vec<(String, String)>,
    /// Extra TOML sections (`[delivery]`, `[ha]`, …) merged into the config.
    pub extra_toml: String,
    /// Extra keys of the [monitor] section.
    pub monitor_toml: String,
    /// Extra keys of the [outbox] section.
    pub outbox_toml: String,
    /// Extra keys of the [outbox.columns] section.
    pub columns_toml: String,
    /// Extra keys of the [source] section.
    pub source_toml: String,
    /// Extra keys of the [pipeline] section.
    pub pipeline_toml: String,
    /// Kafka bootstrap servers for the router.
    pub kafka_bootstrap: String,
}

impl RouterSetup {
    pub fn new(db: &str, server_id: u32, start: (String, u64)) -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            db: db.to_string(),
            topic_prefix: format!("it.{db}"),
            server_id,
            start: format!("{}:{}", start.0, start.1),
            flush_interval_ms: 200,
            extra_tables: Vec::new(),
            monitor_port: monitor_port(),
            monitor_off: false,
            source_port: mariadb_port(),
            kafka_properties: Vec::new(),
            extra_toml: String::new(),
            monitor_toml: String::new(),
            outbox_toml: String::new(),
            columns_toml: String::new(),
            source_toml: String::new(),
            pipeline_toml: String::new(),
            kafka_bootstrap: kafka_bootstrap(),
        }
    }

    /// Appends a `[delivery]` section (TOML keys), when given.
    pub fn delivery(&mut self, delivery: Option<&str>) {
        if let Some(delivery) = delivery {
            self.extra_toml += &format!("[delivery]\n{delivery}\n");
        }
    }

    /// Starts the router at the server's current position (after the test's DDL).
    pub async fn start_here(&mut self, conn: &mut Conn) {
        let (file, offset) = binlog_position(conn).await;
        self.start = format!("{file}:{offset}");
    }

    pub fn topic(&self, agg_type: &str) -> String {
        format!("{}.{agg_type}", self.topic_prefix)
    }

    /// The router's configuration, built as a value and written as TOML; the `*_toml`
    /// fields are merged into their sections.
    pub fn config_path(&self) -> PathBuf {
        let path = self.dir.path().join("router.toml");
        let mut tables = vec![format!("{}.outbox", self.db)];
        tables.extend(self.extra_tables.iter().cloned());
        let mut properties = serde_json::Map::new();
        properties.insert("message.max.bytes".into(), "8000000".into());
        for (k, v) in &self.kafka_properties {
            properties.insert(k.clone(), v.clone().into());
        }
        let listen = if self.monitor_off {
            "off".to_string()
        } else {
            format!("127.0.0.1:{}", self.monitor_port)
        };
        let config = serde_json::json!({
            "source": {
                "host": "127.0.0.1",
                "port": self.source_port,
                "user": "cdc",
                "password_env": "IT_CDC_PASSWORD",
                "server_id": self.server_id,
                "start": self.start,
                "heartbeat_secs": 1,
            },
            "outbox": {
                "tables": tables,
                "columns": {
                    "event_id": "event_id",
                    "aggregate_type": "aggregate_type",
                    "aggregate_id": "aggregate_id",
                    "event_type": "event_type",
                    "payload": "payload",
                },
            },
            "route": { "topic": format!("{}.${{routedByValue}}", self.topic_prefix) },
            "kafka": { "bootstrap_servers": self.kafka_bootstrap, "properties": properties },
            "checkpoint": {
                "dir": self.dir.path().join("checkpoint"),
                "flush_interval_ms": self.flush_interval_ms,
            },
            "pipeline": { "max_in_flight": 5000, "shutdown_timeout_secs": 20 },
            "monitor": { "listen": listen, "interval_secs": 1 },
        });
        let mut config: toml::Table = toml::Value::try_from(config).unwrap().try_into().unwrap();
        for (section, extra) in [
            (&["source"][..], &self.source_toml),
            (&["outbox"], &self.outbox_toml),
            (&["outbox", "columns"], &self.columns_toml),
            (&["pipeline"], &self.pipeline_toml),
            (&["monitor"], &self.monitor_toml),
            (&[], &self.extra_toml),
        ] {
            let extra: toml::Table = toml::from_str(extra)
                .unwrap_or_else(|e| panic!("the test's TOML for [{}]: {e}", section.join(".")));
            let mut at = &mut config;
            for key in section {
                at = at
                    .get_mut(*key)
                    .and_then(toml::Value::as_table_mut)
                    .unwrap();
            }
            merge(at, extra);
        }
        std::fs::write(&path, toml::to_string(&config).unwrap()).unwrap();
        path
    }

    /// Runs a CLI command of the router to completion.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        self.cli_env(args, &[])
    }

    /// `cli` with extra environment variables (secrets the config references).
    pub fn cli_env(&self, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
        Command::new(router_bin())
            .arg("--config")
            .arg(self.config_path())
            .args(args)
            .env("IT_CDC_PASSWORD", "cdc-secret")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }

    /// The stored checkpoint's `FILE:OFFSET`.
    pub fn checkpoint(&self) -> Option<(String, u64)> {
        let out = self.cli(&["checkpoint", "show", "--json"]);
        assert!(
            out.status.success(),
            "checkpoint show failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if v.is_null() {
            return None;
        }
        let p = &v["position"];
        Some((
            p["file"].as_str().unwrap().to_string(),
            p["offset"].as_u64().unwrap(),
        ))
    }

    pub fn start_router(&self) -> RouterProcess {
        self.start_router_env(&[])
    }

    /// Starts the router with extra environment variables (e.g. FAILPOINTS).
    pub fn start_router_env(&self, env: &[(&str, &str)]) -> RouterProcess {
        self.start_router_with(env, &[])
    }

    /// Starts `run` with extra environment variables and flags (e.g. `--shadow --init`).
    pub fn start_router_with(&self, env: &[(&str, &str)], run_args: &[&str]) -> RouterProcess {
        // A first start is explicit, as in production (builds from before `checkpoint
        // init`, under IT_ROUTER_BIN, created the store themselves).
        let older_build = std::env::var_os("IT_ROUTER_BIN").is_some();
        if !run_args.contains(&"--init") && !self.dir.path().join("checkpoint").exists() {
            let init = self.cli_env(&["checkpoint", "init"], env);
            assert!(
                older_build || init.status.success(),
                "checkpoint init: {init:?}"
            );
        }
        static RUNS: AtomicU32 = AtomicU32::new(0);
        let log = self.dir.path().join(format!(
            "router-{}.log",
            RUNS.fetch_add(1, Ordering::Relaxed)
        ));
        let child = Command::new(router_bin())
            .arg("--config")
            .arg(self.config_path())
            .arg("run")
            .args(run_args)
            .envs(env.iter().copied())
            .env("IT_CDC_PASSWORD", "cdc-secret")
            .env(
                "OUTBOX_ROUTER_LOG",
                std::env::var("IT_ROUTER_LOG")
                    .unwrap_or_else(|_| "info,outbox_router=debug,rdkafka=warn".into()),
            )
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        RouterProcess {
            child: Some(child),
            log,
        }
    }
}

/// A running router; killed when dropped.
pub struct RouterProcess {
    child: Option<Child>,
    log: PathBuf,
}

impl RouterProcess {
    /// Manages another child the same way (a router started by hand, a Kafka Connect
    /// worker): its output went to `log`.
    pub fn adopt(child: Child, log: PathBuf) -> Self {
        Self {
            child: Some(child),
            log,
        }
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().unwrap().id().to_string();
        Command::new("kill").args([sig, &pid]).status().unwrap();
    }

    /// SIGTERM, then wait for exit.
    pub fn stop(&mut self, timeout: Duration) -> ExitStatus {
        self.signal("-TERM");
        self.wait(timeout)
            .expect("router did not stop after SIGTERM")
    }

    /// SIGSTOP: the process freezes (heartbeats, timers, sockets) until `resume`.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after `pause`.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill9(&mut self) {
        self.signal("-KILL");
        self.wait(Duration::from_secs(10))
            .expect("router survived SIGKILL");
    }

    /// Waits for the process to exit by itself.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Waits up to 60 s for the router to stop by itself with a failure (`why` says
    /// what should stop it); returns its log.
    pub fn expect_failure(&mut self, why: &str) -> String {
        let status = self
            .wait(Duration::from_secs(60))
            .unwrap_or_else(|| panic!("{why} must stop the router:\n{}", self.log()));
        let log = self.log();
        assert!(!status.success(), "exit status {status}:\n{log}");
        log
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for RouterProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A message as read back from Kafka.
#[derive(Clone, Debug)]
pub struct Msg {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Vec<u8>,
    pub payload: Option<Vec<u8>>,
    pub headers: HashMap<String, Vec<u8>>,
    pub timestamp_ms: Option<i64>,
}

impl Msg {
    pub fn id(&self) -> String {
        String::from_utf8(self.headers.get("id").cloned().unwrap_or_default()).unwrap()
    }
}

fn consumer(bootstrap: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "outbox-router-tests")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        // Transactions end in control records no message has the offset of: the end
        // of a partition is told by EOF and the position, not the last offset.
        .set("enable.partition.eof", "true")
        .set("fetch.message.max.bytes", "16000000")
        .create()
        .unwrap()
}

/// A partition's watermarks, asked again while its leader is not answering yet (a
/// topic the router just created, a loaded machine).
fn watermarks(c: &BaseConsumer, topic: &str, partition: i32) -> (i64, i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match c.fetch_watermarks(topic, partition, Duration::from_secs(5)) {
            Ok(w) => return w,
            Err(e) if Instant::now() < deadline => {
                eprintln!("watermarks of {topic}/{partition}: {e}; asking again");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("watermarks of {topic}/{partition}: {e}"),
        }
    }
}

/// GET on the router's monitoring endpoint: (status code, body).
pub async fn http_get(port: u16, path: &str) -> (u16, String) {
    let resp = reqwest::get(format!("http://127.0.0.1:{port}{path}"))
        .await
        .expect("monitor endpoint answers");
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// `http_get`, or `None` when nothing answers.
pub async fn try_http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let resp = reqwest::get(format!("http://127.0.0.1:{port}{path}"))
        .await
        .ok()?;
    Some((resp.status().as_u16(), resp.text().await.ok()?))
}

/// Waits until the monitoring endpoint answers `path` with 200.
pub async fn wait_http_ok(port: u16, path: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(resp) = reqwest::get(format!("http://127.0.0.1:{port}{path}")).await {
            if resp.status().is_success() {
                return resp.text().await.unwrap();
            }
        }
        assert!(
            Instant::now() < deadline,
            "{path} did not answer 200 within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The router binary under test: this build's, or `IT_ROUTER_BIN` (to show that a test
/// fails on an older build).
pub fn router_bin() -> PathBuf {
    std::env::var_os("IT_ROUTER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_outbox-router")))
}

/// Root of the repository (for scripts/services and .local/).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `scripts/services ACTION SERVICE` and checks it succeeded.
pub fn services(action: &str, service: &str) {
    let status = Command::new(repo_root().join("scripts/services"))
        .args([action, service])
        .status()
        .unwrap();
    assert!(
        status.success(),
        "scripts/services {action} {service} failed"
    );
}

/// `[delivery]` keys of exactly-once mode with a transactional id and a checkpoint
/// topic of the test's own (on a shared one, a router a test killed inside a Kafka
/// transaction holds every other test's marker read back until that transaction times
/// out); `small`: Kafka transactions of at most 500 records / 50 ms, so crashes land
/// inside and between them.
pub fn exactly_once_delivery(name: &str, small: bool) -> String {
    let small = if small {
        "\ncommit_max_records = 500\ncommit_max_ms = 50"
    } else {
        ""
    };
    let pid = std::process::id();
    format!(
        "mode = \"exactly-once\"\ntransactional_id = \"it-{name}-{pid}\"\ncheckpoint_topic = \"it.checkpoints.{name}.{pid}\"{small}"
    )
}

/// A single Kafka broker of the test's own on `port` (state in a temp dir, the shared
/// broker's jars): for tests that stop it or need it brand new without disturbing the
/// broker every other test uses. Stopped when dropped.
pub struct PrivateBroker {
    state: tempfile::TempDir,
    pub port: u16,
}

impl PrivateBroker {
    /// Prepares (does not start) a broker on `port`.
    pub fn new(port: u16) -> Self {
        let state = tempfile::tempdir().unwrap();
        let local = std::env::var("OUTBOX_LOCAL_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| repo_root().join(".local"));
        std::fs::create_dir_all(state.path().join("kafka")).unwrap();
        std::os::unix::fs::symlink(local.join("kafka/libs"), state.path().join("kafka/libs"))
            .unwrap();
        Self { state, port }
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `scripts/services ACTION kafka` for this broker.
    pub fn services(&self, action: &str) {
        let status = Command::new(repo_root().join("scripts/services"))
            .args([action, "kafka"])
            .env("OUTBOX_LOCAL_DIR", self.state.path())
            .env("OUTBOX_KAFKA_PORT", self.port.to_string())
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "private broker {action} failed");
    }

    /// Forgets all topics (the next `up` is a brand-new cluster).
    pub fn wipe(&self) {
        let _ = std::fs::remove_dir_all(self.state.path().join("kafka/data"));
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("scripts/services"))
            .args(["down", "kafka"])
            .env("OUTBOX_LOCAL_DIR", self.state.path())
            .env("OUTBOX_KAFKA_PORT", self.port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// SIGKILLs the local Kafka broker.
pub fn kill_kafka() {
    let local = std::env::var("OUTBOX_LOCAL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join(".local"));
    let pid = std::fs::read_to_string(local.join("kafka/kafka.pid")).expect("kafka pid file");
    let status = Command::new("kill")
        .args(["-9", pid.trim()])
        .status()
        .unwrap();
    assert!(status.success());
    // Wait until it is gone, so `services up` starts a new one.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Command::new("kill")
        .args(["-0", pid.trim()])
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
    {
        assert!(Instant::now() < deadline, "kafka survived SIGKILL");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A TCP proxy (in front of MariaDB, or Kafka's proxied listener) whose connections the
/// test can cut, and which can refuse new ones.
pub struct CutProxy {
    pub port: u16,
    conns: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
    blocked: std::sync::Arc<std::sync::atomic::AtomicBool>,
    accept: tokio::task::JoinHandle<()>,
}

impl CutProxy {
    pub async fn start(target_port: u16) -> Self {
        Self::start_on(0, target_port).await
    }

    /// A proxy listening on `port` (0: any free port).
    pub async fn start_on(port: u16, target_port: u16) -> Self {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let conns: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>> =
            Default::default();
        let blocked: std::sync::Arc<std::sync::atomic::AtomicBool> = Default::default();
        let registry = conns.clone();
        let refuse = blocked.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if refuse.load(Ordering::Relaxed) {
                    drop(client);
                    continue;
                }
                let task = tokio::spawn(async move {
                    if let Ok(mut server) =
                        tokio::net::TcpStream::connect(("127.0.0.1", target_port)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                registry.lock().unwrap().push(task.abort_handle());
            }
        });
        Self {
            port,
            conns,
            blocked,
            accept,
        }
    }

    /// Cuts every connection and refuses new ones until `unblock`.
    pub fn block(&self) {
        self.blocked.store(true, Ordering::Relaxed);
        self.cut();
    }

    /// Accepts connections again.
    pub fn unblock(&self) {
        self.blocked.store(false, Ordering::Relaxed);
    }

    /// Waits until at least one proxied connection is open (the router reconnected).
    pub async fn wait_live(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.live() == 0 {
            assert!(
                Instant::now() < deadline,
                "no connection through the proxy within {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn live(&self) -> usize {
        let conns = self.conns.lock().unwrap();
        conns.iter().filter(|c| !c.is_finished()).count()
    }

    /// Drops every proxied connection; returns how many were cut.
    pub fn cut(&self) -> usize {
        let conns = std::mem::take(&mut *self.conns.lock().unwrap());
        let n = conns.iter().filter(|c| !c.is_finished()).count();
        conns.iter().for_each(|c| c.abort());
        n
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.cut();
        self.accept.abort();
    }
}

/// Runs SQL as root over the local socket (works even with require_secure_transport).
pub fn root_sql(sql: &str) {
    let local = std::env::var("OUTBOX_LOCAL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join(".local"));
    let status = Command::new("mariadb")
        .arg(format!(
            "--defaults-file={}",
            local.join("mariadb/my.cnf").display()
        ))
        .args(["-uroot", "-e", sql])
        .status()
        .unwrap();
    assert!(status.success(), "root SQL failed: {sql}");
}

/// The local CA certificate that signed MariaDB's server certificate.
pub fn mariadb_ca() -> PathBuf {
    let local = std::env::var("OUTBOX_LOCAL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join(".local"));
    local.join("mariadb/tls/ca.pem")
}
