//! The fleet's set of parked aggregates, read back from the parking topic: every
//! record from the first, as a `read_committed` consumer sees them (an aborted
//! transaction's parked events were never parked).

use rdkafka::message::{Headers, Message};

use super::{Parked, Parking, ParkingError};
use crate::kafka::{KafkaConfig, TopicCreator};
use crate::outbox::ParkingConfig;

/// Every record of the parking topic, in order; `[]` when the topic does not exist.
pub fn read_all(kafka: &KafkaConfig, topic: &str) -> Result<Vec<Parked>, ParkingError> {
    let read_failed = |reason: String| ParkingError::Read {
        topic: topic.to_string(),
        reason,
    };
    if !TopicCreator::exists(kafka, topic).map_err(|e| read_failed(e.to_string()))? {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    let mut unreadable = None;
    crate::kafka::scan(
        kafka,
        "parked events: records read back (of at most)",
        &[topic.to_string()],
        0,
        |_, m| {
            if unreadable.is_some() {
                return;
            }
            let headers: Vec<(String, Vec<u8>)> = m
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                        .collect()
                })
                .unwrap_or_default();
            let timestamp = m.timestamp().to_millis().unwrap_or_default();
            match Parked::read(m.key(), &headers, timestamp, m.offset()) {
                Ok(p) => out.push(p),
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
    Ok(out)
}

/// The set of parked aggregates as the parking topic records it.
pub fn load(kafka: &KafkaConfig, config: &ParkingConfig) -> Result<Parking, ParkingError> {
    let mut parking = Parking::empty(config);
    for parked in read_all(kafka, &config.topic)? {
        parking.restore(&parked);
    }
    Ok(parking)
}
