//! `recover`: after a purge, re-publish from the outbox table and move the checkpoint.

use std::process::ExitCode;

use anyhow::Result;

use super::args::RecoverArgs;
use crate::config::Config;
use crate::ops::recover::{recover, RecoverOptions};

/// Re-publishes (or, dry, counts) and reports.
pub(super) async fn run(config: &Config, opts: RecoverArgs) -> Result<ExitCode> {
    let recover_opts = RecoverOptions {
        timestamp_column: opts
            .timestamp_column
            .or_else(|| config.outbox.columns.timestamp.clone())
            .unwrap_or_else(|| "created_at".into()),
        margin: opts.margin,
        longest_transaction: opts.longest_transaction,
        since_secs: opts.since,
        dry_run: opts.dry_run,
        allow_empty: opts.allow_empty,
        ignore_prepared_xa: opts.ignore_prepared_xa,
    };
    let report = recover(config, &recover_opts).await?;
    if report.dry_run {
        println!(
            "dry run: {} event(s) written since unix time {} would be re-published ({} of parked aggregates to the parking topic); the checkpoint would move to {}; nothing sent, nothing changed",
            report.events, report.since_secs, report.held, report.checkpoint
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "re-published {} event(s) written since unix time {} (original event ids kept)",
        report.events, report.since_secs
    );
    if report.held > 0 {
        println!(
            "{} of them belong to parked aggregates: they went to the parking topic {}, behind their aggregate's parked events (`parked list`; a release delivers them in order)",
            report.held, config.outbox.parking.topic
        );
    }
    match &report.fleet {
        Some(moved) => println!("checkpoint set to {}: {moved}", report.checkpoint),
        None => println!("checkpoint set to {}", report.checkpoint),
    }
    Ok(ExitCode::SUCCESS)
}
