//! Delivery proof: librdkafka's delivery reports counted per batch, and only a report
//! with an offset acknowledges (../shared/notes/delivery-proof.md).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::ClientContext;
use tokio::sync::oneshot;

use crate::monitor::{Metrics, Progress};

/// What librdkafka reported for the first record of a batch that failed.
pub(super) struct Failure {
    pub(super) reason: FailureReason,
    pub(super) topic: String,
    /// The record's header values, one of which is its event id.
    pub(super) header_values: Vec<Vec<u8>>,
}

/// Why a record does not count as delivered.
pub(super) enum FailureReason {
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
    pub(super) fn new(records: usize) -> (Arc<Self>, oneshot::Receiver<Result<(), Failure>>) {
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

impl AckContext {
    /// Reports deliveries, their failures and librdkafka's statistics to `metrics`.
    pub(super) fn new(metrics: &Metrics) -> Self {
        Self {
            unproven: metrics.deliveries_unproven(),
            errors: metrics.delivery_errors(),
            progress: metrics.progress().clone(),
            metrics: metrics.clone(),
        }
    }
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
