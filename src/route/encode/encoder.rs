//! The one trait every value format implements.

use super::registry::RegistryError;
use crate::outbox::OutboxEvent;

/// What an encoder makes of one event: the value (`None`: a null value, for a NULL
/// payload), or why this event cannot be a value in this format (an invalid row, for the
/// `on_invalid` policy).
pub type Encoded = Result<Option<Vec<u8>>, String>;

/// One value format.
pub trait Encoder: std::fmt::Debug + Send + Sync {
    /// The value of `e`'s record on `topic`, stamped `time_ms`. An encoder may add
    /// headers to `e` (a CloudEvent's `ce_*`); it leaves the payload in place unless
    /// `moves_payload` says it takes it. `Err` only when a server it needs failed (the
    /// schema registry): the transaction is retried, never turned into invalid rows.
    fn encode(
        &self,
        e: &mut OutboxEvent,
        topic: &str,
        time_ms: i64,
    ) -> Result<Encoded, RegistryError>;

    /// The value is the payload as stored, taken out of the event without a copy: its
    /// size is known, and checked, before encoding, since an invalid event's report could
    /// not show a payload already taken.
    fn moves_payload(&self) -> bool {
        false
    }

    /// Where the schema of a value this encoder made is served (a CloudEvent's
    /// `dataschema`); none for a format without a schema registry.
    fn schema_uri(&self, _value: &[u8]) -> Option<String> {
        None
    }
}
