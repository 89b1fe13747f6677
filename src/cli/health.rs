//! `health`: the running router's own answer, for container health checks.

use std::process::ExitCode;
use std::time::Duration;

use crate::config::Config;
use anyhow::Result;

/// GETs `/health` (or `/ready`) on the monitor the config names.
pub(super) async fn run(config: &Config, ready: bool) -> Result<ExitCode> {
    let path = if ready { "/ready" } else { "/health" };
    let url = format!("{}{path}", super::monitor_url::of(config)?);
    let answer = super::monitor_url::client(config, Duration::from_secs(3))?
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
