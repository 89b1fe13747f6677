//! `health`: the running router's own answer, for container health checks.

use std::process::ExitCode;
use std::time::Duration;

use crate::config::Config;
use anyhow::{bail, Context, Result};

/// GETs `/health` (or `/ready`) on the monitor address the config names; a wildcard
/// address is asked on loopback.
pub(super) async fn run(config: &Config, ready: bool) -> Result<ExitCode> {
    let Some(listen) = config.monitor.listen_addr() else {
        bail!("monitor.listen is off: there is no endpoint to ask");
    };
    let addr: std::net::SocketAddr = listen
        .parse()
        .with_context(|| format!("monitor.listen {listen:?}"))?;
    let host = match addr.ip() {
        ip if ip.is_unspecified() && ip.is_ipv4() => "127.0.0.1".to_string(),
        ip if ip.is_unspecified() => "[::1]".to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        ip => ip.to_string(),
    };
    let path = if ready { "/ready" } else { "/health" };
    let url = format!("http://{host}:{}{path}", addr.port());
    let answer = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build()?
        .get(&url)
        .send()
        .await;
    match answer {
        Ok(r) if r.status().is_success() => {
            println!("{path}: {}", r.status());
            Ok(ExitCode::SUCCESS)
        }
        Ok(r) => {
            println!(
                "{path}: {}: {}",
                r.status(),
                r.text().await.unwrap_or_default()
            );
            Ok(ExitCode::FAILURE)
        }
        Err(e) => {
            println!("{url}: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}
