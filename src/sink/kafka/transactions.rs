//! Exactly-once mode on the producer: one Kafka transaction at a time, closed by a commit
//! marker on a compacted topic; fencing, timeouts and the first start's permission.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, FutureProducer, Producer};

use super::delivery::{BatchAcks, Failure, FailureReason};
use super::{client_config, KafkaSink, TopicCreator};
use crate::sink::{DeliveryConfig, KafkaConfig, SinkError};

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

impl KafkaSink {
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
        // The same 100 ms when the producer's queue still holds an event its thread has
        // not served yet (a delivery report, statistics): 4 of 37 commits took 107 ms.
        // Waiting here for the thread costs a millisecond or two.
        let served_by = tokio::time::Instant::now() + Duration::from_millis(200);
        while self.producer.in_flight_count() > 0 && tokio::time::Instant::now() < served_by {
            tokio::time::sleep(Duration::from_millis(1)).await;
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
        super::consumer_markers::last(cfg, &delivery.checkpoint_topic, &delivery.transactional_id)
    }

    /// What the checkpoint topic holds for `delivery.transactional_id`: its newest commit
    /// marker, else whether one was deleted and whether a first start was recorded.
    pub fn marker_history(
        cfg: &KafkaConfig,
        delivery: &DeliveryConfig,
    ) -> Result<MarkerHistory, SinkError> {
        let topic = &delivery.checkpoint_topic;
        if let Some(marker) = Self::last_marker(cfg, delivery)? {
            return Ok(MarkerHistory {
                marker: Some(marker),
                ..MarkerHistory::default()
            });
        }
        // No marker: a first start, or one lost. The whole partition is read for the
        // evidence (compaction keeps it small).
        let first_start = first_start_key(&delivery.transactional_id);
        let keys = [delivery.transactional_id.as_bytes(), first_start.as_bytes()];
        let Some(read) = super::consumer_markers::newest_of_keys(cfg, topic, 0, &keys)? else {
            return Ok(MarkerHistory::default());
        };
        let [marker, first_start] = <[_; 2]>::try_from(read.newest).expect("two keys asked");
        Ok(MarkerHistory {
            marker: marker.as_ref().and_then(|m| m.value.clone()),
            marker_deleted: marker.is_some_and(|m| m.value.is_none()),
            first_start_recorded: first_start.is_some(),
            head_deleted_from: (read.log_start > 0).then_some(read.log_start),
        })
    }

    /// Creates the checkpoint topic, or checks the shape of the one there.
    pub fn ensure_checkpoint_topic(
        cfg: &KafkaConfig,
        delivery: &DeliveryConfig,
    ) -> Result<(), SinkError> {
        TopicCreator::new(cfg)?.ensure_compacted(&delivery.checkpoint_topic, "checkpoint")
    }

    /// Records under `name` on `topic` that a first start at `source.start` is intended
    /// (`checkpoint init` or `run --init`; `name` is exactly-once mode's transactional id
    /// or at-least-once mode's `checkpoint.name`). Under a key of its own, so it can never
    /// hide a commit marker.
    pub async fn record_first_start(
        cfg: &KafkaConfig,
        topic: &str,
        name: &str,
    ) -> Result<(), SinkError> {
        let producer: FutureProducer = client_config(cfg).create().map_err(SinkError::Create)?;
        let key = first_start_key(name);
        let value = format!(
            "first start recorded at unix ms {}",
            crate::checkpoint::now_ms()
        );
        let record = rdkafka::producer::FutureRecord::to(topic)
            .partition(0)
            .key(&key)
            .payload(&value);
        let failed = |reason: String| SinkError::FirstStart {
            topic: topic.to_string(),
            reason,
        };
        match producer.send(record, Duration::from_secs(30)).await {
            // Proof, as for any record: an offset.
            Ok(delivered) if delivered.offset >= 0 => Ok(()),
            Ok(_) => Err(failed("reported delivered without an offset".into())),
            Err((error, _)) => Err(failed(error.to_string())),
        }
    }

    /// Whether a first start was recorded under `name` on `topic` (its record), and
    /// whether records were deleted from the topic's head (it may have been one).
    pub fn first_start_of(
        cfg: &KafkaConfig,
        topic: &str,
        name: &str,
    ) -> Result<FirstStartRecord, SinkError> {
        let key = first_start_key(name);
        let Some(read) = super::consumer_markers::newest_of_keys(cfg, topic, 0, &[key.as_bytes()])?
        else {
            return Ok(FirstStartRecord::default());
        };
        let newest = read.newest.into_iter().next().flatten();
        Ok(FirstStartRecord {
            recorded: newest
                .and_then(|r| r.value)
                .map(|v| String::from_utf8_lossy(&v).into_owned()),
            head_deleted_from: (read.log_start > 0).then_some(read.log_start),
        })
    }
}

/// What a checkpoint topic says of one name's first start.
#[derive(Debug, Default)]
pub struct FirstStartRecord {
    /// The record's text ("first start recorded at unix ms …"), when there is one.
    pub recorded: Option<String>,
    /// Records were deleted from the head of the topic, below this offset.
    pub head_deleted_from: Option<i64>,
}

/// What the checkpoint topic says of one transactional id's commit markers.
#[derive(Debug, Default)]
pub struct MarkerHistory {
    /// The newest commit marker (encoded checkpoint).
    pub marker: Option<Vec<u8>>,
    /// The newest record under the marker's key is a tombstone: a marker existed.
    pub marker_deleted: bool,
    /// A first start at `source.start` was recorded (`checkpoint init`, `run --init`).
    pub first_start_recorded: bool,
    /// Records were deleted from the head of the topic, below this offset: they may
    /// have been markers.
    pub head_deleted_from: Option<i64>,
}

/// The key of `checkpoint init`'s first-start record: beside the markers, never theirs.
fn first_start_key(name: &str) -> String {
    format!("{name}#first-start")
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
