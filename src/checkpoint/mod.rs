//! Checkpoint stage: the last position whose transaction, and every earlier one, Kafka
//! acknowledged — stored durably, versioned and checksummed.

mod record;
mod store;

pub use record::{now_ms, Checkpoint, RecordError};
pub use store::{CheckpointError, CheckpointStore};
