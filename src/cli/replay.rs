//! `replay`: publish chosen outbox rows again, with their event ids, and audit it.

use std::process::ExitCode;

use anyhow::Result;
use tokio_util::sync::CancellationToken;

use super::args::ReplayArgs;
use crate::config::Config;
use crate::ops::audit::os_user;
use crate::ops::replay::{replay, ReplayOptions, Selection};
use crate::source::SnapshotMode;

/// Replays (or, dry, lists) and prints the audit entry.
pub(super) async fn run(config: &Config, args: ReplayArgs) -> Result<ExitCode> {
    let condition = match (&config.source.snapshot, args.since_watermark) {
        (_, false) => None,
        (SnapshotMode::Watermark(w), true) => Some(w.clone()),
        (_, true) => anyhow::bail!("--since-watermark: source.snapshot has no watermark (set source.snapshot = {{ watermark = \"…\" }}, the condition the handover used)"),
    };
    let selection = Selection {
        event_ids: args.event_ids,
        aggregate_id: args.aggregate_id,
        event_type: args.event_type,
        id_range: args.id_range,
        since: args.since,
        until: args.until,
        condition,
        timestamp_column: args
            .timestamp_column
            .or_else(|| config.outbox.columns.timestamp.clone())
            .unwrap_or_else(|| "created_at".into()),
    };
    let opts = ReplayOptions {
        selection,
        rate: args.rate,
        reason: args.reason,
        by: args.by.unwrap_or_else(os_user),
        action: "replay",
        dry_run: args.dry_run,
    };
    let stop = CancellationToken::new();
    super::run::cancel_on_signal(stop.clone());
    let dry_run = opts.dry_run;
    let report = replay(config, &opts, &stop, |r| {
        if dry_run {
            println!(
                "{}\t{}\t{}",
                r.event.id,
                r.topic,
                String::from_utf8_lossy(&r.key)
            );
        }
    })
    .await?;
    let a = &report.audit;
    if args.json {
        println!("{}", serde_json::to_string_pretty(a)?);
    } else if dry_run {
        println!(
            "dry run: {} record(s) would be replayed to {}; nothing sent, nothing audited",
            a.count,
            a.topics.join(", ")
        );
    } else {
        println!(
            "{}: {} — {} record(s) to {} (event ids {} … {}), header {}={}; audited in {}",
            a.id,
            a.outcome,
            a.count,
            a.topics.join(", "),
            a.first_event_id.as_deref().unwrap_or("-"),
            a.last_event_id.as_deref().unwrap_or("-"),
            config.ops.replay_header,
            a.id,
            config.ops.audit_file(&config.checkpoint.dir).display()
        );
    }
    if !report.parked.is_empty() {
        let shown: Vec<&str> = report.parked.iter().take(20).map(String::as_str).collect();
        eprintln!(
            "{} selected event(s) not replayed: their aggregate is parked, and sent now they would overtake its parked events; `parked list` shows them, `parked release` delivers them in order: {}{}",
            report.parked.len(),
            shown.join(", "),
            if report.parked.len() > shown.len() { " …" } else { "" }
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
