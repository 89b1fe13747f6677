//! `status`: the verdict, whether the router runs or not.

use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use super::checkpoint::no_store_at;
use super::exit::EXIT_UNKNOWN;
use crate::checkpoint::{now_ms, CheckpointStore};
use crate::config::Config;
use crate::monitor::{RouterState, RunLock, Status, Unobserved};
use crate::source;

/// Prints the status (text or JSON); the exit code is the verdict's.
pub(super) async fn run(
    config: &Config,
    json: bool,
    detect_hours: Option<f64>,
    repair_hours: Option<f64>,
) -> Result<ExitCode> {
    let thresholds = config.monitor.thresholds(detect_hours, repair_hours);
    match observe(config).await {
        Ok(mut st) => {
            st.judge(&thresholds);
            if json {
                println!("{}", serde_json::to_string_pretty(&st)?);
            } else {
                print!("{}", st.render());
            }
            Ok(ExitCode::from(st.verdict.exit_code()))
        }
        Err(e) => {
            println!("UNKNOWN: {e:#}");
            Ok(ExitCode::from(EXIT_UNKNOWN))
        }
    }
}

/// Asks the running router first; when it has no observation to give, reads the store
/// and the server, and calls it starting (or standby) when its process runs — it says
/// so, or holds the store's run lock — and stopped when not.
async fn observe(config: &Config) -> Result<Status> {
    let mut unobserved = None;
    if let Ok(base) = super::monitor_url::of(config) {
        let url = format!("{base}{}", config.status_path());
        let client = super::monitor_url::client(config, std::time::Duration::from_secs(3))?;
        if let Ok(resp) = client.get(&url).send().await {
            if resp.status().is_success() {
                return resp
                    .json::<Status>()
                    .await
                    .with_context(|| format!("reading {url}"));
            }
            unobserved = resp.json::<Unobserved>().await.ok();
        }
    }
    let dir = &config.checkpoint.dir;
    let holder = RunLock::holder(dir);
    let runs = unobserved.is_some() || holder.is_some();
    if !CheckpointStore::exists(dir) && !runs {
        bail!("{}", no_store_at(dir));
    }
    // Exactly-once: the fleet's position (its newest marker), not what this volume last
    // knew — a standby's store would report the fleet's lag and runway as its own.
    let checkpoint = crate::ops::checkpoint::show(config)
        .context("the router's endpoint did not answer and its checkpoint store is not readable")?
        .checkpoint;
    let mut conn = source::connect(&config.source).await?;
    let mut status =
        crate::monitor::status::observe(&mut conn, checkpoint.as_ref(), false, None).await?;
    if let Some(state) = unobserved
        .as_ref()
        .map(|u| u.router)
        .or(holder.as_ref().map(|h| h.state))
    {
        status.router = state;
        status.live = unobserved.map(|u| u.live);
        status.starting_secs = holder
            .and_then(|h| h.started_ms)
            .filter(|_| state != RouterState::Running)
            .map(|ms| ((now_ms() - ms) / 1000).max(0));
    }
    Ok(status)
}
