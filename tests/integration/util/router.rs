//! A router process per test: its configuration (built as a value, written as TOML),
//! its commands, and the running process.

use super::*;

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
                "password": "${env:IT_CDC_PASSWORD}",
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
            // The local server keeps binlogs 2 h: a budget inside it, so `status` says
            // OK unless a test sets its own (the defaults, 24 + 60 h, would warn).
            "monitor": {
                "listen": listen, "interval_secs": 1, "detect_hours": 0.25, "repair_hours": 0.25,
                // Each test's fleet its own: the console shows only its routers.
                "status_topic": format!("{}.status", self.topic_prefix),
                "control_topic": format!("{}.control", self.topic_prefix),
            },
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
        // Written whole under another name, then renamed: a router starting meanwhile
        // reads the old file or the new one, never a half-written one.
        static WRITES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("toml.{n}.tmp"));
        std::fs::write(&tmp, toml::to_string(&config).unwrap()).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
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
            .env("IT_CDC_PASSWORD", "cdc-secret")
            .env(
                "OUTBOX_ROUTER_LOG",
                std::env::var("IT_ROUTER_LOG")
                    .unwrap_or_else(|_| "info,outbox_router=debug,rdkafka=warn".into()),
            )
            // The test's own (a wrong password, another log level) over the defaults.
            .envs(env.iter().copied())
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

    /// The process id (while it runs).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    fn signal(&self, sig: &str) {
        let pid = self.pid().to_string();
        Command::new("kill").args([sig, &pid]).status().unwrap();
    }

    /// SIGTERM without waiting.
    /// Sends SIGTERM to a process that still runs and expects it gone within `bound`;
    /// prints how long it took, for `what`.
    pub fn expect_term_within(&mut self, bound: Duration, what: &str) {
        assert!(self.wait(Duration::ZERO).is_none(), "{}", self.log());
        let asked = std::time::Instant::now();
        self.signal_term();
        let status = self.wait(Duration::from_secs(30));
        let took = asked.elapsed();
        println!(
            "SIGTERM {what}: exited {status:?} after {} ms",
            took.as_millis()
        );
        assert!(
            status.is_some(),
            "still running 30 s after SIGTERM:\n{}",
            self.log()
        );
        assert!(took < bound, "{took:?}:\n{}", self.log());
    }

    pub fn signal_term(&self) {
        self.signal("-TERM");
    }

    /// SIGHUP: a pool reads its sources again.
    pub fn signal_hup(&self) {
        self.signal("-HUP");
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

    /// The process's peak resident memory so far (`VmHWM`), while it runs.
    pub fn peak_rss_kb(&mut self) -> Option<u64> {
        let child = self.child.as_mut()?;
        if child.try_wait().ok()?.is_some() {
            return None;
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
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
