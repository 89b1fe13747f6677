//! A sink whose acknowledgements a unit test releases, for testing the acknowledgement
//! path without Kafka: every `send` hands back a delivery the test resolves when it
//! chooses (in any order, or with a failure); transaction calls are recorded in order.

use std::sync::{Arc, Mutex};

use futures::FutureExt;
use tokio::sync::oneshot;

use futures::future::BoxFuture;

use super::{Delivery, Sink, SinkError, Transactions};
use crate::checkpoint::Checkpoint;
use crate::route::Record;

/// What the code under test asked of the sink, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Begin,
    /// A batch handed over: its index among all sends, and how many records it had.
    Send {
        batch: usize,
        records: usize,
    },
    /// A commit with the checkpoint it carried as its marker.
    Commit(Option<Checkpoint>),
    Abort,
    Abandon,
}

/// A sent batch's record count and the sender that resolves its delivery.
type Unresolved = (usize, oneshot::Sender<Result<usize, SinkError>>);

#[derive(Default)]
struct Script {
    calls: Vec<Call>,
    /// Per batch: the sender that resolves its delivery, until used.
    pending: Vec<Option<Unresolved>>,
}

/// The sink; clones share the script.
#[derive(Clone, Default)]
pub struct ScriptedSink {
    transactional: bool,
    script: Arc<Mutex<Script>>,
}

impl ScriptedSink {
    /// At-least-once (`false`) or exactly-once (`true`) behaviour.
    pub fn new(transactional: bool) -> Self {
        Self {
            transactional,
            ..Self::default()
        }
    }

    fn deliver(&self, records: Vec<Record>) -> Delivery {
        let (tx, rx) = oneshot::channel();
        let mut script = self.script.lock().unwrap();
        let batch = script.pending.len();
        script.calls.push(Call::Send {
            batch,
            records: records.len(),
        });
        script.pending.push(Some((records.len(), tx)));
        rx.map(|r| r.unwrap_or(Err(SinkError::Create(rdkafka::error::KafkaError::Canceled))))
            .boxed()
    }

    fn record(&self, call: Call) {
        self.script.lock().unwrap().calls.push(call);
    }

    /// Acknowledges every record of batch `batch`.
    pub fn ack(&self, batch: usize) {
        let (n, tx) = self.take(batch);
        let _ = tx.send(Ok(n));
    }

    /// Fails batch `batch` as Kafka would fail a record of it.
    pub fn fail(&self, batch: usize) {
        let (_, tx) = self.take(batch);
        let _ = tx.send(Err(SinkError::Create(rdkafka::error::KafkaError::Canceled)));
    }

    fn take(&self, batch: usize) -> Unresolved {
        self.script.lock().unwrap().pending[batch]
            .take()
            .unwrap_or_else(|| panic!("batch {batch} was not sent or is resolved already"))
    }

    /// Batches sent so far.
    pub fn sent(&self) -> usize {
        self.script.lock().unwrap().pending.len()
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.script.lock().unwrap().calls.clone()
    }
}

impl Sink for ScriptedSink {
    fn send(&self, records: Vec<Record>) -> BoxFuture<'_, Result<Delivery, SinkError>> {
        futures::future::ready(Ok(self.deliver(records))).boxed()
    }

    fn abandon(&self) {
        self.record(Call::Abandon);
    }

    fn transactions(&self) -> Option<&dyn Transactions> {
        self.transactional.then_some(self as &dyn Transactions)
    }
}

impl Transactions for ScriptedSink {
    fn begin(&self) -> Result<(), SinkError> {
        self.record(Call::Begin);
        Ok(())
    }

    fn commit_within(
        &self,
        marker: Option<Vec<u8>>,
        _: std::time::Duration,
    ) -> BoxFuture<'_, Result<(), SinkError>> {
        let marker = marker.map(|m| Checkpoint::decode(&m).expect("a checkpoint"));
        self.record(Call::Commit(marker));
        futures::future::ready(Ok(())).boxed()
    }

    fn abort(&self) {
        self.record(Call::Abort);
    }
}
