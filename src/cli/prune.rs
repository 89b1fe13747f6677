//! `prune`: delete provably delivered outbox rows in small batches.

use std::process::ExitCode;

use anyhow::Result;
use tokio_util::sync::CancellationToken;

use super::args::PruneArgs;
use crate::config::Config;
use crate::ops::prune::{prune, PruneOptions, PruneSections};

/// Prunes (or, dry, counts) and reports per table.
pub(super) async fn run(config: &Config, args: PruneArgs) -> Result<ExitCode> {
    let opts = PruneOptions {
        older_than: args.older_than,
        timestamp_column: args
            .timestamp_column
            .or_else(|| config.outbox.columns.timestamp.clone())
            .unwrap_or_else(|| "created_at".into()),
        batch: args.batch,
        rate: args.rate,
        margin: args.margin,
        wait: args.wait,
        archive: args.archive,
        dry_run: args.dry_run,
    };
    let stop = CancellationToken::new();
    super::run::cancel_on_signal(stop.clone());
    let event_id = config.rules().map_err(anyhow::Error::msg)?.event_id;
    let sections = PruneSections {
        source: &config.source,
        outbox: &config.outbox,
        checkpoint: &config.checkpoint,
        ops: &config.ops,
        kafka: &config.kafka,
        event_id_column: &event_id,
    };
    let report = prune(sections, &opts, &stop).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if report.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    for t in &report.tables {
        let archived = if opts.archive.is_some() {
            format!(", {} archived", t.archived)
        } else {
            String::new()
        };
        let parked = match t.parked_kept {
            0 => String::new(),
            n => format!(", {n} parked row(s) kept (a release reads them again)"),
        };
        println!(
            "{}: {verb} {} row(s) in {} batch(es){archived}{parked}",
            t.table, t.rows, t.batches
        );
    }
    if report.stopped {
        println!("stopped by a signal between batches; what was deleted is delivered");
    }
    Ok(ExitCode::SUCCESS)
}
