//! Operator commands beside the flow, in one place: they read the outbox tables, the
//! server and the durable checkpoint, never the running router's state, so they work
//! while it streams. Each has a thin twin in the binary's `cli/`.
//!
//! - `validate`: everything the router needs from the server and Kafka.
//! - `import`: a config and the first checkpoint from a Debezium connector's.
//! - `checkpoint`: an operator sets or forgets the stored position.
//! - `recover`: past a purged binlog, re-publishing from the outbox tables.
//! - `prune`: delete outbox rows that are provably delivered, in small batches.
//! - `replay`: publish chosen rows again with their event ids, throttled, audited.
//! - `reconcile`: compare a window of rows with what the topics hold, by event id.
//! - `parked`: what ordered parking holds back; an operator's release or drop.
//! - `audit`: the trail of every replay.
//! - `console`: the console's replay, as its caller.

pub mod audit;
pub mod checkpoint;
pub mod console;
pub mod dead_letters;
pub mod import;
pub mod parked;
pub mod prune;
pub mod reconcile;
pub mod recover;
pub mod replay;
pub mod validate;

use crate::checkpoint::CheckpointError;
use crate::secret::SecretError;
use crate::source::SourceError;

/// Why an operator command stopped.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Password(#[from] SecretError),
    #[error(transparent)]
    Sink(#[from] crate::sink::SinkError),
    #[error(transparent)]
    Kafka(#[from] crate::kafka::KafkaClientError),
    #[error(transparent)]
    Audit(#[from] audit::AuditError),
    #[error(transparent)]
    Pipeline(Box<crate::pipeline::PipelineError>),
    #[error(transparent)]
    Parking(#[from] crate::route::parking::ParkingError),
    #[error("outbox.on_invalid is not \"park\": nothing is parked, and no leader would carry out a release or drop")]
    ParkingOff,
    #[error(
        "aggregate {id:?} is not parked ({parked} aggregate(s) are: `outbox-router parked list`)"
    )]
    NotParked { id: String, parked: usize },
    #[error("aggregate id {id:?} is parked in more than one table or type ({candidates}): add --aggregate-type and/or --table")]
    AmbiguousAggregate { id: String, candidates: String },
    #[error("checkpoint move-topic: commit markers live on a checkpoint topic in exactly-once mode only; in at-least-once mode the store holds the position")]
    MoveTopicNeedsExactlyOnce,
    #[error("checkpoint move-topic: {topic} is delivery.checkpoint_topic already; --from names the topic the markers were on before it changed")]
    MoveTopicSameTopic { topic: String },
    #[error("checkpoint move-topic: {from} holds no commit marker for transactional.id {id}: nothing to carry over (check the topic's name, or set the position with `checkpoint set`)")]
    MoveTopicNoMarker { from: String, id: String },
    #[error("checkpoint move-topic: the commit marker on {from} cannot be read: {reason}")]
    MoveTopicBadMarker { from: String, reason: String },
    #[error("nothing selected: give event ids, an aggregate id, an event type, an id range or a time window (`replay --help`)")]
    NothingSelected,
    #[error("no checkpoint in {dir}: nothing is provably delivered yet, so nothing can be pruned; start the router first")]
    NoCheckpoint { dir: String },
    #[error("prune needs its own database user: set ops.user (with ops.password = \"${{env:NAME}}\" or \"${{file:PATH}}\") to a user with SELECT and DELETE on the outbox tables (and INSERT on an archive table); the streaming user source.user stays read-only")]
    NoPruneUser,
    #[error(
        "{table} has no one-column primary key ({found}): prune deletes by primary key; add one"
    )]
    NoPrimaryKey { table: String, found: String },
    #[error("the server reports no binlog position for a consistent snapshot (binlog_snapshot_file / binlog_snapshot_position: MariaDB only), so which rows are delivered cannot be proven; nothing deleted")]
    SnapshotUnsupported,
    #[error("stopped at {table}: the rows selected there are visible at binlog {snapshot}, but the durable checkpoint is {checkpoint} after waiting {waited_secs} s, so they are not all provably delivered; nothing more deleted. Start the router or let it catch up (`status`), then run prune again")]
    NotYetDelivered {
        table: String,
        snapshot: String,
        checkpoint: String,
        waited_secs: u64,
    },
    #[error("the durable checkpoint {checkpoint} is a position in the binlog of server_id {checkpoint_server}, with no GTID to compare, but source points at server_id {server}: file positions only mean something on the server that wrote them, so it proves nothing here (prune deletes nothing, reconcile proves nothing). Point source at the server the router streams from, or let the router write a checkpoint on this one first")]
    CheckpointOfOtherServer {
        checkpoint: String,
        checkpoint_server: u32,
        server: u32,
    },
    #[error("archiving into {archive}: copied {copied} row(s) but {deleted} were to be deleted; rolled back, nothing deleted in this batch (does {archive} have the outbox table's columns?)")]
    ArchiveMismatch {
        archive: String,
        copied: u64,
        deleted: u64,
    },
}

/// Refuses to judge `snapshot` (on server `server_id`) by a checkpoint whose file
/// position belongs to another server's binlog and that cannot compare by GTID.
fn same_server(
    checkpoint: &crate::checkpoint::Checkpoint,
    snapshot: &crate::position::Position,
    server_id: u32,
) -> Result<(), OpsError> {
    match checkpoint.foreign_file_position(snapshot, server_id) {
        Some(theirs) => Err(OpsError::CheckpointOfOtherServer {
            checkpoint: checkpoint.position.to_string(),
            checkpoint_server: theirs,
            server: server_id,
        }),
        None => Ok(()),
    }
}

impl From<crate::pipeline::PipelineError> for OpsError {
    fn from(e: crate::pipeline::PipelineError) -> Self {
        OpsError::Pipeline(Box::new(e))
    }
}
