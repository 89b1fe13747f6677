//! Delivery proof: librdkafka's delivery reports counted per batch, and only a report
//! with an offset acknowledges (../shared/notes/delivery-proof.md).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use opentelemetry::trace::SpanId;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::ClientContext;
use tokio::sync::oneshot;

use crate::monitor::traces::{span_of, EventTrace, LogIds, Traces};
use crate::monitor::{Metrics, Progress};

/// What librdkafka reported for the first record of a batch that failed.
pub(super) struct Failure {
    pub(super) reason: FailureReason,
    pub(super) topic: String,
    /// The record's header values, one of which is its event id.
    pub(super) header_values: Vec<Vec<u8>>,
    /// The trace its `traceparent` header names, for the log lines about it.
    pub(super) trace: Option<LogIds>,
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
    /// The batch's traced records by their span id, until Kafka answers for each (`None`
    /// when none is traced: tracing off costs nothing here).
    traced: Option<Mutex<HashMap<SpanId, EventTrace>>>,
}

impl BatchAcks {
    pub(super) fn new(records: usize) -> (Arc<Self>, oneshot::Receiver<Result<(), Failure>>) {
        Self::traced(records, HashMap::new())
    }

    /// `new`, with the spans of the records that are traced.
    pub(super) fn traced(
        records: usize,
        traced: HashMap<SpanId, EventTrace>,
    ) -> (Arc<Self>, oneshot::Receiver<Result<(), Failure>>) {
        let (tx, rx) = oneshot::channel();
        let acks = Self {
            remaining: AtomicUsize::new(records),
            outcome: Mutex::new(Some(tx)),
            traced: (!traced.is_empty()).then(|| Mutex::new(traced)),
        };
        (Arc::new(acks), rx)
    }

    /// The span of `message`, if it is traced: Kafka answered for it.
    fn trace_of(&self, message: &rdkafka::message::BorrowedMessage<'_>) -> Option<EventTrace> {
        let traced = self.traced.as_ref()?;
        let id = message.headers().and_then(span_of)?;
        traced.lock().unwrap_or_else(|p| p.into_inner()).remove(&id)
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
    /// A topic a transaction could not add for lack of WRITE on it (see `log`).
    denied: Arc<Mutex<Option<String>>>,
    /// The first record Kafka refused for good: in a transaction, the records around it
    /// fail too (purged at the abort), and the batch the acknowledgements stop at may
    /// be one of theirs.
    refused: Arc<Mutex<Option<crate::route::parking::Refusal>>>,
    /// Where traced records' spans end, when tracing is on.
    traces: Option<Traces>,
    /// Exactly-once: a written record's span waits for its Kafka transaction.
    exactly_once: bool,
    awaiting_commit: Mutex<Vec<EventTrace>>,
}

impl AckContext {
    /// Reports deliveries, their failures and librdkafka's statistics to `metrics`.
    /// Traced records' spans end as `metrics` says (in exactly-once, with their Kafka
    /// transaction).
    pub(super) fn new(metrics: &Metrics, exactly_once: bool) -> Self {
        Self {
            unproven: metrics.deliveries_unproven(),
            errors: metrics.delivery_errors(),
            progress: metrics.progress().clone(),
            metrics: metrics.clone(),
            denied: Default::default(),
            refused: Default::default(),
            traces: metrics.traces().cloned(),
            exactly_once,
            awaiting_commit: Mutex::default(),
        }
    }

    /// Whether traced records' spans end here (tracing is on).
    pub(super) fn traces_on(&self) -> bool {
        self.traces.is_some()
    }

