//! Exactly-once mode on the producer: one Kafka transaction at a time, closed by a commit
//! marker on a compacted topic; fencing, timeouts and the first start's permission.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use super::delivery::{AckContext, BatchAcks, Failure, FailureReason};
use crate::sink::SinkError;

/// The commit marker of exactly-once mode: one record per Kafka transaction, on a
/// compacted topic, keyed by the source's `transactional.id`.
pub(super) struct Transactional {
    pub(super) topic: String,
    pub(super) key: String,
    /// The producer's `transaction.timeout.ms`.
    pub(super) timeout: Duration,
}

/// 15 minutes by default.
const BROKER_MAX_TRANSACTION_TIMEOUT_MS: u64 = 900_000;

/// A `transaction.timeout.ms` raised for this process's next producers after a Kafka
/// transaction outlived the configured one: the coordinator aborted it, and the same
/// binlog transaction would outlive it again after every restart. Process-wide because
/// the pipeline builds a new producer on each restart and exactly-once mode has one.
pub(super) static TRANSACTION_TIMEOUT_RAISED_MS: AtomicU64 = AtomicU64::new(0);

/// How long transaction control calls may take (librdkafka retries within it).
pub(super) const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(60);

impl Transactional {
    /// A failure of a Kafka transaction open for `open_for` as what it was: past the
    /// producer's `transaction.timeout.ms`, the coordinator aborts it and bumps the epoch,
    /// and librdkafka reports a fence. The next producer gets twice the time (up to the
    /// brokers' default maximum), so the pipeline's restart gets through.
    pub(super) fn outlived_transaction_timeout(
        &self,
        producer: &BaseProducer<AckContext>,
        error: SinkError,
        open_for: Duration,
    ) -> SinkError {
        let error = self.explain(producer, error);
        let fits = open_for < self.timeout;
        if fits
            || !matches!(
                error,
                SinkError::Fenced { .. } | SinkError::Transaction { .. }
            )
        {
            return error;
        }
        let timeout_ms = self.timeout.as_millis() as u64;
        let next_ms = (timeout_ms.saturating_mul(2)).min(BROKER_MAX_TRANSACTION_TIMEOUT_MS);
        let retry_with_ms = (next_ms > timeout_ms).then_some(next_ms);
        if let Some(next) = retry_with_ms {
            TRANSACTION_TIMEOUT_RAISED_MS.fetch_max(next, Ordering::Relaxed);
        }
        SinkError::TransactionTimedOut {
            transactional_id: self.key.clone(),
            open_secs: open_for.as_secs(),
            timeout_ms,
            retry_with_ms,
        }
    }

    /// Opens a Kafka transaction (exactly-once mode).
    pub(super) fn begin(&self, producer: &BaseProducer<AckContext>) -> Result<(), SinkError> {
        producer
            .begin_transaction()
            .map_err(|error| transaction_error("begin", &self.key, error))
    }

