//! Shared helpers: ports and addresses of the local services (started by
//! `scripts/services`), HTTP to the router's monitor, and by file the local MariaDB
//! (`mariadb.rs`), Kafka (`kafka.rs`), the router process (`router.rs`) and a cutting
//! proxy (`proxy.rs`).

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

mod browser;
mod kafka;
mod mariadb;
mod proxy;
mod router;
mod stream;

pub use browser::*;
pub use kafka::*;
pub use mariadb::*;
pub use proxy::*;
pub use router::*;
pub use stream::*;

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
    repeat_panics_last();
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let n = N.fetch_add(1, Ordering::Relaxed);
    let tag = (nanos / 1000 + std::process::id() * 7 + n * 104_729) % 1_000_000;
    (format!("{name}_{tag}"), 100_000 + tag)
}

/// Repeats a failing test's reason on one line after everything it printed: assertion
/// messages carry a router's whole log, and CI shows only a run's last lines.
fn repeat_panics_last() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let printed = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            printed(info);
            let payload = info.payload();
            let message = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("");
            let at = info
                .location()
                .map_or_else(String::new, |l| format!("{}:{}", l.file(), l.line()));
            let reason: String = message
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(300)
                .collect();
            eprintln!(
                "=== {} panicked at {at}: {reason}",
                std::thread::current().name().unwrap_or("?")
            );
        }));
    });
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

/// Unix seconds `secs` ago, as a command's `--since` argument.
pub fn unix_secs_ago(secs: u64) -> String {
    (std::time::SystemTime::now() - std::time::Duration::from_secs(secs))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string()
}

/// Runs Kafka's AclCommand against the local broker (as its super user, on the plaintext
/// listener), e.g. `["--add", "--deny-principal", "User:dave", "--operation", "Write",
/// "--topic", t]`; panics with its output when it fails.
pub fn kafka_acl(args: &[&str]) {
    let local = std::env::var("OUTBOX_LOCAL_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| repo_root().join(".local"));
    let libs = local.join("kafka").join("libs").join("*");
    let out = std::process::Command::new("timeout")
        .arg("120")
        .arg("java")
        .arg("-cp")
        .arg(libs)
        .arg("org.apache.kafka.tools.AclCommand")
        .args(["--bootstrap-server", &kafka_bootstrap()])
        .args(args)
        .arg("--force")
        .output()
        .expect("java runs");
    assert!(
        out.status.success(),
        "AclCommand {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fresh outbox database and a router setup starting at the current binlog position.
pub async fn fresh(name: &str) -> (Conn, RouterSetup) {
    let (db, server_id) = unique(name);
    let mut conn = app_conn().await;
    outbox_db(&mut conn, &db).await;
    let setup = RouterSetup::new(&db, server_id, binlog_position(&mut conn).await);
    (conn, setup)
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

/// Runs `scripts/services ACTION SERVICE` and checks it succeeded; one at a time, so two
/// tests needing a service that is not up yet do not both build and start it. A broker a
/// test killed comes back with its records: never formatted again for its partition
/// count (that is for `scripts/test`'s start).
pub fn services(action: &str, service: &str) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let status = Command::new(repo_root().join("scripts/services"))
        .args([action, service])
        .env("OUTBOX_SERVICES_KEEP_DATA", "1")
        .status()
        .unwrap();
    assert!(
        status.success(),
        "scripts/services {action} {service} failed"
    );
}

/// A sample's value in a Prometheus text exposition (0 when absent).
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} not found in:\n{text}"))
}
