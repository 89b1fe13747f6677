//! Where the reader hands its batches: the bounded channel to the sink's side, and with
//! a claim check the byte budget of the values on their way to the bucket.

use std::time::Instant;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::monitor::Metrics;
use crate::route::Batch;
use crate::sink::ValueBudget;

/// Where the reader hands its batches: the channel to the next stage, and with a claim
/// check the byte budget of the values on their way to the bucket.
pub(super) struct Handoff {
    pub tx: mpsc::Sender<Batch>,
    pub budget: Option<ValueBudget>,
}

impl Handoff {
    /// Waits while the values on their way to the bucket have spent the budget: the
    /// next transaction is not read (the binlog waits in the socket) until one is
    /// written. `false` when `stop` came first.
    pub(super) async fn room(&self, stop: &CancellationToken) -> bool {
        let Some(budget) = &self.budget else {
            return true;
        };
        tokio::select! {
            biased;
            _ = stop.cancelled() => false,
            _ = budget.room() => true,
        }
    }

    /// Hands `batch` over, waiting for room; `false` when the next stage stopped or
    /// `stop` came first.
    pub(super) async fn send(
        &self,
        batch: Batch,
        stop: &CancellationToken,
        metrics: &Metrics,
    ) -> bool {
        // Values for the bucket are bounded by bytes: a few 50 MB rows are not held at
        // once whatever the channel's room in batches.
        if let Some(budget) = &self.budget {
            let cost = budget.cost(&batch.records);
            tokio::select! {
                biased;
                _ = stop.cancelled() => return false,
                _ = budget.take(cost) => {}
            }
        }
        let permit = match self.tx.try_reserve() {
            Ok(permit) => permit,
            Err(mpsc::error::TrySendError::Full(())) => {
                let blocked = Instant::now();
                let permit = self.tx.reserve().await;
                metrics.reader_blocked(blocked.elapsed().as_secs_f64());
                match permit {
                    Ok(permit) => permit,
                    Err(_) => return false, // the acker stopped; it says why
                }
            }
            Err(mpsc::error::TrySendError::Closed(())) => return false,
        };
        permit.send(batch);
        true
    }
}
