//! Why the pipeline stopped, and whether a restart from the checkpoint may help.

use crate::checkpoint::CheckpointError;
use crate::kafka::KafkaClientError;
use crate::monitor::RestartReason;
use crate::outbox::InvalidEvent;
use crate::route::{AvroError, FormatError, RegistryError};
use crate::sink::SinkError;
use crate::source::SourceError;

/// Why the pipeline stopped.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    // Not a `source`: the message already contains it, and error chains would repeat it.
    #[error("{0}; the checkpoint stays before this transaction: fix the row's data or the column mapping, then restart")]
    Invalid(InvalidEvent),
    #[error("{0}; rows read from a table (snapshot, recover, replay) are not parked: on_invalid = \"park\" keeps the binlog stream's order, and a table read stops at the first invalid row as `fail` does. Fix the row's data or the column mapping, then run it again")]
    InvalidTableRow(InvalidEvent),
    #[error(transparent)]
    Parking(#[from] crate::route::parking::ParkingError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Avro(#[from] AvroError),
    #[error("the server is not configured for row-based CDC: {}", problems.join("; "))]
    ServerSettings { problems: Vec<String> },
    #[error("outbox changes never reach the binlog: {}; remove the filter from the server's configuration (binlog_do_db / binlog_ignore_db) and restart it", filters.join("; "))]
    BinlogFiltered { filters: Vec<String> },
    #[error("outbox table(s) not on the server: {}; names are case-sensitive and must exist before the router starts: fix outbox.tables (or use a pattern such as \"tenant_*.outbox\" for tables created later)", tables.join("; "))]
    OutboxTablesMissing { tables: Vec<String> },
    #[error("{} XA transaction(s) are prepared on the server (XA RECOVER: {}) and not yet committed: their rows are logged at PREPARE, before this first start's position, and would never be published when they commit; commit or roll them back first, or start earlier (source.start = \"FILE:OFFSET\" before their PREPARE)", xids.len(), xids.join(" "))]
    PreparedXa { xids: Vec<String> },
    #[error("no checkpoint store in {dir}, but the router named {name} (checkpoint.name) started before: {how} on {topic}. The volume holding the store was lost or emptied, and starting over at source.start would skip every event since its last checkpoint. Recover, then start again: `outbox-router recover --since TIME` re-publishes the outbox rows written since TIME (take it before the store was lost; repeats keep their event ids) and stores the position where it read; or `outbox-router checkpoint set FILE:OFFSET` with the last position the router logged")]
    StoreLost {
        dir: String,
        topic: String,
        name: String,
        how: String,
    },
    #[error("exactly-once mode found no commit marker for transactional.id {transactional_id} on {topic}, no checkpoint in the store and no first start recorded: the topic was recreated, the id renamed or the marker deleted — or this is a first start. A first start is explicit: `outbox-router checkpoint init` or `run --init` (either records on the topic that the first run starts at source.start). Otherwise set the position the marker held with `checkpoint set` (the last one the router logged), so nothing is skipped or repeated")]
    NoCommitMarker {
        topic: String,
        transactional_id: String,
    },
    #[error("exactly-once mode found no commit marker for transactional.id {transactional_id} on {topic}, but the checkpoint store {dir} holds {position}: the store is a cache written after each marker, so the marker was lost (a recreated topic, a renamed id) or the store comes from at-least-once mode; resuming from it could skip or repeat events. If {position} is where delivery stopped, adopt it with `outbox-router checkpoint set '{position}'`; otherwise set the position the marker held")]
    StoreWithoutMarker {
        topic: String,
        transactional_id: String,
        dir: String,
        position: String,
    },
    #[error("exactly-once mode found no commit marker for transactional.id {transactional_id} on {topic}, and {how}: a position existed, so this is not a first start and `--init` / `checkpoint init` cannot make it one. Set the position the marker held with `checkpoint set` (the last one the router logged), or `recover --since` to re-publish from the outbox table")]
    MarkerLost {
        topic: String,
        transactional_id: String,
        how: String,
    },
    #[error("exactly-once mode found no commit marker for transactional.id {transactional_id} on {topic}, but the fleet's lock topic {lock_topic} notes that its markers live on {noted}: delivery.checkpoint_topic changed name, and an instance cannot declare a first start where the fleet had a position. Set delivery.checkpoint_topic back to {noted}, or carry the marker over with `outbox-router checkpoint move-topic --from {noted}` (or `checkpoint set POSITION`), which commits it on {topic} for the whole fleet")]
    CheckpointTopicMoved {
        topic: String,
        transactional_id: String,
        lock_topic: String,
        noted: String,
    },
    #[error("the checkpoint store {dir} holds `{command}`'s position {position}, written by an older build that applied it only when this instance next led — by then the fleet may have delivered far past it. Nothing was applied: run `outbox-router {command}` again with this build (it takes effect for the whole fleet at once), or `checkpoint reset --yes` here to drop the record")]
    UncommittedOperatorRecord {
        dir: String,
        position: String,
        command: String,
    },
    #[error("{0}")]
    Rules(String),
    #[error("cannot follow monitor.control_topic {topic} (where the console's pauses are): {reason}. Grant the router's Kafka user CREATE (or create the topic: one partition, cleanup.policy=delete, retention.ms=-1), DESCRIBE and READ on it, or set monitor.control_topic = \"off\" (no pauses)")]
    ControlTopic { topic: String, reason: String },
    #[error("source.snapshot = \"initial\" needs MariaDB's binlog_snapshot_file/position (not available on this server): use snapshot = \"never\" and `recover --since` for the rows already there")]
    SnapshotUnsupported,
    #[error("the checkpoint has no commit time to recover from: pass --since UNIX_SECONDS (when the router last ran, minus a margin)")]
    RecoverWithoutTime,
    #[error("no outbox row was written since unix time {since} (column {column}): moving the checkpoint to {resume_at} would pass over the purged binlog with nothing re-published; check --since / --timestamp-column (and --dry-run to see the counts); if the outbox really had no writes then, repeat with --allow-empty")]
    RecoverFoundNothing {
        since: i64,
        column: String,
        resume_at: String,
    },
    #[error("another replica with source.server_id = {server_id} took the binlog stream {times} times within {window_mins} minutes: two routers (or a router and a replica) share the id; give each its own source.server_id and restart")]
    ServerIdConflicts {
        server_id: u32,
        times: usize,
        window_mins: u64,
    },
    #[error("the commit marker of {key} on {topic} is unreadable: {reason}; inspect the topic, then move the checkpoint deliberately with `checkpoint set` and delete the record")]
    BadMarker {
        topic: String,
        key: String,
        reason: String,
    },
    #[error(transparent)]
    Lock(#[from] crate::ha::LockError),
    #[error("the stop did not finish within pipeline.shutdown_timeout_secs = {secs} (Kafka or the server did not answer); nothing was lost: the checkpoint is the last durable one and what was not acknowledged is read again on the next start")]
    StopTimedOut { secs: u64 },
    #[error("the router's {task} task ended unexpectedly: {reason} (a bug: please report it with the log)")]
    TaskFailed { task: &'static str, reason: String },
}

/// A format that cannot start is a setting to fix, unless its schemas could not be
/// registered: that is the registry's failure, retried like one.
impl From<FormatError> for PipelineError {
    fn from(e: FormatError) -> Self {
        match e {
            FormatError::Avro(e) => PipelineError::Avro(e),
            other => PipelineError::Rules(other.to_string()),
        }
    }
}

impl From<RegistryError> for PipelineError {
    fn from(e: RegistryError) -> Self {
        PipelineError::Avro(AvroError::Registry(e))
    }
}

impl From<InvalidEvent> for PipelineError {
    fn from(e: InvalidEvent) -> Self {
        PipelineError::Invalid(e)
    }
}

impl PipelineError {
    /// True when another producer with our transactional.id took over.
    pub fn is_fenced(&self) -> bool {
        matches!(self, PipelineError::Sink(SinkError::Fenced { .. }))
    }

    /// True when the needed binlog is gone from the server (exit code 3).
    pub fn is_purged(&self) -> bool {
        matches!(self, PipelineError::Source(SourceError::Purged { .. }))
    }

    /// True when no safe start position is known and restarting cannot find one: an
    /// operator must set it (`recover`, `checkpoint set`) or bring back what was lost.
    pub fn needs_operator(&self) -> bool {
        matches!(
            self,
            PipelineError::StoreLost { .. }
                | PipelineError::NoCommitMarker { .. }
                | PipelineError::StoreWithoutMarker { .. }
                | PipelineError::MarkerLost { .. }
                | PipelineError::CheckpointTopicMoved { .. }
                | PipelineError::UncommittedOperatorRecord { .. }
                | PipelineError::Source(SourceError::CheckpointOfOtherServer { .. })
                | PipelineError::Checkpoint(CheckpointError::Missing { .. })
        )
    }

    /// Why a transient error restarts the pipeline, for `restarts_total{reason}`.
    pub fn restart_reason(&self) -> RestartReason {
        match self {
            PipelineError::Source(SourceError::ServerIdConflict { .. }) => {
                RestartReason::ServerIdConflict
            }
            PipelineError::Sink(SinkError::Unproven { .. }) => RestartReason::UnprovenDelivery,
            PipelineError::Sink(SinkError::Client(KafkaClientError::CreateTopic { .. })) => {
                RestartReason::Topic
            }
            PipelineError::Sink(_) => RestartReason::Delivery,
            PipelineError::Avro(_) => RestartReason::Registry,
            _ => RestartReason::Source,
        }
    }

    /// True when restarting from the checkpoint may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            PipelineError::Source(e) => e.is_transient(),
            PipelineError::Sink(e) => e.is_transient(),
            PipelineError::Lock(crate::ha::LockError::Topic(e)) => e.is_transient(),
            PipelineError::Avro(AvroError::Registry(e)) => e.is_transient(),
            PipelineError::Parking(e) => e.is_transient(),
            _ => false,
        }
    }
}