    /// The open Kafka transaction ended: committed (`None`), or aborted with why. The
    /// spans of its records say which; an aborted one claims no delivery.
    pub(super) fn transaction_ended(&self, aborted: Option<&str>) {
        let Some(traces) = &self.traces else { return };
        let ended = std::mem::take(
            &mut *self
                .awaiting_commit
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        for trace in ended {
            match aborted {
                None => traces.committed(trace),
                Some(why) => traces.failed(trace, why),
            }
        }
    }

    /// Kafka answered for a traced record: written at its offset, or not (`failure`).
    fn trace_answered(
        &self,
        acks: &BatchAcks,
        message: &rdkafka::message::BorrowedMessage<'_>,
        failure: Option<String>,
    ) {
        let Some(traces) = &self.traces else { return };
        let Some(mut trace) = acks.trace_of(message) else {
            return;
        };
        trace.answered_for(message.topic());
        match failure {
            Some(why) => traces.failed(trace, &why),
            None => {
                trace.written(message.partition(), message.offset(), self.exactly_once);
                match self.exactly_once {
                    true => self
                        .awaiting_commit
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(trace),
                    false => traces.acknowledged(trace),
                }
            }
        }
    }

    /// The first record Kafka refused for good, if any did.
    pub(super) fn refused(&self) -> Option<crate::route::parking::Refusal> {
        self.refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A topic Kafka refused to add to a transaction because this user may not write
    /// to it: the transaction's records then fail only with `PurgeQueue`, and this is
    /// where the refusal shows.
    pub(super) fn denied_topic(&self) -> Option<String> {
        self.denied
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl AckContext {
    /// Keeps the first refusal for good: the record's first header is its event id
    /// (`Router::headers` puts it there).
    fn note_refusal(&self, error: &KafkaError, message: &rdkafka::message::BorrowedMessage<'_>) {
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if refused.is_some() {
            return;
        }
        let id = message
            .headers()
            .and_then(|h| h.iter().next())
            .and_then(|h| h.value)
            .filter(|v| !v.is_empty());
        if let Some(id) = id {
            *refused = crate::sink::refusal_of(
                crate::outbox::EventId(id.to_vec()),
                message.topic(),
                error,
            );
        }
    }
}

/// The topic of librdkafka's `Failed to add partition "TOPIC" [N] to transaction:
/// Broker: Topic authorization failed`: the only place a transactional producer names
/// the topic whose ACL refused it (the transaction's error and its records' do not).
fn denied_in(fac: &str, message: &str) -> Option<String> {
    if fac != "ADDPARTS" || !message.contains("Topic authorization failed") {
        return None;
    }
    let (_, rest) = message.split_once("partition \"")?;
    let (topic, _) = rest.split_once('"')?;
    Some(topic.to_string())
}

impl ClientContext for AckContext {
    fn stats(&self, statistics: rdkafka::Statistics) {
        self.metrics.kafka_statistics(&statistics);
    }

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        if let Some(topic) = denied_in(fac, message) {
            *self.denied.lock().unwrap_or_else(|p| p.into_inner()) = Some(topic);
        }
        rdkafka::client::DefaultClientContext.log(level, fac, message);
    }
}

impl ProducerContext for AckContext {
    type DeliveryOpaque = Arc<BatchAcks>;

    fn delivery(&self, result: &DeliveryResult<'_>, acks: Arc<BatchAcks>) {
        let (reason, message) = match result {
            Ok(message) if message.offset() >= 0 => {
                self.progress.delivered();
                self.trace_answered(&acks, message, None);
                if acks.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
                    acks.finish(Ok(()));
                }
                return;
            }
            Ok(message) => {
                self.unproven.inc();
                self.trace_answered(&acks, message, Some("reported delivered without an offset: no proof it was written; re-sent from the checkpoint".into()));
                let partition = message.partition();
                (FailureReason::NoOffset { partition }, message)
            }
            Err((error, message)) => {
                let code = error
                    .rdkafka_error_code()
                    .map_or_else(|| "other".to_string(), |c| format!("{c:?}"));
                self.errors.get_or_create(&vec![("code", code)]).inc();
                self.note_refusal(error, message);
                self.trace_answered(&acks, message, Some(format!("not delivered: {error}")));
                (FailureReason::Error(error.clone()), message)
            }
        };
        let (mut header_values, mut trace) = (Vec::new(), None);
        for h in message.headers().into_iter().flat_map(|h| h.iter()) {
            let Some(value) = h.value else { continue };
            if h.key == "traceparent" {
                trace = LogIds::parse(value);
            }
            header_values.push(value.to_vec());
        }
        acks.finish(Err(Failure {
            reason,
            topic: message.topic().to_string(),
            header_values,
            trace,
        }));
    }
}

#[cfg(test)]
mod denied_tests {
    use super::denied_in;

    #[test]
    fn names_the_topic_a_transaction_may_not_write_to() {
        let line = "TxnCoordinator/1: Failed to add partition \"it.orders\" [1] to transaction: Broker: Topic authorization failed";
        assert_eq!(denied_in("ADDPARTS", line).as_deref(), Some("it.orders"));
        let other = "TxnCoordinator/1: Failed to add partition \"it.orders\" [0] to transaction: Broker: Operation not attempted";
        assert_eq!(denied_in("ADDPARTS", other), None);
        assert_eq!(denied_in("TXNERR", line), None);
    }
}
