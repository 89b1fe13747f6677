//! Checkpoint stage: the last position whose transaction, and every earlier one, Kafka
//! acknowledged — stored durably, versioned and checksummed.

mod config;
mod record;
mod store;
mod writer;

pub use config::CheckpointConfig;
pub use record::{now_ms, Checkpoint, OperatorCommand, RecordError};
pub use store::{CheckpointError, CheckpointStore};
pub use writer::CheckpointWriter;
