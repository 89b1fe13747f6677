//! The producer sink: idempotent, acks=all, bounded by the pipeline's in-flight window;
//! a record counts as delivered only with an offset (`delivery.rs`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer};

use super::delivery::{AckContext, BatchAcks, FailureReason};
use super::polled::PolledProducer;
use super::transactions::{
    is_fenced, transaction_error, Transactional, TRANSACTION_TIMEOUT, TRANSACTION_TIMEOUT_RAISED_MS,
};
use crate::kafka::{
    client_config, transaction_timeout_ms, transactional_config, KafkaConfig, TopicCreator,
};
use crate::monitor::Metrics;
use crate::route::parking::{Refusal, RefusalScope};
use crate::route::Record;
use crate::sink::{Delivery, DeliveryConfig, Sink, SinkError, Transactions};

/// Produces records to Kafka.
pub struct KafkaSink {
    pub(super) producer: PolledProducer<AckContext>,
    /// Creates (or looks up) each topic before its first record.
    topics: TopicCreator,
    /// Exactly-once mode: where each transaction's commit marker goes.
    pub(super) transactional: Option<Transactional>,
}

impl KafkaSink {
    /// Creates the producer (does not contact the brokers yet); deliveries, their
    /// failures and librdkafka's statistics are reported to `metrics`.
    pub fn new(
        cfg: &KafkaConfig,
        delivery: &DeliveryConfig,
        metrics: &Metrics,
    ) -> Result<Self, SinkError> {
        let context = AckContext::new(metrics, delivery.exactly_once());
        let mut client = match delivery.exactly_once() {
            true => transactional_config(cfg, &delivery.transactional_id),
            false => client_config(cfg),
        };
        // Raised after a transaction outlived it (see `outlived_transaction_timeout`).
        let raised = TRANSACTION_TIMEOUT_RAISED_MS.load(Ordering::Relaxed);
        if delivery.exactly_once() && raised > transaction_timeout_ms(cfg) {
            client.set("transaction.timeout.ms", raised.to_string());
        }
        let transaction_timeout = Duration::from_millis(
            client
                .get("transaction.timeout.ms")
                .and_then(|v| v.parse().ok())
                .unwrap_or(60_000),
        );
        let producer =
            PolledProducer::from_config_and_context(&client, context).map_err(SinkError::Create)?;
        let topics = TopicCreator::new(cfg)?;
        let transactional = if delivery.exactly_once() {
            // The checkpoint topic's check and `init_transactions` are independent round
            // trips, both on every start and standby takeover: side by side. Nothing
            // reads the topic before both are done (the marker read follows). A topic
            // that fails the check now fails it after this instance fenced its id's
            // other producer: only another instance with the same id and a different or
            // since-altered topic, which must stop as well (a standby gets here only
            // holding the lock).
            let ((checked, topic_took), (init, init_took)) = tokio::task::block_in_place(|| {
                std::thread::scope(|scope| {
                    let topic = scope.spawn(|| {
                        timed(|| topics.ensure_compacted(&delivery.checkpoint_topic, "checkpoint"))
                    });
                    // Fences any earlier producer with this transactional.id and aborts
                    // its open transaction: nothing it had not committed ever becomes
                    // visible.
                    let init = timed(|| producer.init_transactions(TRANSACTION_TIMEOUT));
                    let topic = topic
                        .join()
                        .unwrap_or_else(|p| std::panic::resume_unwind(p));
                    (topic, init)
                })
            });
            checked?;
            init.map_err(|error| transaction_error("init", &delivery.transactional_id, error))?;
            tracing::info!(transactional_id = %delivery.transactional_id, init_ms = init_took.as_millis() as u64, checkpoint_topic_ms = topic_took.as_millis() as u64, "transactional producer initialised: any earlier producer of this id is fenced, its open transaction aborted");
            Some(Transactional {
                topic: delivery.checkpoint_topic.clone(),
                key: delivery.transactional_id.clone(),
                timeout: transaction_timeout,
            })
        } else {
            None
        };
        Ok(Self {
            producer,
            topics,
            transactional,
        })
    }

