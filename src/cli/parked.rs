//! `parked list|show|release|drop`: what ordered parking holds back, and an operator's
//! release or drop.

use std::process::ExitCode;

use anyhow::Result;

use super::args::{AggregateArgs, ParkedAction, ParkedRequestArgs};
use crate::config::Config;
use crate::ops::audit::os_user;
use crate::ops::parked::{self, Which};
use crate::route::parking::Action;

pub(super) async fn run(config: &Config, action: ParkedAction) -> Result<ExitCode> {
    match action {
        ParkedAction::List { json } => list(config, json),
        ParkedAction::Show { which, json } => show(config, &which.into(), json),
        ParkedAction::Release(args) => request(config, Action::Release, args).await,
        ParkedAction::Drop(args) => request(config, Action::Drop, args).await,
    }
}

impl From<AggregateArgs> for Which {
    fn from(a: AggregateArgs) -> Self {
        Which {
            ids: a.ids,
            aggregate_type: a.aggregate_type,
            table: a.table,
        }
    }
}

fn list(config: &Config, json: bool) -> Result<ExitCode> {
    let parked = tokio::task::block_in_place(|| parked::list(config))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&parked)?);
        return Ok(ExitCode::SUCCESS);
    }
    if parked.is_empty() {
        println!("nothing is parked on {}", config.outbox.parking.topic);
    }
    for a in &parked {
        println!(
            "{table}  {kind}/{id}  {events} event(s), oldest {age}  first {first}: {reason}",
            table = a.name.table,
            kind = a.name.aggregate_type.as_deref().unwrap_or("NULL"),
            id = a.name.id,
            events = a.events,
            age = humantime::format_duration(std::time::Duration::from_secs(
                a.oldest_age_secs as u64
            )),
            first = a.first_event,
            reason = a.reason,
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn show(config: &Config, which: &Which, json: bool) -> Result<ExitCode> {
    let events = tokio::task::block_in_place(|| parked::show(config, which))?;
    for p in &events {
        let id = p.event_id.as_ref().map(ToString::to_string);
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "aggregate_id": String::from_utf8_lossy(&p.aggregate.id),
                    "aggregate_type": p.aggregate.aggregate_type,
                    "table": p.aggregate.table.to_string(),
                    "event_id": id,
                    "kind": p.kind.as_str(),
                    "position": p.position,
                    "topic": p.topic,
                    "reason": p.reason,
                    "offset": p.offset,
                })
            );
        } else {
            println!(
                "{offset}  {id}  {kind} at {position} → {topic}: {reason}",
                offset = p.offset,
                id = id.as_deref().unwrap_or("(no id)"),
                kind = p.kind.as_str(),
                position = p.position,
                topic = p.topic.as_deref().unwrap_or("-"),
                reason = p.reason,
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn request(config: &Config, action: Action, args: ParkedRequestArgs) -> Result<ExitCode> {
    let by = args.by.unwrap_or_else(os_user);
    let answered = parked::request(
        config,
        action,
        &args.which.into(),
        &args.reason,
        &by,
        args.wait,
    )
    .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&answered)?);
    } else {
        println!(
            "request {} written to {}",
            answered.request, config.outbox.parking.topic
        );
        for o in &answered.outcomes {
            println!(
                "{} {}/{}: {} at {}: {}",
                o.name.table,
                o.name.aggregate_type.as_deref().unwrap_or("NULL"),
                o.name.id,
                o.outcome,
                o.position,
                o.reason
            );
        }
        for w in &answered.waiting {
            println!(
                "{} {}/{}: no answer yet; the source's leader carries the request out when it runs (see `parked list`)",
                w.table,
                w.aggregate_type.as_deref().unwrap_or("NULL"),
                w.id
            );
        }
    }
    // With --wait 0 the request's writing is the command's work.
    let answered_all = answered.waiting.is_empty() || args.wait.is_zero();
    let done = answered_all && answered.outcomes.iter().all(|o| o.outcome != "refused");
    Ok(match done {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(1),
    })
}
