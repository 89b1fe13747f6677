//! `status`: the verdict, whether the router runs or not.

use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use super::EXIT_UNKNOWN;
use outbox_router::checkpoint::CheckpointStore;
use outbox_router::config::Config;
use outbox_router::monitor::Status;
use outbox_router::source;

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

/// Asks the running router first; when it does not answer, reads the store and the server.
async fn observe(config: &Config) -> Result<Status> {
    if let Some(addr) = config.monitor.listen_addr() {
        let url = format!("http://{addr}/status");
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(3))
            .build()?;
        if let Ok(resp) = client.get(&url).send().await {
            if resp.status().is_success() {
                return resp
                    .json::<Status>()
                    .await
                    .with_context(|| format!("reading {url}"));
            }
        }
    }
    let dir = &config.checkpoint.dir;
    if !CheckpointStore::exists(dir) {
        bail!("{}", super::no_store_at(dir));
    }
    let checkpoint = CheckpointStore::peek(dir)
        .context("the router's endpoint did not answer and its checkpoint store is not readable")?;
    let mut conn = source::connect(&config.source).await?;
    Ok(
        outbox_router::monitor::status::observe(&mut conn, checkpoint.as_ref(), false, None)
            .await?,
    )
}