    /// Hands records over in order; waits only when the producer's queue is full.
    async fn produce(&self, mut records: Vec<Record>) -> Result<Delivery, SinkError> {
        self.topics
            .ensure(records.iter().map(|r| &*r.topic))
            .await?;
        // Traced records' spans wait beside the batch for Kafka's answer (tracing off:
        // no pass over the batch).
        let traced = match self.producer.context().traces_on() {
            true => records
                .iter_mut()
                .filter_map(|r| r.trace.take())
                .map(|mut trace| {
                    trace.handed();
                    (trace.span_id(), *trace)
                })
                .collect(),
            false => Default::default(),
        };
        let (acks, outcome) = BatchAcks::traced(records.len(), traced);
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
        let transactional_id = self.transactional.as_ref().map(|t| t.key.clone());
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
                    let mut event = Box::new(events.swap_remove(at));
                    event.trace = failed.trace;
                    let topic = failed.topic;
                    Err(match failed.reason {
                        FailureReason::Error(error)
                            if is_fenced(&error) && transactional_id.is_some() =>
                        {
                            SinkError::Fenced {
                                transactional_id: transactional_id.unwrap_or_default(),
                                error,
                            }
                        }
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

impl Sink for KafkaSink {
    fn send(&self, records: Vec<Record>) -> BoxFuture<'_, Result<Delivery, SinkError>> {
        Box::pin(self.produce(records))
    }

    /// Drops every record not yet written (queued, or in flight and not yet answered):
    /// after one record failed, the ones behind it on its partition must not be written
    /// before it is sent again, or its aggregate's order breaks. librdkafka delivers
    /// later records after an earlier one timed out, as soon as the broker is back.
    fn abandon(&self) {
        self.producer
            .purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
    }

    fn explain(&self, error: SinkError) -> SinkError {
        let error = match &self.transactional {
            Some(t) => t.explain(&self.producer, error),
            None => error,
        };
        self.refusal_behind(error)
    }

    fn transactions(&self) -> Option<&dyn Transactions> {
        self.transactional
            .as_ref()
            .map(|_| self as &dyn Transactions)
    }
}

impl KafkaSink {
    /// A failure with the refusal for good behind it, when Kafka refused a record and
    /// the failure at hand is another record's: a transaction's records fail together
    /// (`PurgeQueue`), and a topic its ACL refuses shows only in librdkafka's log.
    fn refusal_behind(&self, error: SinkError) -> SinkError {
        if error.refusal().is_some()
            || matches!(
                error,
                SinkError::Fenced { .. } | SinkError::TransactionTimedOut { .. }
            )
        {
            return error;
        }
        let context = self.producer.context();
        let denied = || {
            let topic = context.denied_topic()?;
            let event = error.event()?;
            Some(Refusal {
                event_id: event.id.clone(),
                topic: topic.into(),
                reason: "TopicAuthorizationFailed (Broker: Topic authorization failed: a transaction could not add it)".into(),
                scope: RefusalScope::Topic,
            })
        };
        match context.refused().or_else(denied) {
            Some(refusal) => SinkError::Refused {
                refusal,
                cause: Box::new(error),
            },
            None => error,
        }
    }
}

/// Only reached through `Sink::transactions`, which a producer without a
/// `transactional.id` does not give.
impl Transactions for KafkaSink {
    fn begin(&self) -> Result<(), SinkError> {
        self.transactional().begin(&self.producer)
    }

    fn commit_within(
        &self,
        marker: Option<Vec<u8>>,
        within: Duration,
    ) -> BoxFuture<'_, Result<(), SinkError>> {
        Box::pin(self.transactional().commit(&self.producer, marker, within))
    }

    fn abort(&self) {
        self.transactional().abort(&self.producer);
    }

    fn outlived_transaction_timeout(&self, error: SinkError, open_for: Duration) -> SinkError {
        self.transactional()
            .outlived_transaction_timeout(&self.producer, error, open_for)
    }
}

impl KafkaSink {
    fn transactional(&self) -> &Transactional {
        self.transactional
            .as_ref()
            .expect("transactions() gives only a transactional producer")
    }
}

/// What `f` returns and how long it took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = std::time::Instant::now();
    (f(), started.elapsed())
}
