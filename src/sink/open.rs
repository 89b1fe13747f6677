//! The sink the pipeline runs with: the Kafka producer, behind the claim check when
//! one is configured.

use super::claim_check::{CheckIn, ClaimCheckSink};
use super::kafka::KafkaSink;
use super::{DeliveryConfig, Sink, SinkError};

/// The Kafka producer, with the claim check in front when there is one.
pub fn kafka_sink(
    kafka: &crate::kafka::KafkaConfig,
    delivery: &DeliveryConfig,
    claim_check: Option<CheckIn>,
    metrics: &crate::monitor::Metrics,
) -> Result<Box<dyn Sink>, SinkError> {
    let producer = Box::new(KafkaSink::new(kafka, delivery, metrics)?);
    Ok(match claim_check {
        None => producer,
        Some(check_in) => Box::new(ClaimCheckSink::new(producer, check_in)),
    })
}
