//! Records a fleet writes outside a run — a first start, an operator's position, the
//! lock topic's note of where the markers live — as the fleet's own transactional
//! producer. Its `init_transactions` fences whichever instance leads (and any other
//! writer of these records), so a read taken after it sees every transaction of the id
//! decided, and of two writers racing, only one commits: the compare-and-set a fleet
//! needs without any consensus of its own.

use std::time::Duration;

use rdkafka::producer::{FutureProducer, FutureRecord, Producer};

use super::transactions::{transaction_error, TRANSACTION_TIMEOUT};
use crate::kafka::{transactional_config, KafkaConfig};
use crate::sink::SinkError;

/// One record for partition 0 of a compacted topic.
#[derive(Debug, Clone)]
pub struct FleetRecord {
    pub topic: String,
    pub key: String,
    pub value: Vec<u8>,
}

/// The fleet's transactional producer, after it fenced every earlier one of its id.
pub struct FencingWriter {
    producer: FutureProducer,
    transactional_id: String,
}

impl FencingWriter {
    /// Fences every earlier producer of `transactional_id` (a leader's open transaction
    /// is aborted, and its next commit fails: it stops) and returns the writer.
    pub fn fence(cfg: &KafkaConfig, transactional_id: &str) -> Result<Self, SinkError> {
        let producer: FutureProducer = transactional_config(cfg, transactional_id)
            .create()
            .map_err(SinkError::Create)?;
        tokio::task::block_in_place(|| producer.init_transactions(TRANSACTION_TIMEOUT))
            .map_err(|e| transaction_error("init", transactional_id, e))?;
        Ok(Self {
            producer,
            transactional_id: transactional_id.to_string(),
        })
    }

    /// Writes `records` in one Kafka transaction: all of them visible, or none. Each
    /// needs its proof (an offset) before the commit is asked.
    pub async fn commit(&self, records: &[FleetRecord]) -> Result<(), SinkError> {
        let id = &self.transactional_id;
        self.producer
            .begin_transaction()
            .map_err(|e| transaction_error("begin", id, e))?;
        let sends = records.iter().map(|r| {
            let record = FutureRecord::to(&r.topic)
                .partition(0)
                .key(&r.key)
                .payload(&r.value);
            self.producer.send(record, Duration::from_secs(30))
        });
        let results = futures::future::join_all(sends).await;
        for (result, record) in results.into_iter().zip(records) {
            let reason = match result {
                Ok(delivered) if delivered.offset >= 0 => continue,
                Ok(_) => "reported delivered without an offset".to_string(),
                Err((error, _)) => error.to_string(),
            };
            // Nothing of it becomes visible; a fenced producer needs no abort.
            let _ = tokio::task::block_in_place(|| {
                self.producer.abort_transaction(TRANSACTION_TIMEOUT)
            });
            return Err(SinkError::FleetRecord {
                topic: record.topic.clone(),
                reason,
            });
        }
        tokio::task::block_in_place(|| self.producer.commit_transaction(TRANSACTION_TIMEOUT))
            .map_err(|e| transaction_error("commit", id, e))
    }
}
