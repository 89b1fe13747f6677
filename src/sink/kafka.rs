//! Kafka producer sink: idempotent, acks=all, bounded by the pipeline's in-flight window.

use std::time::Duration;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
use crate::sink::{DeliveryConfig, KafkaConfig};

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
    /// Exactly-once mode: where each transaction's commit marker goes.
    transactional: Option<Transactional>,
}

/// The commit marker of exactly-once mode: one record per Kafka transaction, on a
/// compacted topic, keyed by the source's `transactional.id`.
struct Transactional {
    topic: String,
    key: String,
    /// The producer's `transaction.timeout.ms`.
    timeout: Duration,
}

/// Brokers refuse a `transaction.timeout.ms` above their `transaction.max.timeout.ms`,
/// 15 minutes by default.
const BROKER_MAX_TRANSACTION_TIMEOUT_MS: u64 = 900_000;

/// A `transaction.timeout.ms` raised for this process's next producers after a Kafka
/// transaction outlived the configured one: the coordinator aborted it, and the same
/// binlog transaction would outlive it again after every restart. Process-wide because
/// the pipeline builds a new producer on each restart and exactly-once mode has one.
static TRANSACTION_TIMEOUT_RAISED_MS: AtomicU64 = AtomicU64::new(0);

/// How long transaction control calls may take (librdkafka retries within it).
const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

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

/// A consumer's configuration: the user's properties (security, …) and the brokers.
pub fn consumer_config(cfg: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    for (k, v) in &cfg.properties {
        c.set(k, v);
    }
    c.set("bootstrap.servers", &cfg.bootstrap_servers);
    // Producer properties among them would each log a warning.
    c.set("log_level", "3");
    c
}

