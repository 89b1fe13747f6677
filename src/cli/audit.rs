//! `audit`: list the replays and republishes.

use std::process::ExitCode;

use anyhow::Result;

use crate::config::Config;
use crate::ops::audit::{latest_per_replay, AuditTrail};

/// One line per replay (its outcome), or every entry as JSON lines.
pub(super) fn run(config: &Config, json: bool) -> Result<ExitCode> {
    let entries = AuditTrail::new(&config.ops, &config.checkpoint).read()?;
    if json {
        for e in &entries {
            println!("{}", serde_json::to_string(e)?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    for e in latest_per_replay(&entries) {
        let outcome = if e.outcome == "started" {
            "started, no outcome written (killed part-way?)"
        } else {
            e.outcome.as_str()
        };
        let objects = match e.objects.len() {
            0 => String::new(),
            n => format!("; {n} claim-check object(s): {}", e.objects.join(", ")),
        };
        println!(
            "{at}  {id}  {action} by {by}: {count} record(s) to [{topics}], {first} … {last}{objects}; {outcome}; reason: {reason}; selection: {sel}",
            at = e.at,
            id = e.id,
            action = e.action,
            by = e.by,
            count = e.count,
            topics = e.topics.join(", "),
            first = e.first_event_id.as_deref().unwrap_or("-"),
            last = e.last_event_id.as_deref().unwrap_or("-"),
            reason = e.reason,
            sel = e.selection,
        );
    }
    Ok(ExitCode::SUCCESS)
}
