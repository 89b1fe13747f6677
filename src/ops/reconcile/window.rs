//! The window's events as the table says they should reach Kafka, kept small: an id
//! hash, a fingerprint of key and value, a topic index and counts per event.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// An id as the map keeps it.
pub(super) type IdHash = u128;

pub(super) fn id_hash(id: &[u8]) -> IdHash {
    let half = |salt: u8| {
        let mut h = DefaultHasher::new();
        salt.hash(&mut h);
        id.hash(&mut h);
        h.finish()
    };
    (u128::from(half(1)) << 64) | u128::from(half(2))
}

pub(super) fn fingerprint(key: &[u8], value: Option<&[u8]>) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    value.hash(&mut h);
    h.finish()
}

/// What the table says one event should look like, and what Kafka showed (40 bytes: a
/// million of them is most of the window's memory).
pub(super) struct Expected {
    /// Key and value.
    pub(super) fingerprint: u64,
    /// Key alone: a dead letter's value names a binlog position a table read cannot know,
    /// so only its topic and key are compared.
    pub(super) key: u64,
    /// When the row was written (ms), `i64::MIN` when unknown.
    pub(super) time_ms: i64,
    pub(super) topic: u32,
    pub(super) seen: u16,
    pub(super) wrong: u16,
    pub(super) dead_letter: bool,
}

/// The window's events, as routed.
#[derive(Default)]
pub(super) struct Window {
    pub(super) events: HashMap<IdHash, Expected>,
    pub(super) topics: Vec<String>,
    pub(super) topic_indexes: HashMap<String, u32>,
}

impl Window {
    pub(super) fn topic_index(&mut self, topic: &str) -> u32 {
        if let Some(i) = self.topic_indexes.get(topic) {
            return *i;
        }
        let i = self.topics.len() as u32;
        self.topics.push(topic.to_string());
        self.topic_indexes.insert(topic.to_string(), i);
        i
    }
}
