//! `fleet`: every source of the fleet, its leader, state, lag and runway, read from a
//! router's console API (`/api/v1/fleet`) — the same answer every instance's console
//! gives, from the status topic — so it can be asked from anywhere the monitor port is
//! reachable. A credential, when the monitor wants one, comes from `OUTBOX_ROUTER_TOKEN`
//! (never a flag: it would show in the process list).

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::exit::EXIT_UNKNOWN;
use crate::config::Config;

/// Where `fleet` asks: `--url`, else the monitor the config names.
pub(super) enum Asked<'a> {
    Url {
        url: String,
        ca_file: Option<&'a Path>,
    },
    Config(&'a Config),
}

/// Prints the fleet (a table, or JSON); exit 0 when every source runs or is paused, 1
/// when one is starting, stopped or unknown, 2 when one failed, 3 when the API did not
/// answer.
pub(super) async fn run(asked: Asked<'_>, json: bool) -> Result<ExitCode> {
    let timeout = Duration::from_secs(10);
    let (base, client) = match asked {
        Asked::Url { url, ca_file } => {
            let mut b = reqwest::Client::builder().timeout(timeout);
            if let Some(path) = ca_file {
                let pem =
                    std::fs::read(path).with_context(|| format!("--ca-file {}", path.display()))?;
                for cert in reqwest::Certificate::from_pem_bundle(&pem).with_context(|| {
                    format!("--ca-file {}: not PEM certificates", path.display())
                })? {
                    b = b.add_root_certificate(cert);
                }
            }
            (url.trim_end_matches('/').to_string(), b.build()?)
        }
        Asked::Config(config) => (
            super::monitor_url::of(config)?,
            super::monitor_url::client(config, timeout)?,
        ),
    };
    let token = std::env::var("OUTBOX_ROUTER_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    let mut items: Vec<Value> = Vec::new();
    let mut page = 1;
    loop {
        let url = format!("{base}/api/v1/fleet?per_page=500&page={page}");
        let mut request = client.get(&url);
        if let Some(t) = &token {
            request = request.bearer_auth(t);
        }
        let answer = match request.send().await {
            Ok(a) => a,
            Err(e) => {
                println!(
                    "UNKNOWN: {base}/api/v1/fleet: {}",
                    crate::cause_chain(&anyhow::Error::from(e))
                );
                return Ok(ExitCode::from(EXIT_UNKNOWN));
            }
        };
        let status = answer.status();
        let body: Value = answer.json().await.unwrap_or_default();
        if !status.is_success() {
            let why = body["error"].as_str().unwrap_or("no reason given");
            println!("UNKNOWN: {base}/api/v1/fleet answered {status}: {why}");
            return Ok(ExitCode::from(EXIT_UNKNOWN));
        }
        items.extend(body["items"].as_array().cloned().unwrap_or_default());
        if page >= body["pages"].as_u64().unwrap_or(1) as usize {
            break;
        }
        page += 1;
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&items)?);
    } else {
        print!("{}", table(&items));
    }
    Ok(ExitCode::from(verdict(&items)))
}

/// The exit code of what the fleet shows.
fn verdict(items: &[Value]) -> u8 {
    let states = || {
        items
            .iter()
            .map(|s| s["state"].as_str().unwrap_or("unknown"))
    };
    if states().any(|s| s == "failed") {
        2
    } else if states().all(|s| s == "running" || s == "paused") {
        0
    } else {
        1
    }
}

fn table(items: &[Value]) -> String {
    let rows: Vec<[String; 6]> = items
        .iter()
        .map(|s| {
            let r = &s["report"];
            [
                s["source"].as_str().unwrap_or("?").to_string(),
                s["leader"].as_str().unwrap_or("—").to_string(),
                s["state"].as_str().unwrap_or("unknown").to_string(),
                r["lag_ms"]
                    .as_f64()
                    .map_or("—".into(), |ms| format!("{:.1}s", ms / 1000.0)),
                r["runway_secs"]
                    .as_f64()
                    .map_or("—".into(), |secs| format!("{:.1}h", secs / 3600.0)),
                r["checkpoint"].as_str().unwrap_or("—").to_string(),
            ]
        })
        .collect();
    let header = ["SOURCE", "LEADER", "STATE", "LAG", "RUNWAY", "CHECKPOINT"].map(String::from);
    let widths: Vec<usize> = (0..6)
        .map(|i| {
            std::iter::once(&header)
                .chain(&rows)
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    if items.is_empty() {
        out.push_str("(no source reports to the fleet's status topic)\n");
    }
    out
}

/// `--url` without a scheme is a mistake worth naming.
pub(super) fn check_url(url: &str) -> Result<()> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        bail!("--url {url:?}: give the monitor's base URL, e.g. https://router-0.example:9612");
    }
    Ok(())
}
