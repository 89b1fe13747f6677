//! Records Kafka refused for good (a topic's ACL, a record over the topic's
//! `max.message.bytes`): the run that met one stopped, and the next one parks the
//! refused event's aggregate from that event on, as if the row had been invalid.
//!
//! A topic the router may not write to refuses every record for it, not one: in the
//! next run every aggregate with an event for that topic parks from its first one on,
//! so that one restart covers them all (an event read again from before the refused
//! one was refused too, or was delivered: parking it again is a duplicate, never a
//! reordering). A release Kafka accepts proves the topic writable again, and the
//! topic's refusal ends there; so does the run (the next one meets it again, if it
//! still holds).

use std::sync::Arc;

use crate::outbox::EventId;

/// A record Kafka refused for good, from the failed run's error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The refused record's event.
    pub event_id: EventId,
    /// Where it was going.
    pub topic: Arc<str>,
    /// What Kafka said, for the parked events' reason.
    pub reason: String,
    /// Whether every record for the topic is refused (its ACL), or this one.
    pub scope: RefusalScope,
}

/// What a refusal covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalScope {
    /// The record itself (its content).
    Record,
    /// The record, too large for its topic: parked without its value, which the
    /// parking topic may refuse too — the parked copy names the row, and a release
    /// reads the row again.
    TooLarge,
    /// Every record for its topic (the router may not write there).
    Topic,
}

impl Refusal {
    /// The reason the parked events carry.
    pub fn reason(&self) -> String {
        match self.scope {
            RefusalScope::Record => format!(
                "Kafka refused the record for topic {}: {}",
                self.topic, self.reason
            ),
            RefusalScope::TooLarge => format!(
                "Kafka refused the record for topic {} as too large: {}; parked without its value (a release reads the row again)",
                self.topic, self.reason
            ),
            RefusalScope::Topic => format!(
                "Kafka refuses every record for topic {} ({}; first met at event {})",
                self.topic, self.reason, self.event_id
            ),
        }
    }
}
