//! `reconcile`: what reached Kafka, by event id; optionally send what is missing.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use tokio_util::sync::CancellationToken;

use super::args::ReconcileArgs;
use crate::config::Config;
use crate::ops::audit::os_user;
use crate::ops::reconcile::{reconcile, ReconcileOptions, ReconcileReport};
use crate::ops::replay::{replay, ReplayOptions, Selection};

/// Ids printed per kind (JSON lists them all, up to the report's limit).
const PRINTED_IDS: usize = 20;

/// Reconciles, prints, republishes when asked; exit 1 when anything is missing or misrouted.
pub(super) async fn run(path: &Path, config: Config, args: ReconcileArgs) -> Result<ExitCode> {
    let timestamp_column = args
        .timestamp_column
        .or_else(|| config.outbox.columns.timestamp.clone())
        .unwrap_or_else(|| "created_at".into());
    let opts = ReconcileOptions {
        since: args.since.unwrap_or(0),
        until: args.until,
        id_range: args.id_range,
        timestamp_column: timestamp_column.clone(),
        wait: args.wait,
        grace: args.grace,
        by_checkpoint: true,
    };
    if args.against_shadow {
        return both_channels(path, &config, opts, args.json).await;
    }
    let config = &config;
    let report = reconcile(config, &opts).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    if args.republish_missing && !report.missing_ids.is_empty() {
        let stop = CancellationToken::new();
        super::run::cancel_on_signal(stop.clone());
        // One replay per chunk: each id list fits one statement.
        for ids in report.missing_ids.chunks(5_000) {
            let opts = ReplayOptions {
                selection: Selection {
                    event_ids: ids.to_vec(),
                    timestamp_column: timestamp_column.clone(),
                    ..Default::default()
                },
                rate: args.rate,
                reason: args.reason.clone().unwrap_or_default(),
                by: args.by.clone().unwrap_or_else(os_user),
                action: "republish",
                dry_run: false,
            };
            let done = replay(config, &opts, &stop, |_| {}).await?;
            eprintln!(
                "{}: republished {} missing event(s) with their original ids ({})",
                done.audit.id, done.audit.count, done.audit.outcome
            );
            if stop.is_cancelled() {
                break;
            }
        }
    }
    Ok(if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// A handover's two channels: the live topics a polling relay fills (judged by age), and
/// the shadow router's (judged by its checkpoint).
async fn both_channels(
    path: &Path,
    config: &Config,
    mut opts: ReconcileOptions,
    json: bool,
) -> Result<ExitCode> {
    let shadow_config = Config::load(path)?.into_shadow();
    let shadow = reconcile(&shadow_config, &opts).await?;
    opts.by_checkpoint = false;
    let live = reconcile(config, &opts).await?;
    if json {
        let both = serde_json::json!({ "live": live, "shadow": shadow });
        println!("{}", serde_json::to_string_pretty(&both)?);
    } else {
        println!("== live topics (the polling relay's), judged by age ==");
        print_report(&live);
        println!("== shadow topics (the router's), judged by its checkpoint ==");
        print_report(&shadow);
    }
    Ok(if live.is_clean() && shadow.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_report(r: &ReconcileReport) {
    println!(
        "window {} – {} (unix s); rows read at binlog {}, checkpoint {}{}",
        r.since,
        r.until,
        r.snapshot,
        r.checkpoint,
        if r.proven {
            " (past it: not found means lost)"
        } else {
            " (NOT past it: rows near the checkpoint count as in flight)"
        }
    );
    println!(
        "{:<40} {:>9} {:>9} {:>8} {:>9} {:>6} {:>9} {:>12} {:>7} {:>7}",
        "topic",
        "expected",
        "found",
        "missing",
        "in-flight",
        "dup",
        "misrouted",
        "not-in-table",
        "parked",
        "dropped"
    );
    for (topic, c) in &r.topics {
        println!(
            "{:<40} {:>9} {:>9} {:>8} {:>9} {:>6} {:>9} {:>12} {:>7} {:>7}",
            topic,
            c.expected,
            c.found_once,
            c.missing,
            c.in_flight,
            c.duplicated,
            c.misrouted,
            c.not_in_table,
            c.parked,
            c.dropped
        );
    }
    if r.invalid_rows > 0 {
        println!(
            "{} row(s) of the window cannot be records: parked, each with its aggregate (`parked list`)",
            r.invalid_rows
        );
    }
    for (what, ids) in [
        ("missing", &r.missing_ids),
        ("misrouted", &r.misrouted_ids),
        ("duplicated", &r.duplicated_ids),
        ("not in the table", &r.not_in_table_ids),
    ] {
        if !ids.is_empty() {
            let more = ids.len().saturating_sub(PRINTED_IDS);
            let shown: Vec<&str> = ids.iter().take(PRINTED_IDS).map(String::as_str).collect();
            let tail = if more > 0 {
                format!(" … and {more} more (--json lists them)")
            } else {
                String::new()
            };
            println!("{what}: {}{tail}", shown.join(", "));
        }
    }
    println!(
        "{}",
        if r.is_clean() {
            "ok: nothing missing, nothing misrouted"
        } else {
            "NOT OK: events are missing or misrouted"
        }
    );
}
