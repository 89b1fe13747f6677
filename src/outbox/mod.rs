//! Outbox stage: rows of outbox tables become `OutboxEvent`s. Inserts are events;
//! updates and deletes are counted and ignored (the outbox is append-only); a row that
//! cannot be an event is an `InvalidEvent` naming table, position and event id.

mod config;
mod event;
mod mapping;
mod policy;
mod rules;
pub mod trace;
mod value;

pub use config::{ColumnMapping, OutboxConfig, ParkingConfig};
pub use event::{Aggregate, EventId, InvalidEvent, OutboxEvent, RowCopy};
pub use mapping::{Ignored, MappedTransaction, Mapper};
pub use policy::OnInvalid;
pub use rules::{parse_placements, Additional, OnUpdate, Placement, Rules};

/// A column value as bytes (text as UTF-8, numbers as their text), `None` for NULL or a
/// value that has none: how an event id read from a table compares with a parked one.
pub fn column_bytes(value: &mysql_async::binlog::value::BinlogValue<'_>) -> Option<Vec<u8>> {
    value::to_bytes(value).ok().flatten()
}
