//! Deliveries handed to the sink and not yet settled, in commit order, with the records
//! and bytes they hold (the in-flight window reading pauses on).

use std::sync::Arc;
use std::time::Instant;

use futures::stream::FuturesOrdered;
use futures::StreamExt;

use crate::config::PipelineConfig;
use crate::monitor::Metrics;
use crate::pipeline::PipelineError;
use crate::position::Position;
use crate::route::{Batch, Record};
use crate::sink::{Sink, SinkError};

/// A batch whose delivery settled, one way or the other.
pub(super) struct Settled {
    /// Where its transaction ends: the checkpoint once it is acknowledged.
    pub(super) end: Position,
    /// Delivered up to here though `end` is held before a prepared XA branch.
    pub(super) delivered_through: Option<Position>,
    /// Its commit time (ms since epoch).
    pub(super) commit_time_ms: i64,
    /// It ends a binlog transaction (else it is a streamed part of one).
    pub(super) complete: bool,
    /// When its records were handed to the producer.
    pub(super) sent_at: Instant,
    /// What Kafka said: records acknowledged, or the first failure.
    pub(super) delivery: Result<usize, SinkError>,
    /// Told once it counts as the delivery mode counts (the batch's `settled`).
    pub(super) notify: Option<tokio::sync::oneshot::Sender<()>>,
}

/// Deliveries in commit order, and what they hold.
#[derive(Default)]
pub(super) struct InFlight {
    deliveries: FuturesOrdered<futures::future::BoxFuture<'static, (Settled, Held)>>,
    held: Held,
}

/// Records and their bytes.
#[derive(Default, Clone, Copy)]
struct Held {
    records: usize,
    bytes: usize,
}

impl InFlight {
    pub(super) fn is_empty(&self) -> bool {
        self.deliveries.is_empty()
    }

    pub(super) fn records(&self) -> usize {
        self.held.records
    }

    /// Below both of `pipeline.max_in_flight` and `max_in_flight_bytes`.
    pub(super) fn has_room(&self, pipeline: &PipelineConfig) -> bool {
        self.held.records < pipeline.max_in_flight && self.held.bytes < pipeline.max_in_flight_bytes
    }

    /// The next delivery in commit order, once it settled.
    pub(super) async fn next(&mut self) -> Option<Settled> {
        let (done, held) = self.deliveries.next().await?;
        self.held.records -= held.records;
        self.held.bytes -= held.bytes;
        Some(done)
    }

    /// Hands `batch` (`bytes` of records) to the sink and queues its delivery.
    pub(super) async fn send(
        &mut self,
        sink: &dyn Sink,
        batch: Batch,
        bytes: usize,
        metrics: &Metrics,
    ) -> Result<(), PipelineError> {
        let held = Held {
            records: batch.records.len(),
            bytes,
        };
        let (end, delivered_through, commit_time_ms, routed_at, complete) = (
            batch.end,
            batch.delivered_through,
            batch.commit_time_ms,
            batch.routed_at,
            batch.complete,
        );
        let settled_tx = batch.settled;
        let topics = topics_of(&batch.records);
        let delivery = sink.send(batch.records).await?;
        crash_point!("sink.after_send_before_ack");
        let sent_at = Instant::now();
        metrics.routed_to_sent((sent_at - routed_at).as_secs_f64());
        for (topic, n) in &topics {
            metrics.routed(topic, *n);
        }
        self.held.records += held.records;
        self.held.bytes += held.bytes;
        self.deliveries.push_back(Box::pin(async move {
            let settled = Settled {
                end,
                delivered_through,
                commit_time_ms,
                complete,
                sent_at,
                delivery: delivery.await,
                notify: settled_tx,
            };
            (settled, held)
        }));
        Ok(())
    }
}

/// Records per topic, in runs of the same topic (records of a transaction are usually
/// grouped), so metrics cost one label lookup per run, not per record.
fn topics_of(records: &[Record]) -> Vec<(Arc<str>, u64)> {
    let mut runs: Vec<(Arc<str>, u64)> = Vec::new();
    for r in records {
        match runs.last_mut() {
            Some((t, n)) if *t == r.topic => *n += 1,
            _ => runs.push((r.topic.clone(), 1)),
        }
    }
    runs
}