    /// Adds `marker` (the checkpoint of the transaction's last binlog transaction), if
    /// any, to the open Kafka transaction and commits it: the records and the marker become
    /// visible together or not at all. A failed commit is aborted. Every wait ends within
    /// `within` (a stop's remaining time), and never later than librdkafka's own limit.
    pub(super) async fn commit(
        &self,
        producer: &BaseProducer<AckContext>,
        marker: Option<Vec<u8>>,
        within: Duration,
    ) -> Result<(), SinkError> {
        let by = tokio::time::Instant::now() + within.min(TRANSACTION_TIMEOUT);
        let left = || by.saturating_duration_since(tokio::time::Instant::now());
        let outcome = match marker {
            Some(marker) => {
                let (acks, outcome) = BatchAcks::new(1);
                // Partition 0 by name: the reader takes the newest record of partition 0,
                // whatever partitioner the user's properties set.
                let record = BaseRecord::with_opaque_to(&self.topic, acks)
                    .partition(0)
                    .key(&self.key)
                    .payload(&marker);
                if let Err((error, _)) = producer.send(record) {
                    return Err(self.aborted(producer, "commit marker", error, left()));
                }
                Some(outcome)
            }
            None => None,
        };
        // The marker's own acknowledgement first: rust-rdkafka's commit_transaction
        // flushes before committing, and a flush that finds a record outstanding polls
        // an event queue the producer's thread drains — a fixed 100 ms per commit.
        if let Some(outcome) = outcome {
            let unproven = |why: &'static str| SinkError::MarkerUnproven {
                transactional_id: self.key.clone(),
                topic: self.topic.clone(),
                why,
            };
            let failure = match tokio::time::timeout(left(), outcome).await {
                Ok(Ok(Ok(()))) => None,
                Ok(Ok(Err(Failure {
                    reason: FailureReason::Error(error),
                    ..
                }))) => Some(transaction_error("commit marker", &self.key, error)),
                Ok(Ok(Err(Failure {
                    reason: FailureReason::NoOffset { .. },
                    ..
                }))) => Some(unproven(
                    "reported delivered without an offset, which is no proof it was written",
                )),
                Ok(Err(_)) => Some(unproven(
                    "dropped by the producer without a delivery report",
                )),
                Err(_) => Some(unproven("not acknowledged in time")),
            };
            if let Some(failure) = failure {
                return Err(self.abort_after(producer, failure, left()));
            }
        }
        // The same 100 ms when the producer's queue still holds an event its thread has
        // not served yet (a delivery report, statistics): 4 of 37 commits took 107 ms.
        // Waiting here for the thread costs a millisecond or two.
        let served_by = tokio::time::Instant::now() + Duration::from_millis(200);
        while producer.in_flight_count() > 0 && tokio::time::Instant::now() < served_by {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let committed = tokio::task::block_in_place(|| producer.commit_transaction(left()));
        if let Err(error) = committed {
            return Err(self.aborted(producer, "commit", error, left()));
        }
        producer.context().transaction_ended(None);
        Ok(())
    }

    /// A failure as what caused it: once the producer is fenced, its queued records fail
    /// with `PurgeQueue` and its calls with errors that name nothing; the fatal error
    /// librdkafka keeps says the producer was fenced.
    pub(super) fn explain(
        &self,
        producer: &BaseProducer<AckContext>,
        error: SinkError,
    ) -> SinkError {
        if matches!(
            error,
            SinkError::Fenced { .. } | SinkError::TransactionTimedOut { .. }
        ) {
            return error;
        }
        match producer.client().fatal_error() {
            Some((code, reason)) if is_fenced_code(code) || reason.contains("fenced") => {
                tracing::debug!(%reason, "the producer's fatal error");
                SinkError::Fenced {
                    transactional_id: self.key.clone(),
                    error: KafkaError::MessageProduction(code),
                }
            }
            _ => error,
        }
    }

    /// Aborts the open transaction, if any (after a failed delivery).
    pub(super) fn abort(&self, producer: &BaseProducer<AckContext>) {
        let _ = tokio::task::block_in_place(|| producer.abort_transaction(TRANSACTION_TIMEOUT));
        producer.context().transaction_ended(Some(
            "its Kafka transaction was aborted after a failed delivery",
        ));
    }

    /// Aborts the open transaction (best effort, within `within`) and returns the error
    /// that caused it.
    fn aborted(
        &self,
        producer: &BaseProducer<AckContext>,
        action: &'static str,
        error: KafkaError,
        within: Duration,
    ) -> SinkError {
        self.abort_after(
            producer,
            transaction_error(action, &self.key, error),
            within,
        )
    }

    /// `failure`, after aborting the open transaction unless the producer was fenced. An
    /// abort that does not finish in time leaves the transaction to the coordinator,
    /// which aborts it at `transaction.timeout.ms`, or to the next producer, whose
    /// start fences it: either way nothing of it becomes visible.
    fn abort_after(
        &self,
        producer: &BaseProducer<AckContext>,
        failure: SinkError,
        within: Duration,
    ) -> SinkError {
        if !matches!(failure, SinkError::Fenced { .. }) {
            let _ = tokio::task::block_in_place(|| producer.abort_transaction(within));
        }
        producer.context().transaction_ended(Some(&format!(
            "its Kafka transaction was not committed: {failure}"
        )));
        failure
    }
}

/// True when a newer producer with the same `transactional.id` fenced this one.
pub(super) fn is_fenced(error: &KafkaError) -> bool {
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
pub(super) fn transaction_error(action: &'static str, key: &str, error: KafkaError) -> SinkError {
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
