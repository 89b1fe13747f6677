//! Kafka producer sink: idempotent, acks=all, bounded by the pipeline's in-flight window.

use std::time::Duration;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use rdkafka::config::{ClientConfig, FromClientConfigAndContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{
    BaseRecord, DeliveryResult, FutureProducer, Producer, ProducerContext, ThreadedProducer,
};
use rdkafka::util::Timeout;
use rdkafka::ClientContext;
use tokio::sync::oneshot;

use super::{Delivery, SinkError, TopicCreator};
use crate::monitor::{Metrics, Progress};
use crate::route::Record;
use crate::sink::KafkaConfig;

/// Defaults chosen for an outbox stream; every one can be overridden in config.
const DEFAULTS: &[(&str, &str)] = &[
    // Kafka's Java producer (and so Debezium) picks a key's partition by murmur2; with
    // librdkafka's CRC32 default an aggregate would move partitions on a switch.
    ("partitioner", "murmur2_random"),
    ("linger.ms", "5"),
    ("compression.type", "lz4"),
    // Beyond librdkafka's internal retries the pipeline restarts from the checkpoint.
    ("message.timeout.ms", "120000"),
    // Queue depth and broker round trips for /metrics; parsing costs little at 10 s.
    ("statistics.interval.ms", "10000"),
];

/// Produces records to Kafka.
pub struct KafkaSink {
    producer: ThreadedProducer<AckContext>,
    /// Creates (or looks up) each topic before its first record.
    topics: TopicCreator,
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
    /// Creates the producer (does not contact the brokers yet); deliveries, their
    /// failures and librdkafka's statistics are reported to `metrics`.
    pub fn new(cfg: &KafkaConfig, metrics: &Metrics) -> Result<Self, SinkError> {
        let context = AckContext {
            unproven: metrics.deliveries_unproven(),
            errors: metrics.delivery_errors(),
            progress: metrics.progress().clone(),
            metrics: metrics.clone(),
        };
        let producer = ThreadedProducer::from_config_and_context(&client_config(cfg), context)
            .map_err(SinkError::Create)?;
        let topics = TopicCreator::new(cfg)?;
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
        self.topics
            .ensure(records.iter().map(|r| &*r.topic))
            .await?;
        let (acks, outcome) = BatchAcks::new(records.len());
        let mut events = Vec::with_capacity(records.len());
        for r in records {
            let mut headers = OwnedHeaders::new_with_capacity(r.headers.len());
            for (k, v) in &r.headers {
                headers = headers.insert(Header {
                    key: k,
                    value: Some(v),
                });
            }
            let mut record = BaseRecord::with_opaque_to(&r.topic, acks.clone())
                .key(&r.key)
                .headers(headers)
                .timestamp(r.timestamp_ms);
            if let Some(v) = &r.value {
                record = record.payload(v);
            }
            if let Some(p) = r.partition {
                record = record.partition(p);
            }
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        // librdkafka's own queue is full: wait for it to drain, keep order.
                        record = back;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err((error, _)) => {
                        return Err(SinkError::Produce {
                            event: Box::new(r.event),
                            topic: r.topic.to_string(),
                            error,
                        })
                    }
                }
            }
            events.push(r.event);
            if events.len() == 1 && events.capacity() > 1 {
                crash_point!("sink.mid_transaction");
            }
        }
        drop(acks);
        Ok(async move {
            let n = events.len();
            if n == 0 {
                return Ok(0);
            }
            match outcome.await {
                Ok(Ok(())) => Ok(n),
                Ok(Err(failed)) => {
                    // The event whose id the failed record carries in a header.
                    let at = events
                        .iter()
                        .position(|e| !e.id.0.is_empty() && failed.header_values.contains(&e.id.0))
                        .unwrap_or(0);
                    let event = Box::new(events.swap_remove(at));
                    let topic = failed.topic;
                    Err(match failed.reason {
                        FailureReason::Error(error) => SinkError::Delivery {
                            event,
                            topic,
                            error,
                        },
                        FailureReason::NoOffset { partition } => SinkError::Unproven {
                            event,
                            topic,
                            partition,
                        },
                    })
                }
                Err(_) => Err(SinkError::Canceled {
                    event: Box::new(events.swap_remove(0)),
                }),
            }
        }
        .boxed())
    }
}

/// What librdkafka reported for the first record of a batch that failed.
struct Failure {
    reason: FailureReason,
    topic: String,
    /// The record's header values, one of which is its event id.
    header_values: Vec<Vec<u8>>,
}

/// Why a record does not count as delivered.
enum FailureReason {
    /// librdkafka reported an error.
    Error(KafkaError),
    /// librdkafka reported success without an offset: an "implicit acknowledgement"
    /// (a later batch of the partition succeeded), which is no proof the record was
    /// written. A new idempotent producer meeting a moving leader loses records exactly
    /// this way (../shared/notes/delivery-proof.md).
    NoOffset { partition: i32 },
}

/// A batch's acknowledgements, counted in librdkafka's delivery callbacks: one wake-up
/// per batch rather than a future per record.
pub struct BatchAcks {
    remaining: AtomicUsize,
    /// Taken by the last acknowledgement or the first failure. When every record is gone
    /// without either, dropping it cancels the batch.
    outcome: Mutex<Option<oneshot::Sender<Result<(), Failure>>>>,
}

impl BatchAcks {
    fn new(records: usize) -> (Arc<Self>, oneshot::Receiver<Result<(), Failure>>) {
        let (tx, rx) = oneshot::channel();
        let acks = Self {
            remaining: AtomicUsize::new(records),
            outcome: Mutex::new(Some(tx)),
        };
        (Arc::new(acks), rx)
    }

    fn finish(&self, outcome: Result<(), Failure>) {
        let sender = self
            .outcome
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(sender) = sender {
            let _ = sender.send(outcome);
        }
    }
}

/// Routes delivery reports to their batch; only a report with an offset acknowledges.
pub struct AckContext {
    unproven: Counter,
    errors: Family<Vec<(&'static str, String)>, Counter>,
    progress: Progress,
    metrics: Metrics,
}

impl ClientContext for AckContext {
    fn stats(&self, statistics: rdkafka::Statistics) {
        self.metrics.kafka_statistics(&statistics);
    }
}

impl ProducerContext for AckContext {
    type DeliveryOpaque = Arc<BatchAcks>;

    fn delivery(&self, result: &DeliveryResult<'_>, acks: Arc<BatchAcks>) {
        let (reason, message) = match result {
            Ok(message) if message.offset() >= 0 => {
                self.progress.delivered();
                if acks.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
                    acks.finish(Ok(()));
                }
                return;
            }
            Ok(message) => {
                self.unproven.inc();
                let partition = message.partition();
                (FailureReason::NoOffset { partition }, message)
            }
            Err((error, message)) => {
                let code = error
                    .rdkafka_error_code()
                    .map_or_else(|| "other".to_string(), |c| format!("{c:?}"));
                self.errors.get_or_create(&vec![("code", code)]).inc();
                (FailureReason::Error(error.clone()), message)
            }
        };
        let header_values = message
            .headers()
            .map(|h| {
                h.iter()
                    .filter_map(|h| h.value.map(<[u8]>::to_vec))
                    .collect()
            })
            .unwrap_or_default();
        acks.finish(Err(Failure {
            reason,
            topic: message.topic().to_string(),
            header_values,
        }));
    }
}
