//! Switching from Debezium: its connector (MariaDB + Outbox Event Router on Kafka
//! Connect, from the benchmark's Maven jars) routes events, is stopped mid-stream while
//! writes go on, its stored offset is imported as the router's first checkpoint, and the
//! router catches up — counted by a consumer: 0 lost, duplicates only from Debezium's
//! last transaction and each with the same event id, key, payload and partition.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::crash::write_mixed;
use crate::util::*;

/// The largest transaction `write_mixed` writes: at most this many events go twice.
const LARGEST_TRANSACTION: usize = 100;

/// Debezium and the Connect runtime, fetched from Maven once (shared with `bench/`).
fn connect_jars() -> PathBuf {
    static FETCH: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let libs = root.join(".local/debezium/libs");
    if !libs.join(".complete").exists() {
        let out = Command::new("mvn")
            .args(["-q", "-B", "-f"])
            .arg(root.join("bench/debezium/pom.xml"))
            .arg("dependency:copy-dependencies")
            .arg(format!("-DoutputDirectory={}", libs.display()))
            .output()
            .expect("mvn");
        assert!(
            out.status.success(),
            "fetching Debezium: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        std::fs::write(libs.join(".complete"), "").unwrap();
    }
    libs
}

/// How the Connect worker keeps offsets.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// `ConnectStandalone`: a file.
    Standalone,
    /// `ConnectDistributed` with one worker: a topic.
    Distributed,
}

/// A Kafka Connect worker running the connector.
struct Connect {
    process: RouterProcess,
    port: u16,
    name: String,
    /// What to pass to `import-debezium --offsets`.
    offsets: String,
}

