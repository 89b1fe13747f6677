//! Kafka producer sink: idempotent, acks=all, bounded by the pipeline's in-flight window.

use std::time::Duration;

use futures::FutureExt;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;

use super::{Delivery, SinkError, TopicCreator};
use crate::config::KafkaConfig;
use crate::route::Record;

/// Defaults chosen for an outbox stream; every one can be overridden in config.
const DEFAULTS: &[(&str, &str)] = &[
    ("linger.ms", "5"),
    ("compression.type", "lz4"),
    // Beyond librdkafka's internal retries the pipeline restarts from the checkpoint.
    ("message.timeout.ms", "120000"),
];

/// Produces records to Kafka.
pub struct KafkaSink {
    producer: FutureProducer,
    /// Creates missing topics before their first record, when enabled.
    topics: Option<TopicCreator>,
}

/// The producer configuration: defaults, the user's properties, then what the contract fixes.
pub fn client_config(cfg: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    for (k, v) in DEFAULTS {
        c.set(*k, *v);
    }
    for (k, v) in &cfg.properties {
        c.set(k, v);
    }
    c.set("bootstrap.servers", &cfg.bootstrap_servers);
    // Per-aggregate order and no loss: idempotence keeps retries from reordering.
    c.set("enable.idempotence", "true");
    c.set("acks", "all");
    c
}

impl KafkaSink {
    /// Creates the producer (does not contact the brokers yet).
    pub fn new(cfg: &KafkaConfig) -> Result<Self, SinkError> {
        let producer = client_config(cfg).create().map_err(SinkError::Create)?;
        let topics = cfg
            .topics
            .create
            .then(|| TopicCreator::new(cfg))
            .transpose()?;
        Ok(Self { producer, topics })
    }

    /// Asks the cluster for metadata, to tell early whether it is reachable.
    pub async fn check_reachable(
        cfg: &KafkaConfig,
        timeout: Duration,
    ) -> Result<usize, KafkaError> {
        let producer: FutureProducer = client_config(cfg).create()?;
        tokio::task::spawn_blocking(move || {
            producer
                .client()
                .fetch_metadata(None, Timeout::After(timeout))
                .map(|m| m.brokers().len())
        })
        .await
        .unwrap_or(Err(KafkaError::Canceled))
    }

    pub(super) async fn send(&self, records: Vec<Record>) -> Result<Delivery, SinkError> {
        let mut pending = Vec::with_capacity(records.len());
        if let Some(topics) = &self.topics {
            topics
                .ensure(records.iter().map(|r| r.topic.as_str()))
                .await?;
        }
        for r in records {
            let mut headers = OwnedHeaders::new_with_capacity(r.headers.len());
            for (k, v) in &r.headers {
                headers = headers.insert(Header {
                    key: k,
                    value: Some(v),
                });
            }
            let mut record = FutureRecord::to(&r.topic)
                .key(&r.key)
                .headers(headers)
                .timestamp(r.timestamp_ms);
            if let Some(v) = &r.value {
                record = record.payload(v);
            }
            if let Some(p) = r.partition {
                record = record.partition(p);
            }
            let future = loop {
                match self.producer.send_result(record) {
                    Ok(f) => break f,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        // librdkafka's own queue is full: wait for it to drain, keep order.
                        record = back;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err((error, _)) => {
                        return Err(SinkError::Produce {
                            event: Box::new(r.event.clone()),
                            topic: r.topic.clone(),
                            error,
                        })
                    }
                }
            };
            pending.push((future, Box::new(r.event), r.topic));
            if pending.len() == 1 && pending.capacity() > 1 {
                crash_point!("sink.mid_transaction");
            }
        }
        Ok(async move {
            let n = pending.len();
            for (future, event, topic) in pending {
                match future.await {
                    Ok(Ok(_)) => {}
                    Ok(Err((error, _))) => {
                        return Err(SinkError::Delivery {
                            event,
                            topic,
                            error,
                        })
                    }
                    Err(_) => return Err(SinkError::Canceled { event }),
                }
            }
            Ok(n)
        }
        .boxed())
    }
}
