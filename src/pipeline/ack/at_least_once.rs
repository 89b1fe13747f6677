//! At-least-once: every acknowledgement counts at once and may move the checkpoint.

use std::time::Duration;

use super::in_flight::InFlight;
use super::policy::{CommitPolicy, Stop};
use super::prefix::Prefix;
use crate::monitor::Metrics;
use crate::pipeline::PipelineError;
use crate::route::Batch;

pub(super) struct AtLeastOnce;

impl CommitPolicy for AtLeastOnce {
    fn tick(&self) -> Duration {
        Duration::from_millis(200)
    }

    fn sending(&mut self, _: &Batch, _: usize) -> Result<(), PipelineError> {
        Ok(())
    }

    fn acknowledged(&mut self, records: u64, metrics: &Metrics) {
        metrics.acked(records);
    }

    async fn after_step(
        &mut self,
        prefix: &mut Prefix<'_>,
        _: &mut InFlight,
        _: bool,
    ) -> Result<(), PipelineError> {
        prefix.hand_over();
        Ok(())
    }

    async fn at_stop(
        &mut self,
        prefix: &mut Prefix<'_>,
        _: &mut InFlight,
        stop: Stop,
    ) -> Option<PipelineError> {
        prefix.hand_over();
        stop.failure
    }
}
