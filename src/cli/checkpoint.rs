//! `checkpoint show | set | init | reset`.

use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use super::args::CheckpointAction;
use outbox_router::checkpoint::{Checkpoint, CheckpointStore};
use outbox_router::config::Config;
use outbox_router::ops::import::offsets::DebeziumOffset;
use outbox_router::pipeline::refuse_move_past_prepared_xa;
use outbox_router::position::Position;
use outbox_router::sink::KafkaSink;
use outbox_router::source;

/// Shows, sets, creates or removes the stored checkpoint.
pub(super) async fn run(config: &Config, action: CheckpointAction) -> Result<ExitCode> {
    let dir = &config.checkpoint.dir;
    match action {
        CheckpointAction::Show { .. } if !CheckpointStore::exists(dir) => {
            bail!("{}", super::no_store_at(dir))
        }
        CheckpointAction::Show {
            debezium: Some(server),
            ..
        } => {
            let Some(cp) = CheckpointStore::peek(dir)? else {
                bail!(
                    "no checkpoint in {}: nothing to give Debezium",
                    dir.display()
                )
            };
            let body = serde_json::json!({
                "offsets": [{
                    "partition": { "server": server },
                    "offset": DebeziumOffset::of(&cp.position),
                }]
            });
            println!("{}", serde_json::to_string_pretty(&body)?);
        }
        CheckpointAction::Show { json, .. } => match CheckpointStore::peek(dir)? {
            None if json => println!("null"),
            None => println!(
                "no checkpoint in {} (the next run starts at source.start)",
                dir.display()
            ),
            Some(cp) if json => println!("{}", serde_json::to_string(&cp)?),
            Some(cp) => {
                println!("position: {}", cp.position);
                if let Some(id) = cp.server_id {
                    println!("server_id: {id}");
                }
                println!("commit_time_ms: {}", cp.commit_time_ms);
                println!("written_at_ms: {}", cp.written_at_ms);
            }
        },
        CheckpointAction::Set {
            position,
            ignore_prepared_xa,
        } => {
            let position: Position = position.parse().context("checkpoint set")?;
            let mut conn = source::connect(&config.source).await?;
            refuse_move_past_prepared_xa(&mut conn, "checkpoint set", ignore_prepared_xa).await?;
            let store = CheckpointStore::create(dir)?;
            let written_at_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0);
            store.save(&Checkpoint {
                position: position.clone(),
                delivered_through: None,
                server_id: Some(source::server::server_id(&mut conn).await?),
                commit_time_ms: 0,
                written_at_ms,
            })?;
            println!("checkpoint set to {position}");
        }
        CheckpointAction::Reset { yes } => {
            if !yes {
                bail!("checkpoint reset forgets where the router stopped; repeat with --yes to confirm");
            }
            CheckpointStore::open(dir)?.reset()?;
            println!("checkpoint removed from {}", dir.display());
        }
        CheckpointAction::Init => {
            if CheckpointStore::exists(dir) {
                println!(
                    "checkpoint store {} already exists; nothing changed",
                    dir.display()
                );
            } else {
                CheckpointStore::create(dir)?;
                println!(
                    "checkpoint store created in {}; the first run starts at source.start",
                    dir.display()
                );
            }
            if config.delivery.exactly_once() {
                init_exactly_once(config).await?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Exactly-once mode's first start is recorded on Kafka, where its truth is: the store
/// is a cache an empty volume recreates. Nothing is written once a marker exists.
async fn init_exactly_once(config: &Config) -> Result<()> {
    let (kafka, delivery) = (&config.kafka, &config.delivery);
    KafkaSink::ensure_checkpoint_topic(kafka, delivery)?;
    let marker = tokio::task::block_in_place(|| KafkaSink::last_marker(kafka, delivery))?;
    if marker.is_some() {
        println!(
            "{} already holds a commit marker for transactional.id {}: runs resume there; nothing changed",
            delivery.checkpoint_topic, delivery.transactional_id
        );
        return Ok(());
    }
    KafkaSink::allow_first_start(kafka, delivery).await?;
    println!(
        "recorded on {} that the first exactly-once run of transactional.id {} starts at source.start",
        delivery.checkpoint_topic, delivery.transactional_id
    );
    Ok(())
}
