//! What a delivery mode decides: when an acknowledgement counts and the checkpoint may
//! move, and what a stop does with what is open.

use std::time::Duration;

use super::in_flight::{InFlight, Settled};
use super::prefix::Prefix;
use crate::monitor::Metrics;
use crate::pipeline::PipelineError;
use crate::route::Batch;

/// How a stop found the deliveries.
pub(super) struct Stop {
    /// What stopped the run early, if anything.
    pub(super) failure: Option<PipelineError>,
    /// Every delivery settled before the deadline.
    pub(super) drained: bool,
    /// What is left of the stop's time.
    pub(super) within: Duration,
}

pub(super) trait CommitPolicy {
    /// How often the acker wakes when nothing happens (to commit an aging transaction).
    fn tick(&self) -> Duration;

    /// `batch` (`bytes` of records) is about to go to the sink.
    fn sending(&mut self, batch: &Batch, bytes: usize) -> Result<(), PipelineError>;

    /// Kafka acknowledged `records` of a settled delivery.
    fn acknowledged(&mut self, records: u64, metrics: &Metrics);

    /// A settled delivery: the prefix moves (or its failure returns), and its records
    /// count as the policy counts them.
    fn settle(&mut self, prefix: &mut Prefix<'_>, mut done: Settled) -> Result<(), PipelineError> {
        let notify = done.notify.take();
        let records = prefix.settle(done)?;
        self.acknowledged(records, prefix.metrics());
        if let Some(notify) = notify {
            self.counted(notify);
        }
        Ok(())
    }

    /// A batch that asked to be told when it counts (and every batch before it, settled
    /// in order) was acknowledged: told at once, or once it is committed.
    fn counted(&mut self, notify: tokio::sync::oneshot::Sender<()>) {
        let _ = notify.send(());
    }

    /// After each step of the acker; `waiting`: the reader has batches ready.
    async fn after_step(
        &mut self,
        prefix: &mut Prefix<'_>,
        in_flight: &mut InFlight,
        waiting: bool,
    ) -> Result<(), PipelineError>;

    /// The stop, once the deliveries drained or the deadline passed: the run's outcome.
    async fn at_stop(
        &mut self,
        prefix: &mut Prefix<'_>,
        in_flight: &mut InFlight,
        stop: Stop,
    ) -> Option<PipelineError>;
}
