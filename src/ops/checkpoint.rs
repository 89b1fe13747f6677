//! `checkpoint set` and `checkpoint reset`: an operator moves or forgets the stored
//! position. (`checkpoint init` is the pipeline's first start, `pipeline::init`.)

use std::path::Path;

use super::OpsError;
use crate::checkpoint::{Checkpoint, CheckpointStore, OperatorCommand};
use crate::position::Position;
use crate::source::{self, server::refuse_move_past_prepared_xa, SourceConfig};

/// Stores `position` (on `source`'s server) as the checkpoint in `dir`, marked as the
/// operator's: refused while XA branches are prepared unless `ignore_prepared_xa`.
pub async fn set(
    source: &SourceConfig,
    dir: &Path,
    position: &Position,
    ignore_prepared_xa: bool,
) -> Result<(), OpsError> {
    let mut conn = source::connect(source).await?;
    refuse_move_past_prepared_xa(&mut conn, "checkpoint set", ignore_prepared_xa).await?;
    let store = CheckpointStore::create(dir)?;
    let server_id = source::server::server_id(&mut conn).await?;
    store.save(
        &Checkpoint::new(position.clone(), 0)
            .on_server(server_id)
            .set_by(OperatorCommand::CheckpointSet),
    )?;
    Ok(())
}

/// Forgets the checkpoint in `dir`.
pub fn reset(dir: &Path) -> Result<(), OpsError> {
    CheckpointStore::open(dir)?.reset()?;
    Ok(())
}
