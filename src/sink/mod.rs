//! Sink stage: hands records to Kafka (or stdout for dry runs) and returns, per batch,
//! a future that resolves once every record of the batch is acknowledged.

mod claim_check;
mod config;
mod kafka;
mod open;
#[cfg(test)]
pub mod scripted;
mod stdout;

use std::time::Duration;

use futures::future::BoxFuture;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

pub use claim_check::{offload, CheckIn, ClaimCheckConfig, ValueBudget};
pub use config::DeliveryConfig;
pub use kafka::{
    ensure_checkpoint_topic, first_start_key, first_start_of, fleet_checkpoint_topic, fleet_key,
    marker_history, note_fleet_checkpoint_topic, send_first_start_record, FencingWriter,
    FleetRecord, MarkerHistory,
};
pub use open::kafka_sink;
pub use stdout::StdoutSink;

use crate::kafka::KafkaClientError;
use crate::outbox::EventId;
use crate::route::parking::{Refusal, RefusalScope};
use crate::route::{EventRef, Record};

/// Resolves with the number of records acknowledged, or the first failure.
pub type Delivery = BoxFuture<'static, Result<usize, SinkError>>;

/// Errors from a sink.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("cannot create the Kafka producer: {0}")]
    Create(KafkaError),
    #[error("Kafka rejected the record for event {} ({} at {}) to topic {topic}: {error}", event.id, event.table, event.position)]
    Produce {
        event: Box<EventRef>,
        topic: String,
        error: KafkaError,
    },
    #[error("Kafka did not acknowledge event {} ({} at {}) on topic {topic}: {error}", event.id, event.table, event.position)]
    Delivery {
        event: Box<EventRef>,
        topic: String,
        error: KafkaError,
    },
    #[error("Kafka reported event {} ({} at {}) on topic {topic} partition {partition} as delivered without an offset (librdkafka's implicit acknowledgement after a leader change): not proof it was written; re-sending from the checkpoint", event.id, event.table, event.position)]
    Unproven {
        event: Box<EventRef>,
        topic: String,
        partition: i32,
    },
    #[error("the producer was dropped before acknowledging event {}", event.id)]
    Canceled { event: Box<EventRef> },
    #[error("Kafka transaction {action} failed for transactional.id {transactional_id}: {error}; aborted, resuming from the last committed checkpoint")]
    Transaction {
        action: &'static str,
        transactional_id: String,
        error: KafkaError,
    },
    #[error("this router was fenced: another producer with transactional.id {transactional_id} took over ({error}); it stops and never writes again (run one instance per transactional.id, or a standby)")]
    Fenced {
        transactional_id: String,
        error: KafkaError,
    },
    #[error("the commit marker of transactional.id {transactional_id} on {topic} was {why}; the Kafka transaction is aborted (nothing of it becomes visible) and resumes from the last committed checkpoint")]
    MarkerUnproven {
        transactional_id: String,
        topic: String,
        why: &'static str,
    },
    #[error("the Kafka transaction of transactional.id {transactional_id} was open {open_secs} s, longer than its transaction.timeout.ms = {timeout_ms}: the coordinator aborted it (librdkafka reports this as a fence; no other instance took over). {}", match retry_with_ms { Some(ms) => format!("Retrying with transaction.timeout.ms = {ms} for this process; set kafka.properties.\"transaction.timeout.ms\" (and message.timeout.ms) above your longest binlog transaction's delivery time"), None => "It is at the brokers' usual maximum: raise transaction.max.timeout.ms on the brokers and kafka.properties.\"transaction.timeout.ms\", or split the application's transaction".to_string() })]
    TransactionTimedOut {
        transactional_id: String,
        open_secs: u64,
        timeout_ms: u64,
        /// The timeout the next producer gets; `None` at the maximum (then it stops).
        retry_with_ms: Option<u64>,
    },
    #[error("cannot record the first start on {topic}: {reason}")]
    FirstStart { topic: String, reason: String },
    #[error(
        "cannot write the fleet's record on {topic}: {reason}; nothing of it is visible, try again"
    )]
    FleetRecord { topic: String, reason: String },
    #[error(transparent)]
    Client(#[from] KafkaClientError),
    #[error("cannot write to stdout: {0}")]
    Stdout(std::io::Error),
    #[error("the claim check could not write the value of event {} ({} at {}) to {location}: {error}; nothing after it is sent, the checkpoint stays before it. Check the bucket, its credentials and the endpoint, then start the router again", event.id, event.table, event.position)]
    ClaimCheck {
        event: Box<EventRef>,
        location: String,
        error: String,
    },
    #[error("{0}")]
    ClaimCheckSetup(String),
    #[error("{cause}; behind it, Kafka refused event {} for good on topic {}: {}", refusal.event_id, refusal.topic, refusal.reason)]
    Refused {
        refusal: Refusal,
        cause: Box<SinkError>,
    },
}

impl SinkError {
    /// True when a restart from the checkpoint may succeed; false when the record itself
    /// or the configuration is the problem.
    pub fn is_transient(&self) -> bool {
        match self {
            SinkError::Produce { error, .. } | SinkError::Delivery { error, .. } => {
                !is_permanent(error)
            }
            SinkError::Canceled { .. }
            | SinkError::Transaction { .. }
            | SinkError::MarkerUnproven { .. }
            | SinkError::Unproven { .. } => true,
            SinkError::Client(e) => e.is_transient(),
            SinkError::TransactionTimedOut { retry_with_ms, .. } => retry_with_ms.is_some(),
            // object_store retried within claim_check's limits already.
            SinkError::Create(_)
            | SinkError::ClaimCheck { .. }
            | SinkError::ClaimCheckSetup(_)
            | SinkError::Stdout(_)
            | SinkError::Fenced { .. }
            | SinkError::FirstStart { .. }
            | SinkError::FleetRecord { .. }
            | SinkError::Refused { .. } => false,
        }
    }
}

