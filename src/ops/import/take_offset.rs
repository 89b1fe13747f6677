//! `import-debezium --offsets`: the connector's stored offset as the router's first
//! checkpoint, once the source shows it can serve it (as a checkpoint's would be on
//! start).

use std::collections::BTreeMap;

use super::offsets::{self, ConnectorKey, OffsetError, OffsetStore};
use crate::checkpoint::{Checkpoint, CheckpointError, CheckpointStore, OperatorCommand};
use crate::config::Config;
use crate::pipeline::{record_operator_position, OperatorMove, PipelineError};
use crate::position::Position;
use crate::source::server::{refuse_move_past_prepared_xa, resume_by_gtid};
use crate::source::{self, server, SourceError};

/// The checkpoint an import wrote.
pub struct TakenOver {
    pub connector: String,
    pub position: Position,
    /// It resumes by GTID state (else by file position).
    pub by_gtid: bool,
    /// What recording it did (exactly-once: the fleet's commit marker).
    pub fleet: OperatorMove,
    /// Binlog events Debezium had read into the transaction at `position`: that
    /// transaction is sent again from its start.
    pub events_into_transaction: Option<u64>,
}

/// Why an offset cannot become the checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum TakeOverError {
    #[error(transparent)]
    Offset(#[from] OffsetError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Pipeline(Box<PipelineError>),
    #[error("Debezium's offset of connector {connector:?}: {reason}")]
    NoPosition { connector: String, reason: String },
    #[error("the router already has a checkpoint in {dir} ({position}): importing would move it; `checkpoint reset --yes` first if that is what you want")]
    CheckpointExists { dir: String, position: String },
    #[error("the fleet already has a checkpoint: commit marker #{seq} on {topic} ({position}), where whichever instance leads resumes; importing would move every instance (this one's store is only its copy). `checkpoint set` moves a fleet's position when that is what you want")]
    FleetHasMarker {
        topic: String,
        seq: u64,
        position: String,
    },
    #[error("Debezium's offset of connector {connector:?} ({position}) cannot be used on this server: {error}")]
    NotOnThisServer {
        connector: String,
        position: String,
        error: SourceError,
    },
    #[error("Debezium's offset of connector {connector:?} is a position in the binlog of server {theirs}, and {host}:{port} is server {ours}: file positions only mean something on the server that wrote them; point source at that server, or use GTIDs")]
    OtherServer {
        connector: String,
        theirs: u64,
        host: String,
        port: u16,
        ours: u32,
    },
}

impl From<PipelineError> for TakeOverError {
    fn from(e: PipelineError) -> Self {
        TakeOverError::Pipeline(Box::new(e))
    }
}

/// Reads connector `settings`' offset from `store` and writes it to the checkpoint
/// store as the operator's, unless a checkpoint exists or the server cannot serve it.
pub async fn take_over_offset(
    config: &Config,
    settings: &BTreeMap<String, String>,
    store: &OffsetStore,
    ignore_prepared_xa: bool,
) -> Result<TakenOver, TakeOverError> {
    let key = ConnectorKey::of(settings)?;
    let offset = tokio::task::block_in_place(|| offsets::read(store, &key, &config.kafka))?;
    let position = offset
        .position()
        .map_err(|reason| TakeOverError::NoPosition {
            connector: key.name.clone(),
            reason,
        })?;
    let dir = &config.checkpoint.dir;
    let checkpoints = CheckpointStore::create(dir)?;
    if let Some(existing) = checkpoints.load()? {
        return Err(TakeOverError::CheckpointExists {
            dir: dir.display().to_string(),
            position: existing.position.to_string(),
        });
    }
    // In exactly-once mode the fleet's position is the marker, whatever this volume holds
    // (an instance that never led has an empty store).
    if let Some(marker) = crate::pipeline::fleet_marker(config)? {
        return Err(TakeOverError::FleetHasMarker {
            topic: config.delivery.checkpoint_topic.clone(),
            seq: marker.commit_seq,
            position: marker.position.to_string(),
        });
    }
    let mut conn = source::connect(&config.source).await?;
    refuse_move_past_prepared_xa(&mut conn, "import-debezium --offsets", ignore_prepared_xa)
        .await?;
    let flavor = server::flavor(&mut conn).await?;
    let by_gtid = resume_by_gtid(&config.source, &mut conn, flavor, &position)
        .await
        .map_err(|error| TakeOverError::NotOnThisServer {
            connector: key.name.clone(),
            position: position.to_string(),
            error,
        })?;
    let ours = server::server_id(&mut conn).await?;
    if let Some(theirs) = offset.server_id {
        if theirs != u64::from(ours) && !by_gtid {
            return Err(TakeOverError::OtherServer {
                connector: key.name.clone(),
                theirs,
                host: config.source.host.clone(),
                port: config.source.port,
                ours,
            });
        }
    }
    let commit_time_ms = offset.ts_sec.map_or(0, |s| s * 1000);
    // The store is opened again to record it (one handle at a time).
    drop(checkpoints);
    let fleet = record_operator_position(
        config,
        Checkpoint::new(position.clone(), commit_time_ms)
            .on_server(ours)
            .set_by(OperatorCommand::ImportDebezium),
    )
    .await?;
    Ok(TakenOver {
        fleet,
        connector: key.name,
        position,
        by_gtid,
        events_into_transaction: offset.inside_transaction().then_some(offset.event),
    })
}
