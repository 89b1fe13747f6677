//! Why the pipeline stopped, and whether a restart from the checkpoint may help.

use crate::checkpoint::CheckpointError;
use crate::monitor::RestartReason;
use crate::outbox::InvalidEvent;
use crate::route::{AvroError, RegistryError};
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
    #[error("{0}\n  the checkpoint stays before this transaction; fix the row's data or the column mapping, then restart")]
    Invalid(InvalidEvent),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Avro(#[from] AvroError),
    #[error("the server is not configured for row-based CDC:\n  {0}")]
    Settings(String),
    #[error("{0}")]
    Config(String),
    #[error("another replica with source.server_id = {server_id} took the binlog stream {times} times within {window_mins} minutes: two routers (or a router and a replica) share the id; give each its own source.server_id and restart")]
    ServerIdConflicts {
        server_id: u32,
        times: usize,
        window_mins: u64,
    },
    #[error("internal error: {0}")]
    Internal(String),
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
    /// True when the needed binlog is gone from the server (exit code 3).
    pub fn is_purged(&self) -> bool {
        matches!(self, PipelineError::Source(SourceError::Purged { .. }))
    }

    /// Why a transient error restarts the pipeline, for `restarts_total{reason}`.
    pub fn restart_reason(&self) -> RestartReason {
        match self {
            PipelineError::Source(SourceError::ServerIdConflict { .. }) => {
                RestartReason::ServerIdConflict
            }
            PipelineError::Sink(SinkError::Unproven { .. }) => RestartReason::UnprovenDelivery,
            PipelineError::Sink(SinkError::CreateTopic { .. }) => RestartReason::Topic,
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
            PipelineError::Avro(AvroError::Registry(e)) => e.is_transient(),
            _ => false,
        }
    }
}