impl KafkaSink {
    /// Creates the producer (does not contact the brokers yet); deliveries, their
    /// failures and librdkafka's statistics are reported to `metrics`.
    pub fn new(
        cfg: &KafkaConfig,
        delivery: &DeliveryConfig,
        metrics: &Metrics,
    ) -> Result<Self, SinkError> {
        let context = AckContext {
            unproven: metrics.deliveries_unproven(),
            errors: metrics.delivery_errors(),
            progress: metrics.progress().clone(),
            metrics: metrics.clone(),
        };
        let mut client = client_config(cfg);
        if delivery.exactly_once() {
            client.set("transactional.id", &delivery.transactional_id);
            // librdkafka requires message.timeout.ms <= transaction.timeout.ms.
            if !cfg.properties.contains_key("transaction.timeout.ms") {
                let message_timeout = client
                    .get("message.timeout.ms")
                    .unwrap_or("300000")
                    .to_string();
                client.set("transaction.timeout.ms", message_timeout);
            }
            // Raised after a transaction outlived it (see `outlived_transaction_timeout`).
            let configured: u64 = client
                .get("transaction.timeout.ms")
                .and_then(|v| v.parse().ok())
                .unwrap_or(60_000);
            let raised = TRANSACTION_TIMEOUT_RAISED_MS.load(Ordering::Relaxed);
            if raised > configured {
                client.set("transaction.timeout.ms", raised.to_string());
            }
            // Back-to-back transactions: the next one's AddPartitionsToTxn meets
            // CONCURRENT_TRANSACTIONS until the last one's markers are written, and
            // librdkafka asks again after retry.backoff.ms (100) — a floor of 100 ms per
            // transaction. Java's producer retries that request after 20 ms
            // (KAFKA-5477); other retries still back off exponentially to
            // retry.backoff.max.ms.
            if !cfg.properties.contains_key("retry.backoff.ms") {
                client.set("retry.backoff.ms", "5");
            }
        }
        let transaction_timeout = Duration::from_millis(
            client
                .get("transaction.timeout.ms")
                .and_then(|v| v.parse().ok())
                .unwrap_or(60_000),
        );
        let producer = ThreadedProducer::from_config_and_context(&client, context)
            .map_err(SinkError::Create)?;
        let topics = TopicCreator::new(cfg)?;
        let transactional = if delivery.exactly_once() {
            topics.ensure_compacted(&delivery.checkpoint_topic, "checkpoint")?;
            // Fences any earlier producer with this transactional.id and aborts its
            // open transaction: nothing it had not committed ever becomes visible.
            let started = std::time::Instant::now();
            tokio::task::block_in_place(|| producer.init_transactions(TRANSACTION_TIMEOUT))
                .map_err(|error| transaction_error("init", &delivery.transactional_id, error))?;
            tracing::info!(transactional_id = %delivery.transactional_id, init_ms = started.elapsed().as_millis() as u64, "transactional producer initialised: any earlier producer of this id is fenced, its open transaction aborted");
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

    /// A failure of a Kafka transaction open for `open_for` as what it was: past the
    /// producer's `transaction.timeout.ms`, the coordinator aborts it and bumps the epoch,
    /// and librdkafka reports a fence. The next producer gets twice the time (up to the
    /// brokers' default maximum), so the pipeline's restart gets through.
    pub fn outlived_transaction_timeout(&self, error: SinkError, open_for: Duration) -> SinkError {
        let Some(t) = &self.transactional else {
            return error;
        };
        let error = self.explain(error);
        let fits = open_for < t.timeout;
        if fits
            || !matches!(
                error,
                SinkError::Fenced { .. } | SinkError::Transaction { .. }
            )
        {
            return error;
        }
        let timeout_ms = t.timeout.as_millis() as u64;
        let next_ms = (timeout_ms.saturating_mul(2)).min(BROKER_MAX_TRANSACTION_TIMEOUT_MS);
        let retry_with_ms = (next_ms > timeout_ms).then_some(next_ms);
        if let Some(next) = retry_with_ms {
            TRANSACTION_TIMEOUT_RAISED_MS.fetch_max(next, Ordering::Relaxed);
        }
        SinkError::TransactionTimedOut {
            transactional_id: t.key.clone(),
            open_secs: open_for.as_secs(),
            timeout_ms,
            retry_with_ms,
        }
    }

    /// True in exactly-once mode.
    pub fn is_transactional(&self) -> bool {
        self.transactional.is_some()
    }

    /// Opens a Kafka transaction (exactly-once mode).
    pub fn begin(&self) -> Result<(), SinkError> {
        let Some(t) = &self.transactional else {
            return Ok(());
        };
        self.producer
            .begin_transaction()
            .map_err(|error| transaction_error("begin", &t.key, error))
    }

    /// Adds `marker` (the checkpoint of the transaction's last binlog transaction), if
    /// any, to the open Kafka transaction and commits it: the records and the marker become
    /// visible together or not at all. A failed commit is aborted.
    pub async fn commit(&self, marker: Option<Vec<u8>>) -> Result<(), SinkError> {
        let Some(t) = &self.transactional else {
            return Ok(());
        };
        let outcome = match marker {
            Some(marker) => {
                let (acks, outcome) = BatchAcks::new(1);
                // Partition 0 by name: the reader takes the newest record of partition 0,
                // whatever partitioner the user's properties set.
                let record = BaseRecord::with_opaque_to(&t.topic, acks)
                    .partition(0)
                    .key(&t.key)
                    .payload(&marker);
                if let Err((error, _)) = self.producer.send(record) {
                    return Err(self.aborted("commit marker", &t.key, error));
                }
                Some(outcome)
            }
            None => None,
        };
        // The marker's own acknowledgement first: rust-rdkafka's commit_transaction
        // flushes before committing, and a flush that finds a record outstanding polls
        // an event queue the producer's thread drains — a fixed 100 ms per commit.
        if let Some(outcome) = outcome {
            let error = match tokio::time::timeout(TRANSACTION_TIMEOUT, outcome).await {
                Ok(Ok(Ok(()))) => None,
                Ok(Ok(Err(Failure {
                    reason: FailureReason::Error(error),
                    ..
                }))) => Some(error),
                _ => Some(KafkaError::Canceled),
            };
            if let Some(error) = error {
                return Err(self.aborted("commit marker", &t.key, error));
            }
        }
        let committed =
            tokio::task::block_in_place(|| self.producer.commit_transaction(TRANSACTION_TIMEOUT));
        if let Err(error) = committed {
            return Err(self.aborted("commit", &t.key, error));
        }
        Ok(())
    }

    /// Drops every record not yet written (queued, or in flight and not yet answered):
    /// after one record failed, the ones behind it on its partition must not be written
    /// before it is sent again, or its aggregate's order breaks. librdkafka delivers
    /// later records after an earlier one timed out, as soon as the broker is back.
    pub fn abandon(&self) {
        self.producer
            .purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
    }

    /// A failure as what caused it: once the producer is fenced, its queued records fail
    /// with `PurgeQueue` and its calls with errors that name nothing; the fatal error
    /// librdkafka keeps says the producer was fenced.
    pub fn explain(&self, error: SinkError) -> SinkError {
        let Some(t) = &self.transactional else {
            return error;
        };
        if matches!(
            error,
            SinkError::Fenced { .. } | SinkError::TransactionTimedOut { .. }
        ) {
            return error;
        }
        match self.producer.client().fatal_error() {
            Some((code, reason)) if is_fenced_code(code) || reason.contains("fenced") => {
                tracing::debug!(%reason, "the producer's fatal error");
                SinkError::Fenced {
                    transactional_id: t.key.clone(),
                    error: KafkaError::MessageProduction(code),
                }
            }
            _ => error,
        }
    }

    /// Aborts the open transaction, if any (after a failed delivery).
    pub fn abort(&self) {
        if self.transactional.is_some() {
            let _ = tokio::task::block_in_place(|| {
                self.producer.abort_transaction(TRANSACTION_TIMEOUT)
            });
        }
    }

    /// Aborts the open transaction (best effort) and returns the error that caused it.
    fn aborted(&self, action: &'static str, key: &str, error: KafkaError) -> SinkError {
        let failure = transaction_error(action, key, error);
        if !matches!(failure, SinkError::Fenced { .. }) {
            let _ = tokio::task::block_in_place(|| {
                self.producer.abort_transaction(TRANSACTION_TIMEOUT)
            });
        }
        failure
    }

    /// The newest commit marker of `delivery.transactional_id`, read with
    /// `read_committed`: where exactly-once mode resumes.
    pub fn last_marker(
        cfg: &KafkaConfig,
        delivery: &DeliveryConfig,
    ) -> Result<Option<Vec<u8>>, SinkError> {
        super::markers::last(cfg, &delivery.checkpoint_topic, &delivery.transactional_id)
    }

    /// True when `checkpoint init` allowed exactly-once mode's first start for this
    /// transactional id (a record under its own key beside the markers).
    pub fn first_start_allowed(
        cfg: &KafkaConfig,
        delivery: &DeliveryConfig,
    ) -> Result<bool, SinkError> {
        let key = first_start_key(delivery);
        Ok(super::markers::last(cfg, &delivery.checkpoint_topic, &key)?.is_some())
    }

    /// Creates the checkpoint topic, or checks the shape of the one there.
    pub fn ensure_checkpoint_topic(
        cfg: &KafkaConfig,
        delivery: &DeliveryConfig,
    ) -> Result<(), SinkError> {
        TopicCreator::new(cfg)?.ensure_compacted(&delivery.checkpoint_topic, "checkpoint")
    }

    /// Records that a first start at `source.start` is intended (`checkpoint init` in
    /// exactly-once mode). Under its own key, so it can never hide a commit marker.
    pub async fn allow_first_start(
        cfg: &KafkaConfig,
        delivery: &DeliveryConfig,
    ) -> Result<(), SinkError> {
        let topic = &delivery.checkpoint_topic;
        let producer: FutureProducer = client_config(cfg).create().map_err(SinkError::Create)?;
        let key = first_start_key(delivery);
        let value = format!(
            "first start allowed by `checkpoint init` at unix ms {}",
            crate::checkpoint::now_ms()
        );
        let record = rdkafka::producer::FutureRecord::to(topic)
            .partition(0)
            .key(&key)
            .payload(&value);
        match producer.send(record, Duration::from_secs(30)).await {
            // Proof, as for any record: an offset.
            Ok(delivered) if delivered.offset >= 0 => Ok(()),
            Ok(_) => Err(SinkError::FirstStart {
                topic: topic.clone(),
                reason: "reported delivered without an offset".into(),
            }),
            Err((error, _)) => Err(SinkError::FirstStart {
                topic: topic.clone(),
                reason: error.to_string(),
            }),
        }
    }

    /// Asks the cluster for metadata, to tell early whether it is reachable.
    pub async fn check_reachable(
        cfg: &KafkaConfig,
        timeout: Duration,
    ) -> Result<usize, Unreachable> {
        let context = ProbeContext::default();
        let last_error = context.last_error.clone();
        let producer: FutureProducer<ProbeContext> = client_config(cfg)
            .create_with_context(context)
            .map_err(|error| Unreachable {
                error,
                reason: None,
            })?;
        tokio::task::spawn_blocking(move || {
            producer
                .client()
                .fetch_metadata(None, Timeout::After(timeout))
                .map(|m| m.brokers().len())
                .map_err(|error| Unreachable {
                    error,
                    reason: last_error.lock().unwrap().take(),
                })
        })
        .await
        .unwrap_or(Err(Unreachable {
            error: KafkaError::Canceled,
            reason: None,
        }))
    }

    /// Whether librdkafka accepts these properties: a protocol or mechanism this build
    /// lacks, or a malformed value, is refused here, before anything else happens.
    pub fn check_properties(cfg: &KafkaConfig) -> Result<(), KafkaError> {
        client_config(cfg)
            .create::<rdkafka::producer::BaseProducer>()
            .map(drop)
    }

    /// The features of the linked librdkafka (`builtin.features`: ssl, sasl_scram,
    /// sasl_oauthbearer, http, …) and its version.
    pub fn client_features() -> (String, String) {
        let features = ClientConfig::new()
            .create_native_config()
            .and_then(|c| c.get("builtin.features"))
            .unwrap_or_default();
        (rdkafka::util::get_rdkafka_version().1, features)
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
                    let event = Box::new(events.swap_remove(at));
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

/// The key of `checkpoint init`'s first-start record: beside the markers, never theirs.
fn first_start_key(delivery: &DeliveryConfig) -> String {
    format!("{}#first-start", delivery.transactional_id)
}

/// True when a newer producer with the same `transactional.id` fenced this one.
fn is_fenced(error: &KafkaError) -> bool {
    match error {
        KafkaError::Transaction(e) => e.is_fatal() || is_fenced_code(e.code()),
        other => other.rdkafka_error_code().is_some_and(is_fenced_code),
    }
}

/// The error codes of a fenced producer.
fn is_fenced_code(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode::*;
    matches!(code, ProducerFenced | InvalidProducerEpoch | Fenced)
}

/// A transaction call's failure: fenced (final for this process) or retryable from the
/// checkpoint.
fn transaction_error(action: &'static str, key: &str, error: KafkaError) -> SinkError {
    if is_fenced(&error) {
        SinkError::Fenced {
            transactional_id: key.to_string(),
            error,
        }
    } else {
        SinkError::Transaction {
            action,
            transactional_id: key.to_string(),
            error,
        }
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
/// Kafka did not answer a metadata request; `reason` is librdkafka's own account of the
/// last connection failure (a TLS handshake, an authentication), which the request's
/// error code alone does not say.
#[derive(Debug, thiserror::Error)]
#[error("{error}{}", reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
pub struct Unreachable {
    error: KafkaError,
    reason: Option<String>,
}

/// Keeps the last error librdkafka reported on a probe's connections.
#[derive(Default)]
struct ProbeContext {
    last_error: Arc<Mutex<Option<String>>>,
}

impl ClientContext for ProbeContext {
    fn error(&self, error: KafkaError, reason: &str) {
        let mut last = self.last_error.lock().unwrap();
        // "All brokers are down" follows the failure that says why.
        let summary = error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown);
        if !(summary && last.is_some()) {
            *last = Some(reason.to_string());
        }
    }
}

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
