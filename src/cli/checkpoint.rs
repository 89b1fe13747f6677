//! `checkpoint show | set | init | reset`.

use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use super::args::CheckpointAction;
use crate::checkpoint::{Checkpoint, CheckpointStore};
use crate::config::Config;
use crate::ops;
use crate::ops::checkpoint::ShownFrom;
use crate::ops::import::offsets::DebeziumOffset;
use crate::pipeline::FirstStart;
use crate::position::Position;

fn print_checkpoint(cp: &Checkpoint) {
    println!("position: {}", cp.position);
    if let Some(id) = cp.server_id {
        println!("server_id: {id}");
    }
    println!("commit_time_ms: {}", cp.commit_time_ms);
    println!("written_at_ms: {}", cp.written_at_ms);
    if cp.commit_seq > 0 {
        println!("commit_seq: {}", cp.commit_seq);
    }
    if let Some(command) = cp.set_by {
        println!("set_by: {command}");
    }
}

/// Where the shown position came from, in exactly-once mode.
fn print_source(from: &ShownFrom, store_differs: Option<&Checkpoint>) {
    match from {
        ShownFrom::Store => {}
        ShownFrom::Marker { topic } => {
            println!("from: the fleet's newest commit marker on {topic} (whichever instance leads resumes there)");
            if let Some(store) = store_differs {
                println!(
                    "this instance's store: {} (its own copy; the marker decides)",
                    store.position
                );
            }
        }
        ShownFrom::NoMarker { topic } => {
            println!("from: this instance's store (no commit marker on {topic})")
        }
        ShownFrom::Unreadable { topic, .. } => {
            println!("from: this instance's store ({topic} could not be read)")
        }
    }
}

/// Shows, sets, creates or removes the stored checkpoint.
pub(super) async fn run(config: &Config, action: CheckpointAction) -> Result<ExitCode> {
    let dir = &config.checkpoint.dir;
    match action {
        CheckpointAction::Show { debezium, json } => {
            let shown = ops::checkpoint::show(config)?;
            if let ShownFrom::Unreadable { topic, why } = &shown.from {
                if debezium.is_some() {
                    bail!("the fleet's commit marker on {topic} cannot be read ({why}): this instance's store may be behind the fleet, so it is not given to Debezium");
                }
                eprintln!("warning: the fleet's commit marker on {topic} cannot be read ({why}): showing this instance's store, which may be behind the fleet");
            }
            let from_store = !matches!(shown.from, ShownFrom::Marker { .. });
            if from_store && !CheckpointStore::exists(dir) {
                bail!("{}", no_store_at(dir))
            }
            match (debezium, shown.checkpoint) {
                (Some(_), None) => bail!(
                    "no checkpoint in {}: nothing to give Debezium",
                    dir.display()
                ),
                (Some(server), Some(cp)) => {
                    let body = serde_json::json!({
                        "offsets": [{
                            "partition": { "server": server },
                            "offset": DebeziumOffset::of(&cp.position),
                        }]
                    });
                    println!("{}", serde_json::to_string_pretty(&body)?);
                }
                (None, None) if json => println!("null"),
                (None, None) => println!(
                    "no checkpoint in {} (the next run starts at source.start)",
                    dir.display()
                ),
                (None, Some(cp)) if json => println!("{}", serde_json::to_string(&cp)?),
                (None, Some(cp)) => {
                    print_checkpoint(&cp);
                    print_source(&shown.from, shown.store_differs.as_ref());
                }
            }
        }
        CheckpointAction::Set {
            position,
            ignore_prepared_xa,
        } => {
            let position: Position = position.parse().context("checkpoint set")?;
            let moved = ops::checkpoint::set(config, &position, ignore_prepared_xa).await?;
            println!("checkpoint set to {position}: {moved}");
        }
        CheckpointAction::MoveTopic { from } => {
            let (position, moved) = ops::checkpoint::move_topic(config, &from).await?;
            println!(
                "the newest commit marker on {from} ({position}) carried over to {}: {moved}",
                config.delivery.checkpoint_topic
            );
        }
        CheckpointAction::Reset { yes } => {
            if !yes {
                bail!("checkpoint reset forgets where the router stopped; repeat with --yes to confirm");
            }
            ops::checkpoint::reset(dir)?;
            println!("checkpoint removed from {}", dir.display());
        }
        CheckpointAction::Init => init(config).await?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Creates the store where a first start is allowed, and records the first start on
/// Kafka where the mode or `checkpoint.name` asks for it; nothing changes once a
/// position exists.
async fn init(config: &Config) -> Result<()> {
    let dir = &config.checkpoint.dir;
    let init = crate::pipeline::init(config).await?;
    match init.store_created {
        true => println!(
            "checkpoint store created in {}; the first run starts at source.start",
            dir.display()
        ),
        false => println!(
            "checkpoint store {} already exists; nothing changed there",
            dir.display()
        ),
    }
    let topic = &config.delivery.checkpoint_topic;
    let Some(recorded) = init.recorded else {
        return Ok(());
    };
    let who = match config.delivery.exactly_once() {
        true => format!("transactional.id {}", config.delivery.transactional_id),
        false => format!(
            "checkpoint.name {}",
            config.checkpoint.name.as_deref().unwrap_or_default()
        ),
    };
    match recorded {
        FirstStart::HasMarker => println!(
            "{topic} already holds a commit marker for {who}: runs resume there; nothing changed"
        ),
        FirstStart::HasStore => println!(
            "the checkpoint store holds a position: the next run resumes there; nothing changed"
        ),
        FirstStart::AlreadyRecorded => println!(
            "{topic} already records the first start of {who}; nothing changed"
        ),
        FirstStart::Recorded if config.delivery.exactly_once() => println!(
            "recorded the first start of {who} on {topic}, its position fixed now: whichever instance leads first starts there"
        ),
        FirstStart::Recorded => println!("recorded the first start of {who} on {topic}"),
    }
    Ok(())
}

/// The plain answer of a read-only command pointed at a directory without a store.
pub(super) fn no_store_at(dir: &std::path::Path) -> String {
    format!(
        "no checkpoint at {}: there is no checkpoint store in that directory (is checkpoint.dir right? a first start creates one with `checkpoint init` or `run --init`)",
        dir.display()
    )
}
