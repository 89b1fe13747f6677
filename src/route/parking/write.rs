//! Records written to the parking topic outside the stream (an operator's request),
//! each proven by its offset (a "delivered" without one is not).

use std::time::Duration;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::ParkingError;
use crate::kafka::KafkaConfig;

/// Sends one record to partition 0 of `topic`, proven by its offset.
pub async fn send_proven(
    kafka: &KafkaConfig,
    topic: &str,
    key: &[u8],
    headers: &[(String, Vec<u8>)],
    value: Option<&[u8]>,
) -> Result<(), ParkingError> {
    let failed = |reason: String| ParkingError::Write {
        topic: topic.to_string(),
        reason,
    };
    let producer: FutureProducer = crate::kafka::client_config(kafka)
        .create()
        .map_err(|e| failed(e.to_string()))?;
    let mut owned = OwnedHeaders::new_with_capacity(headers.len());
    for (k, v) in headers {
        owned = owned.insert(Header {
            key: k,
            value: Some(v),
        });
    }
    let mut record = FutureRecord::to(topic).partition(0).key(key).headers(owned);
    if let Some(v) = value {
        record = record.payload(v);
    }
    match producer.send(record, Duration::from_secs(30)).await {
        Ok(delivered) if delivered.offset >= 0 => Ok(()),
        Ok(_) => Err(failed("reported delivered without an offset".into())),
        Err((error, _)) => Err(failed(crate::kafka::without_values(&error))),
    }
}
