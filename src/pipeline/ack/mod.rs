//! The acknowledgement path: hands batches to the sink within the in-flight window,
//! releases their deliveries in commit order, and passes the acknowledged prefix — the
//! end of the last transaction acknowledged with all before it — to the checkpoint
//! writer. When an acknowledgement counts and the checkpoint may move is the delivery
//! mode's commit policy: at once (`at_least_once.rs`), or when the Kafka transaction
//! holding it commits (`exactly_once.rs`). ("Watermark" in this project means only the
//! polling relay's handover condition, `source.snapshot = { watermark }`.)

mod at_least_once;
mod backlog;
mod exactly_once;
mod in_flight;
mod policy;
mod prefix;
#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::PipelineError;
use crate::config::PipelineConfig;
use crate::route::Batch;
use crate::sink::{DeliveryConfig, Sink};
use at_least_once::AtLeastOnce;
use exactly_once::KafkaTransactions;
use in_flight::InFlight;
use policy::{CommitPolicy, Stop};
pub(super) use prefix::Prefix;

/// Sends batches and advances the acknowledged prefix from `prefix` until the channel
/// closes or a delivery fails; then drains what is in flight (within
/// `pipeline.shutdown_timeout_secs`) and writes the final checkpoint. A transactional
/// sink (exactly-once mode) groups the batches in Kafka transactions per `delivery`.
pub(super) async fn acknowledge(
    sink: &dyn Sink,
    batches: mpsc::Receiver<Batch>,
    stop_reading: &CancellationToken,
    prefix: Prefix<'_>,
    pipeline: &PipelineConfig,
    delivery: &DeliveryConfig,
) -> Result<(), PipelineError> {
    match sink.transactions() {
        Some(transactions) => {
            let policy = KafkaTransactions::new(delivery, transactions);
            run(policy, prefix, sink, batches, pipeline, stop_reading).await
        }
        None => run(AtLeastOnce, prefix, sink, batches, pipeline, stop_reading).await,
    }
}

async fn run<P: CommitPolicy>(
    mut policy: P,
    mut prefix: Prefix<'_>,
    sink: &dyn Sink,
    mut rx: mpsc::Receiver<Batch>,
    pipeline: &PipelineConfig,
    stop_reading: &CancellationToken,
) -> Result<(), PipelineError> {
    let mut in_flight = InFlight::default();
    let mut tick = tokio::time::interval(policy.tick());
    let mut failure: Option<PipelineError> = None;
    loop {
        tokio::select! {
            biased;
            Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                if let Err(e) = policy.settle(&mut prefix, done) {
                    failure = Some(e);
                    break;
                }
            }
            batch = rx.recv(), if in_flight.has_room(pipeline) => {
                let Some(batch) = batch else { break };
                if let Err(e) = send(&mut policy, &prefix, sink, batch, &mut in_flight).await {
                    failure = Some(e);
                    break;
                }
            }
            _ = tick.tick() => {
                // A failed checkpoint write stops the pipeline; its error is reported below.
                if prefix.writer_stopped() {
                    break;
                }
            }
        }
        let waiting = !rx.is_empty();
        if let Err(e) = policy
            .after_step(&mut prefix, &mut in_flight, waiting)
            .await
        {
            failure = Some(e);
            break;
        }
    }
    // Stop reading first, then wait for what Kafka already has, so a restart does not
    // race the old producer's last deliveries.
    stop_reading.cancel();
    drop(rx);
    if failure.is_some() {
        // What is behind the failed record must wait for its re-send (same order).
        sink.abandon();
    }
    let deadline = Duration::from_secs(pipeline.shutdown_timeout_secs);
    let stop_by = Instant::now() + deadline;
    let drained = tokio::time::timeout(deadline, async {
        while let Some(done) = in_flight.next().await {
            if failure.is_none() {
                if let Err(e) = policy.settle(&mut prefix, done) {
                    failure = Some(e);
                }
            }
        }
    })
    .await
    .is_ok();
    if !drained {
        warn!(
            records = in_flight.records(),
            deadline_secs = deadline.as_secs(),
            "records still unacknowledged at the deadline; they will be sent again after restart"
        );
    }
    let stop = Stop {
        failure,
        drained,
        within: stop_by.saturating_duration_since(Instant::now()),
    };
    let failure = policy.at_stop(&mut prefix, &mut in_flight, stop).await;
    prefix.finish(failure).await
}

/// Hands a batch to the sink (after the policy saw it: exactly-once puts it into the
/// open Kafka transaction) and queues its delivery.
async fn send<P: CommitPolicy>(
    policy: &mut P,
    prefix: &Prefix<'_>,
    sink: &dyn Sink,
    batch: Batch,
    in_flight: &mut InFlight,
) -> Result<(), PipelineError> {
    let bytes: usize = batch.records.iter().map(crate::route::Record::size).sum();
    policy.sending(&batch, bytes)?;
    in_flight.send(sink, batch, bytes, prefix.metrics()).await
}
