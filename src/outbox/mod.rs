//! Outbox stage: rows of outbox tables become `OutboxEvent`s. Inserts are events;
//! updates and deletes are counted and ignored (the outbox is append-only); a row that
//! cannot be an event is an `InvalidEvent` naming table, position and event id.

mod event;
mod mapping;
mod value;

pub use event::{EventId, InvalidEvent, OutboxEvent};
pub use mapping::{ColumnMapping, MappedTransaction, Mapper};
