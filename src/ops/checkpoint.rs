//! `checkpoint show`, `set` and `reset`: an operator reads, moves or forgets the
//! position. (`checkpoint init` is the pipeline's first start, `pipeline::init`.)

use std::path::Path;

use super::OpsError;
use crate::checkpoint::{Checkpoint, CheckpointStore, OperatorCommand};
use crate::config::Config;
use crate::pipeline::{record_operator_position, OperatorMove};
use crate::position::Position;
use crate::source::{self, server::refuse_move_past_prepared_xa};

/// Makes `position` (on the source's server) the checkpoint, marked as the operator's:
/// in exactly-once mode for the whole fleet at once (the commit marker), else in this
/// router's store. Refused while XA branches are prepared unless `ignore_prepared_xa`.
pub async fn set(
    config: &Config,
    position: &Position,
    ignore_prepared_xa: bool,
) -> Result<OperatorMove, OpsError> {
    let mut conn = source::connect(&config.source).await?;
    refuse_move_past_prepared_xa(&mut conn, "checkpoint set", ignore_prepared_xa).await?;
    let server_id = source::server::server_id(&mut conn).await?;
    let checkpoint = Checkpoint::new(position.clone(), 0)
        .on_server(server_id)
        .set_by(OperatorCommand::CheckpointSet);
    Ok(record_operator_position(config, checkpoint).await?)
}

/// Carries the newest commit marker of the transactional id over from checkpoint topic
/// `from` to the configured one, for the whole fleet; returns its position.
pub async fn move_topic(config: &Config, from: &str) -> Result<(String, OperatorMove), OpsError> {
    let delivery = &config.delivery;
    if !delivery.exactly_once() {
        return Err(OpsError::MoveTopicNeedsExactlyOnce);
    }
    if from == delivery.checkpoint_topic {
        return Err(OpsError::MoveTopicSameTopic {
            topic: from.to_string(),
        });
    }
    let id = &delivery.transactional_id;
    let bytes = tokio::task::block_in_place(|| crate::kafka::last(&config.kafka, from, id))?
        .ok_or_else(|| OpsError::MoveTopicNoMarker {
            from: from.to_string(),
            id: id.clone(),
        })?;
    let marker = Checkpoint::decode(&bytes).map_err(|e| OpsError::MoveTopicBadMarker {
        from: from.to_string(),
        reason: e.to_string(),
    })?;
    let position = marker.position.to_string();
    // Numbered past its old number and whatever the new topic holds, by the command
    // that records it.
    let carried = marker.set_by(OperatorCommand::CheckpointSet);
    Ok((position, record_operator_position(config, carried).await?))
}

/// Where `checkpoint show` read the position it shows.
#[derive(Debug)]
pub enum ShownFrom {
    /// At-least-once: this instance's store, its only record of progress.
    Store,
    /// Exactly-once: the fleet's newest commit marker on `topic`, where any instance
    /// resumes.
    Marker { topic: String },
    /// Exactly-once, no marker on `topic` (a first start, or a lost topic): this
    /// instance's store.
    NoMarker { topic: String },
    /// Exactly-once, `topic` could not be read: this instance's store, which may be
    /// behind the fleet.
    Unreadable { topic: String, why: String },
}

/// What `checkpoint show` shows: the position, where it was read, and this instance's
/// store beside a marker that differs from it.
#[derive(Debug)]
pub struct Shown {
    pub checkpoint: Option<Checkpoint>,
    pub from: ShownFrom,
    pub store_differs: Option<Checkpoint>,
}

/// The position an operator asks for on any instance: in exactly-once mode the fleet's
/// (its newest commit marker), else this instance's store. A standby's volume holds
/// what it last knew, not what the fleet did since.
pub fn show(config: &Config) -> Result<Shown, OpsError> {
    let store = CheckpointStore::peek(&config.checkpoint.dir)?;
    if !config.delivery.exactly_once() {
        return Ok(Shown {
            checkpoint: store,
            from: ShownFrom::Store,
            store_differs: None,
        });
    }
    let topic = config.delivery.checkpoint_topic.clone();
    Ok(match crate::pipeline::fleet_marker(config) {
        Ok(Some(marker)) => Shown {
            store_differs: store.filter(|s| s.position != marker.position),
            checkpoint: Some(marker),
            from: ShownFrom::Marker { topic },
        },
        Ok(None) => Shown {
            checkpoint: store,
            from: ShownFrom::NoMarker { topic },
            store_differs: None,
        },
        Err(e) => Shown {
            checkpoint: store,
            from: ShownFrom::Unreadable {
                topic,
                why: crate::cause_chain::cause_chain(&anyhow::Error::new(e)),
            },
            store_differs: None,
        },
    })
}

/// Forgets the checkpoint in `dir`.
pub fn reset(dir: &Path) -> Result<(), OpsError> {
    CheckpointStore::open(dir)?.reset()?;
    Ok(())
}