impl SinkError {
    /// When Kafka refused one outbox event's record for good — the router may not write
    /// to its topic, or the record is over the topic's size limit — which, and why:
    /// parking holds back its aggregate and lets the others flow.
    pub fn refusal(&self) -> Option<Refusal> {
        if let SinkError::Refused { refusal, .. } = self {
            return Some(refusal.clone());
        }
        let event = self.event()?;
        event.aggregate_type.as_ref()?;
        let (SinkError::Produce { topic, error, .. } | SinkError::Delivery { topic, error, .. }) =
            self
        else {
            return None;
        };
        refusal_of(event.id.clone(), topic, error)
    }

    /// The event whose record failed, when one did.
    pub fn event(&self) -> Option<&EventRef> {
        match self {
            SinkError::Produce { event, .. }
            | SinkError::Delivery { event, .. }
            | SinkError::Unproven { event, .. }
            | SinkError::Canceled { event }
            | SinkError::ClaimCheck { event, .. } => Some(event),
            _ => None,
        }
    }
}

/// Kafka's answer `error` for event `event_id`'s record to `topic`, when it refuses it for
/// good: the router may not write to the topic (every record for it is refused), or the
/// record itself is too large or malformed for it.
pub(crate) fn refusal_of(event_id: EventId, topic: &str, error: &KafkaError) -> Option<Refusal> {
    use RDKafkaErrorCode::*;
    let code = error.rdkafka_error_code()?;
    let scope = match code {
        TopicAuthorizationFailed => RefusalScope::Topic,
        MessageSizeTooLarge => RefusalScope::TooLarge,
        InvalidRecord => RefusalScope::Record,
        _ => return None,
    };
    Some(Refusal {
        event_id,
        topic: topic.into(),
        reason: format!("{code:?} ({error})"),
        scope,
    })
}

fn is_permanent(error: &KafkaError) -> bool {
    use RDKafkaErrorCode::*;
    matches!(
        error.rdkafka_error_code(),
        Some(
            MessageSizeTooLarge
                | InvalidMessageSize
                | InvalidTopic
                | TopicAuthorizationFailed
                | ClusterAuthorizationFailed
                | InvalidRecord
                | InvalidArgument
        )
    )
}

/// Where records go: handed over in order, each batch's delivery resolving once Kafka
/// (or stdout) has every record of it.
pub trait Sink: Send + Sync {
    /// Hands records over in order; waits only when the producer's queue is full.
    fn send(&self, records: Vec<Record>) -> BoxFuture<'_, Result<Delivery, SinkError>>;

    /// After a failed delivery: drops every record not yet written, so nothing behind
    /// the failed one is written before it is re-sent.
    fn abandon(&self) {}

    /// The real cause of a failure: a fenced producer fails its queued records with
    /// `PurgeQueue`, and only the producer's fatal error says another instance took over.
    fn explain(&self, error: SinkError) -> SinkError {
        error
    }

    /// The Kafka transactions deliveries are grouped in (exactly-once mode), if any.
    fn transactions(&self) -> Option<&dyn Transactions> {
        None
    }

    /// It keeps nothing it is sent (a read-only pass over table rows, a benchmark).
    fn discards(&self) -> bool {
        false
    }
}

/// Exactly-once mode's Kafka transactions: records sent between `begin` and `commit`
/// become visible together with the commit marker, or not at all.
pub trait Transactions: Send + Sync {
    /// Opens a Kafka transaction.
    fn begin(&self) -> Result<(), SinkError>;

    /// Commits the open Kafka transaction, with its commit `marker` when given (a
    /// transaction of table rows moves no checkpoint and has none); every wait ends
    /// within `within` (a stop's remaining time; `Duration::MAX`: librdkafka's own).
    fn commit_within(
        &self,
        marker: Option<Vec<u8>>,
        within: Duration,
    ) -> BoxFuture<'_, Result<(), SinkError>>;

    /// `commit_within` librdkafka's own time.
    fn commit(&self, marker: Option<Vec<u8>>) -> BoxFuture<'_, Result<(), SinkError>> {
        self.commit_within(marker, Duration::MAX)
    }

    /// Aborts the open Kafka transaction, if any.
    fn abort(&self);

    /// A failure of a Kafka transaction open for `open_for`, as what it was: past the
    /// producer's `transaction.timeout.ms` the coordinator aborted it.
    fn outlived_transaction_timeout(&self, error: SinkError, _open_for: Duration) -> SinkError {
        error
    }
}

/// Acknowledges at once and keeps nothing: measures the source, outbox and route stages
/// alone (`bench/compare`'s raw-read contender), and reads table rows as records.
pub struct NullSink;

impl Sink for NullSink {
    fn send(&self, records: Vec<Record>) -> BoxFuture<'_, Result<Delivery, SinkError>> {
        let n = records.len();
        let delivery: Delivery = Box::pin(futures::future::ready(Ok(n)));
        Box::pin(futures::future::ready(Ok(delivery)))
    }

    fn discards(&self) -> bool {
        true
    }
}
