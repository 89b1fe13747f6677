//! The parking topic read back: every record from the first, as a `read_committed`
//! consumer sees them (an aborted transaction's parked events were never parked).

use std::collections::HashSet;

use rdkafka::message::{BorrowedMessage, Headers, Message};

use super::record::{Entry, Kind};
use super::{Parking, ParkingError};
use crate::kafka::KafkaConfig;
use crate::outbox::ParkingConfig;

/// A record of the parking topic as Kafka holds it, for a release that re-publishes a
/// parked copy.
#[derive(Debug, Clone)]
pub struct RawRecord {
    /// Its key (the aggregate id).
    pub key: Vec<u8>,
    /// Its value.
    pub value: Option<Vec<u8>>,
    /// Its headers, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Its timestamp (ms since epoch).
    pub timestamp_ms: i64,
}

impl RawRecord {
    /// The entry it is (`Entry::read` on its parts).
    pub(super) fn entry(&self, offset: i64) -> Result<Entry, String> {
        Entry::read(
            Some(&self.key),
            self.value.as_deref(),
            &self.headers,
            self.timestamp_ms,
            offset,
        )
    }

    pub(super) fn of(m: &BorrowedMessage<'_>) -> Self {
        Self {
            key: m.key().unwrap_or_default().to_vec(),
            value: m.payload().map(<[u8]>::to_vec),
            headers: m
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                        .collect()
                })
                .unwrap_or_default(),
            timestamp_ms: m.timestamp().to_millis().unwrap_or_default(),
        }
    }
}

/// The parking topic as read back.
#[derive(Debug, Default)]
pub struct ReadBack {
    /// Every entry in order, with its whole record where the reader asked for it.
    pub entries: Vec<(Entry, Option<RawRecord>)>,
    /// The offset after the last record read: where to read on from.
    pub next: i64,
}

impl ReadBack {
    /// The event ids parked now, and those a drop settled without delivering them
    /// (`reconcile` counts them apart from the missing).
    pub fn fates(&self) -> (HashSet<&[u8]>, HashSet<&[u8]>) {
        let mut dropped: HashSet<&[u8]> = HashSet::new();
        let mut open: Vec<&super::Parked> = Vec::new();
        for (entry, _) in &self.entries {
            match entry {
                Entry::Event(p) => open.push(p),
                Entry::Outcome(o) if matches!(o.kind, Kind::Released | Kind::Dropped) => open
                    .retain(|p| {
                        let ended = p.aggregate == o.aggregate;
                        if ended && o.kind == Kind::Dropped {
                            dropped.extend(p.event_id.as_ref().map(|id| id.0.as_slice()));
                        }
                        !ended
                    }),
                _ => {}
            }
        }
        let parked = open
            .iter()
            .filter_map(|p| p.event_id.as_ref().map(|id| id.0.as_slice()))
            .collect();
        (parked, dropped)
    }

    /// The events parked now: each aggregate's since its last release or drop, in order.
    pub fn parked_now(&self) -> Vec<&super::Parked> {
        let mut out: Vec<&super::Parked> = Vec::new();
        for (entry, _) in &self.entries {
            match entry {
                Entry::Event(p) => out.push(p),
                Entry::Outcome(o) if matches!(o.kind, Kind::Released | Kind::Dropped) => {
                    out.retain(|p| p.aggregate != o.aggregate)
                }
                _ => {}
            }
        }
        out
    }
}

/// Every entry of the parking topic, in order, with the whole record of those `keep`
/// asks for; nothing when the topic does not exist.
pub fn read_all(
    kafka: &KafkaConfig,
    topic: &str,
    mut keep: impl FnMut(&Entry) -> bool,
) -> Result<ReadBack, ParkingError> {
    let read_failed = |reason: String| ParkingError::Read {
        topic: topic.to_string(),
        reason,
    };
    // A topic that does not exist reads as empty (`scan` looks it up).
    let mut out = Vec::new();
    let mut next = 0;
    let mut unreadable = None;
    crate::kafka::scan(
        kafka,
        "parking topic: records read back (of at most)",
        &[topic.to_string()],
        0,
        |_, m| {
            if unreadable.is_some() {
                return;
            }
            let raw = RawRecord::of(m);
            next = next.max(m.offset() + 1);
            match raw.entry(m.offset()) {
                Ok(entry) => {
                    let kept = keep(&entry).then_some(raw);
                    out.push((entry, kept));
                }
                Err(why) => unreadable = Some((m.offset(), why)),
            }
        },
    )
    .map_err(|e| read_failed(e.to_string()))?;
    if let Some((offset, why)) = unreadable {
        return Err(ParkingError::Unreadable {
            topic: topic.to_string(),
            offset,
            why,
        });
    }
    Ok(ReadBack { entries: out, next })
}

/// The set of parked aggregates as the parking topic records it, the requests not yet
/// answered, and the offset to watch for new requests from.
pub fn load(kafka: &KafkaConfig, config: &ParkingConfig) -> Result<(Parking, i64), ParkingError> {
    let read = read_all(kafka, &config.topic, |_| false)?;
    let mut parking = Parking::empty(config);
    for (entry, _) in &read.entries {
        parking.take_in(entry);
    }
    Ok((parking, read.next))
}
