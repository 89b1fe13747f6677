//! The acknowledged prefix: the end of the last binlog transaction acknowledged with all
//! before it, handed to the checkpoint writer when the commit policy says it counts.

use std::time::Duration;

use super::in_flight::Settled;
use crate::checkpoint::{Checkpoint, CheckpointStore, CheckpointWriter};
use crate::monitor::Metrics;
use crate::pipeline::PipelineError;

pub(in crate::pipeline) struct Prefix<'a> {
    metrics: &'a Metrics,
    /// With how far delivery got while a prepared XA branch holds the position back.
    acknowledged: Checkpoint,
    /// It moved since it was last handed to the writer.
    not_handed_over: bool,
    writer: CheckpointWriter,
}

impl<'a> Prefix<'a> {
    /// Starts at `start`, writing to `store` at most once per `interval`.
    pub(in crate::pipeline) fn new(
        store: &CheckpointStore,
        start: &Checkpoint,
        interval: Duration,
        metrics: &'a Metrics,
    ) -> Self {
        Self {
            metrics,
            // What a run writes is its own: an operator's record is taken over once.
            acknowledged: Checkpoint {
                set_by: None,
                ..start.clone()
            },
            not_handed_over: false,
            writer: {
                let metrics = metrics.clone();
                CheckpointWriter::start(store.clone(), interval, move |cp| {
                    metrics.checkpoint_written(cp)
                })
            },
        }
    }

    pub(super) fn metrics(&self) -> &'a Metrics {
        self.metrics
    }

    /// A settled delivery: its records acknowledged (returned) or its failure. A part
    /// of a large binlog transaction moves nothing: only its last part has an end.
    pub(super) fn settle(&mut self, done: Settled) -> Result<u64, PipelineError> {
        let n = done.delivery?;
        self.metrics.progress().acknowledged();
        self.metrics
            .sent_to_acked(done.sent_at.elapsed().as_secs_f64());
        if done.complete {
            self.acknowledged.position = done.end;
            self.acknowledged.delivered_through = done.delivered_through;
            self.not_handed_over = true;
            if done.commit_time_ms > 0 {
                self.acknowledged.commit_time_ms = done.commit_time_ms;
            }
        }
        crash_point!("ack.before_checkpoint");
        Ok(n as u64)
    }

    /// The prefix counts: the writer stores it (at its pace).
    pub(super) fn hand_over(&mut self) {
        if std::mem::take(&mut self.not_handed_over) {
            self.writer.hand_over(Checkpoint {
                written_at_ms: crate::checkpoint::now_ms(),
                ..self.acknowledged.clone()
            });
        }
    }

    /// The prefix as the marker of the next Kafka transaction: numbered one past the
    /// last one, so a start compares store and marker by this number, never by a clock.
    pub(super) fn next_marker(&self) -> Checkpoint {
        self.acknowledged
            .clone()
            .committed_as(self.acknowledged.commit_seq + 1)
    }

    /// `marker` was committed with its Kafka transaction.
    pub(super) fn marker_committed(&mut self, marker: &Checkpoint) {
        self.acknowledged.commit_seq = marker.commit_seq;
    }

    /// The writer stopped (a failed write): the run must stop too.
    pub(super) fn writer_stopped(&self) -> bool {
        self.writer.has_stopped()
    }

    /// Writes the last checkpoint; the run's failure, else the writer's, is the outcome.
    pub(super) async fn finish(self, failure: Option<PipelineError>) -> Result<(), PipelineError> {
        let written = self.writer.finish().await;
        match (failure, written) {
            (Some(e), _) => Err(e),
            (None, Err(e)) => Err(e.into()),
            (None, Ok(())) => Ok(()),
        }
    }
}