impl Connect {
    async fn start(dir: &Path, mode: Mode, name: &str, connector: &serde_json::Value) -> Self {
        let libs = connect_jars();
        let port = monitor_port();
        let tag = format!("{name}.{}", std::process::id());
        let (offsets, storage) = match mode {
            Mode::Standalone => {
                let file = dir.join("connect.offsets");
                (
                    file.display().to_string(),
                    format!("offset.storage.file.filename={}\n", file.display()),
                )
            }
            Mode::Distributed => (
                format!("kafka:it.connect-offsets.{tag}"),
                format!(
                    "group.id=it-connect-{tag}\noffset.storage.topic=it.connect-offsets.{tag}\n\
                     config.storage.topic=it.connect-configs.{tag}\nstatus.storage.topic=it.connect-status.{tag}\n\
                     offset.storage.replication.factor=1\nconfig.storage.replication.factor=1\n\
                     status.storage.replication.factor=1\noffset.storage.partitions=5\n"
                ),
            ),
        };
        std::fs::write(
            dir.join("worker.properties"),
            format!(
                "bootstrap.servers={}\nkey.converter=org.apache.kafka.connect.storage.StringConverter\n\
                 value.converter=org.apache.kafka.connect.storage.StringConverter\n\
                 offset.flush.interval.ms=500\nlisteners=http://127.0.0.1:{port}\nplugin.path=\n{storage}",
                kafka_bootstrap()
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("log4j2.properties"),
            "rootLogger.level = WARN\nrootLogger.appenderRef.stderr.ref = STDERR\n\
             appender.stderr.type = Console\nappender.stderr.name = STDERR\n\
             appender.stderr.target = SYSTEM_ERR\nappender.stderr.layout.type = PatternLayout\n\
             appender.stderr.layout.pattern = [%d] %p %m (%c)%n\n",
        )
        .unwrap();
        let mut args = vec![
            "-Xms128m".to_string(),
            "-Xmx768m".to_string(),
            // A short test on a loaded machine: start fast rather than run fast.
            "-XX:TieredStopAtLevel=1".to_string(),
            "-XX:+UseSerialGC".to_string(),
            format!(
                "-Dlog4j2.configurationFile={}",
                dir.join("log4j2.properties").display()
            ),
            "-cp".to_string(),
            format!("{}/*", libs.display()),
        ];
        match mode {
            Mode::Standalone => {
                let properties: String = connector["config"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| format!("{k}={}\n", v.as_str().unwrap()))
                    .collect();
                std::fs::write(
                    dir.join("connector.properties"),
                    format!("name={name}\n{properties}"),
                )
                .unwrap();
                args.extend([
                    "org.apache.kafka.connect.cli.ConnectStandalone".to_string(),
                    dir.join("worker.properties").display().to_string(),
                    dir.join("connector.properties").display().to_string(),
                ]);
            }
            Mode::Distributed => args.extend([
                "org.apache.kafka.connect.cli.ConnectDistributed".to_string(),
                dir.join("worker.properties").display().to_string(),
            ]),
        }
        let log = dir.join("connect.log");
        let child = Command::new("java")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("java");
        let connect = Self {
            process: RouterProcess::adopt(child, log),
            port,
            name: name.to_string(),
            offsets,
        };
        if mode == Mode::Distributed {
            connect.post(connector).await;
        }
        connect.wait_running().await;
        connect
    }

    /// Creates the connector through the REST API once the worker answers.
    async fn post(&self, connector: &serde_json::Value) {
        // A distributed worker answers once it joined its group and created its
        // topics: a minute or more beside the parallel suite.
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let sent = reqwest::Client::new()
                .post(format!("http://127.0.0.1:{}/connectors", self.port))
                .json(connector)
                .send()
                .await;
            match sent {
                Ok(r) if r.status().is_success() => return,
                Ok(r) if Instant::now() > deadline => {
                    panic!(
                        "creating the connector: {}\n{}",
                        r.status(),
                        self.process.log()
                    )
                }
                Err(e) if Instant::now() > deadline => {
                    panic!("creating the connector: {e}\n{}", self.process.log())
                }
                _ => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }

    async fn wait_running(&self) {
        let path = format!("/connectors/{}/status", self.name);
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if let Some((200, body)) = try_http_get(self.port, &path).await {
                let status: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                if status["connector"]["state"] == "RUNNING"
                    && status["tasks"][0]["state"] == "RUNNING"
                {
                    return;
                }
                assert!(
                    status["tasks"][0]["state"] != "FAILED",
                    "Debezium's task failed: {body}"
                );
            }
            assert!(
                Instant::now() < deadline,
                "Debezium did not reach RUNNING:\n{}",
                self.process.log()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// SIGTERM: the worker stops its task and flushes its offsets.
    fn stop(mut self) {
        let status = self.process.stop(Duration::from_secs(90));
        println!("Kafka Connect stopped: {status}");
    }
}

/// The connector config Connect runs (JSON, as posted to it).
fn connector(name: &str, setup: &RouterSetup, server: &str) -> serde_json::Value {
    let db = &setup.db;
    serde_json::json!({
        "name": name,
        "config": {
            "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
            "tasks.max": "1",
            "database.hostname": "127.0.0.1",
            "database.port": mariadb_port().to_string(),
            "database.user": "app",
            "database.password": "app-secret",
            "database.server.id": setup.server_id.to_string(),
            "topic.prefix": server,
            "database.include.list": db,
            "table.include.list": format!("{db}.outbox"),
            "snapshot.mode": "no_data",
            "include.schema.changes": "false",
            "schema.history.internal.kafka.bootstrap.servers": kafka_bootstrap(),
            "schema.history.internal.kafka.topic": format!("it.dbz-history.{server}"),
            "schema.history.internal.store.only.captured.databases.ddl": "true",
            "schema.history.internal.store.only.captured.tables.ddl": "true",
            "transforms": "outbox",
            "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
            "transforms.outbox.table.field.event.id": "event_id",
            "transforms.outbox.table.field.event.key": "aggregate_id",
            "transforms.outbox.route.by.field": "aggregate_type",
            "transforms.outbox.route.topic.replacement": format!("{}.${{routedByValue}}", setup.topic_prefix),
        }
    })
}

/// Runs the router binary in `dir` with `args`; panics with its output on failure.
/// The router binary with `args`, run in `dir` with the source's password.
fn router_command(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_outbox-router"));
    command
        .args(args)
        .current_dir(dir)
        .env("OUTBOX_DB_PASSWORD", "app-secret");
    command
}

fn router_cli(dir: &Path, args: &[&str]) -> String {
    let out = router_command(dir, args).output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{args:?}: {stdout}\n{stderr}");
    stdout
}

async fn cutover(name: &str, mode: Mode) {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, setup) = fresh(name).await;
    let dir = setup.dir.path().to_path_buf();
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    let connector_name = format!("it-{name}-{}", std::process::id());
    let server = format!("it{}{}", name.replace('_', ""), std::process::id());
    let connector = connector(&connector_name, &setup, &server);
    std::fs::write(dir.join("connector.json"), connector.to_string()).unwrap();

    let connect = Connect::start(&dir, mode, &connector_name, &connector).await;
    // The task is RUNNING before its (schema-only) snapshot has taken its binlog
    // position; rows written before that are not Debezium's. Write probes until one
    // arrives: from then on it streams.
    let probes = vec![setup.topic("Probe")];
    let deadline = Instant::now() + Duration::from_secs(180);
    for i in 0.. {
        insert_txn(
            &mut conn,
            &setup.db,
            &[Ev::new(format!("probe-{i}"), "Probe", "p", "{}")],
        )
        .await;
        if wait_for_count(&probes, 1, Duration::from_millis(500)) >= 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Debezium routed no probe within 180 s:\n{}",
            connect.process.log()
        );
    }
    write_mixed(&setup.db, 0, 300, 40).await;
    let first = wait_for_count(&topics, 300, Duration::from_secs(120));
    assert!(
        first >= 300,
        "Debezium routed {first} of 300:\n{}",
        connect.process.log()
    );

    // Stop it mid-stream while the application keeps writing.
    let writer = {
        let db = setup.db.clone();
        tokio::spawn(async move { write_mixed(&db, 300, 1500, 40).await })
    };
    let mid = wait_for_count(&topics, 900, Duration::from_secs(120));
    assert!(mid >= 900, "Debezium stalled at {mid} records");
    let offsets = connect.offsets.clone();
    connect.stop();
    writer.await.unwrap();
    let by_debezium = count(&topics);
    // And the application goes on writing while nothing routes.
    write_mixed(&setup.db, 1500, 3000, 40).await;

    let toml = router_cli(&dir, &["import-debezium", "connector.json"]);
    std::fs::write(
        dir.join("imported.toml"),
        format!(
            "{toml}\n[monitor]\nlisten = \"127.0.0.1:{}\"\n",
            setup.monitor_port
        ),
    )
    .unwrap();
    let import = [
        "--config",
        "imported.toml",
        "import-debezium",
        "connector.json",
        "--offsets",
        &offsets,
    ];
    // A typo in the connector's name finds no offset: an error, never a fresh start.
    let mut typo = connector.clone();
    typo["name"] = format!("{connector_name}-typo").into();
    std::fs::write(dir.join("typo.json"), typo.to_string()).unwrap();
    let mut typo_import = import;
    typo_import[3] = "typo.json";
    let refused = router_command(&dir, &typo_import).output().unwrap();
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && why.contains("no offset of connector"),
        "{why}"
    );
    if mode == Mode::Standalone {
        assert!(
            why.contains(&connector_name),
            "the offsets it holds are not named: {why}"
        );
    }
    let imported = router_cli(&dir, &import);
    println!("{imported}");
    assert!(imported.contains("checkpoint set to"), "{imported}");
    assert!(
        imported.contains(" gtid="),
        "MariaDB GTIDs not carried over: {imported}"
    );

    // A second import would move a checkpoint the router may already have used.
    let again = router_command(&dir, &import).output().unwrap();
    let refusal = String::from_utf8_lossy(&again.stderr);
    assert!(
        !again.status.success() && refusal.contains("already has a checkpoint"),
        "{refusal}"
    );

    let log = dir.join("router-imported.log");
    let child = router_command(&dir, &["--config", "imported.toml", "run"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut router = RouterProcess::adopt(child, log);
    let log = drain_and_stop(&mut router, &topics, 3000);
    let duplicates = check_stream(&topics, 3000);
    // The way back: the router's checkpoint as the body of Connect's offsets API.
    let back = router_cli(
        &dir,
        &[
            "--config",
            "imported.toml",
            "checkpoint",
            "show",
            "--debezium",
            &server,
        ],
    );
    let back: serde_json::Value = serde_json::from_str(&back).unwrap();
    assert_eq!(back["offsets"][0]["partition"]["server"], server.as_str());
    assert!(
        back["offsets"][0]["offset"]["pos"].as_u64().unwrap() > 4,
        "{back}"
    );
    assert!(back["offsets"][0]["offset"]["gtids"].is_string(), "{back}");

    // Every key on one partition: the one Debezium's producer chose.
    let mut partitions: HashMap<(String, Vec<u8>), HashSet<i32>> = HashMap::new();
    for m in read_all(&topics) {
        partitions
            .entry((m.topic.clone(), m.key.clone()))
            .or_default()
            .insert(m.partition);
    }
    let split: Vec<_> = partitions.iter().filter(|(_, p)| p.len() > 1).collect();
    println!(
        "debezium cutover ({}): events=3000 by_debezium={by_debezium} lost=0 duplicates={duplicates} keys={} split_keys={}",
        if mode == Mode::Standalone { "file offsets" } else { "offsets topic" },
        partitions.len(),
        split.len()
    );
    assert!(
        split.is_empty(),
        "keys on more than one partition: {split:?}"
    );
    assert!(
        duplicates <= LARGEST_TRANSACTION,
        "{duplicates} duplicates: more than Debezium's last transaction\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn switch_from_debezium_standalone_file_offsets() {
    cutover("dbz_file", Mode::Standalone).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn switch_from_debezium_distributed_offsets_topic() {
    cutover("dbz_topic", Mode::Distributed).await;
}
