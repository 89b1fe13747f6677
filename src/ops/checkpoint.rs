//! `checkpoint set` and `checkpoint reset`: an operator moves or forgets the stored
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

/// Forgets the checkpoint in `dir`.
pub fn reset(dir: &Path) -> Result<(), OpsError> {
    CheckpointStore::open(dir)?.reset()?;
    Ok(())
}
