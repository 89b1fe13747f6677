//! Exactly-once: batches go into Kafka transactions; acknowledgements count, and the
//! checkpoint moves, when their transaction commits with the checkpoint as its marker
//! (before that no read_committed consumer sees them). A transaction commits only at
//! the end of a binlog transaction, so a large one's parts all commit together.

use std::time::{Duration, Instant};

use super::backlog::Backlog;
use super::in_flight::InFlight;
use super::policy::{CommitPolicy, Stop};
use super::prefix::Prefix;
use crate::monitor::Metrics;
use crate::pipeline::PipelineError;
use crate::route::Batch;
use crate::sink::{DeliveryConfig, Transactions};

/// A backlog's reader quiet this long with nothing in flight has caught up, or
/// stalled: either way its open transaction commits (the pipe is empty, the commit
/// costs nothing but its `EndTxn`). Much shorter, and a backlog whose reader is slower
/// than the producer would commit at each of its reader's pauses.
const DRAINED_QUIET: Duration = Duration::from_millis(20);

/// The open Kafka transaction and when it is due.
pub(super) struct KafkaTransactions<'s> {
    sink: &'s dyn Transactions,
    /// Records acknowledged in the open transaction, counted once it commits.
    acknowledged: u64,
    is_open: bool,
    /// The last batch sent ended a binlog transaction: a commit may follow.
    at_boundary: bool,
    opened_at: Instant,
    records: usize,
    /// Bytes of the records in it.
    bytes: usize,
    max_records: usize,
    max_age: Duration,
    /// How long one may stay open while a backlog is read…
    max_backlog_age: Duration,
    /// …and how large it may grow meanwhile: the coordinator aborts a transaction open
    /// past `transaction.timeout.ms`, and a slow broker must not turn a backlog's
    /// transaction into one that outlives it.
    max_backlog_records: usize,
    max_backlog_bytes: usize,
    /// Whether the batches it takes come from a backlog.
    backlog: Backlog,
    /// How long the last commit took (drain, marker, `EndTxn`): caught up, a record
    /// waits for its transaction's age limit and then for the commit, so the limit is
    /// reached that much earlier (up to half of it) and `commit_max_ms` bounds the wait.
    commit_took: Duration,
    /// Batches that asked to be told when they count: told when the open transaction
    /// commits, dropped (an error for the asker) when it does not.
    told_on_commit: Vec<tokio::sync::oneshot::Sender<()>>,
}

impl<'s> KafkaTransactions<'s> {
    /// Transactions of `sink`, sized by `delivery.commit_*`.
    pub(super) fn new(delivery: &DeliveryConfig, sink: &'s dyn Transactions) -> Self {
        let max_age = Duration::from_millis(delivery.commit_max_ms.max(1));
        Self {
            sink,
            acknowledged: 0,
            is_open: false,
            at_boundary: true,
            opened_at: Instant::now(),
            records: 0,
            bytes: 0,
            max_records: delivery.commit_max_records,
            max_backlog_records: delivery
                .commit_backlog_max_records
                .max(delivery.commit_max_records),
            max_backlog_bytes: delivery.commit_backlog_max_bytes.max(1),
            max_age,
            max_backlog_age: Duration::from_millis(
                delivery
                    .commit_backlog_ms()
                    .max(delivery.commit_max_ms)
                    .max(1),
            ),
            // A reader quiet for as long as a caught-up transaction lasts has caught up.
            backlog: Backlog::new(max_age),
            commit_took: Duration::ZERO,
            told_on_commit: Vec::new(),
        }
    }

    /// Time to commit: at the end of a binlog transaction, and full or old enough — or,
    /// while a backlog is read, old enough for a backlog (`waiting`: the reader has
    /// batches ready), or with nothing in flight (`drained`) and the reader quiet for
    /// `DRAINED_QUIET`: a commit's cost is the pipe it empties, and this one is empty
    /// already. That is how a backlog's last transaction ends — once its last record is
    /// acknowledged, not `commit_max_ms` after the reader went quiet.
    fn due(&self, waiting: bool, drained: bool, server_now_ms: i64) -> bool {
        if !self.is_open || !self.at_boundary {
            return false;
        }
        let age = self.opened_at.elapsed();
        if self.backlog.active(waiting, server_now_ms) {
            age >= self.max_backlog_age
                || self.records >= self.max_backlog_records
                || self.bytes >= self.max_backlog_bytes
                || (drained && !waiting && self.backlog.quiet_for() >= DRAINED_QUIET)
        } else {
            let ahead = self.commit_took.min(self.max_age / 2);
            self.records >= self.max_records || age + ahead >= self.max_age
        }
    }

    /// Waits for every record of the open transaction, then commits it with the
    /// acknowledged prefix as its marker (every wait within `within`); the store gets
    /// the prefix once Kafka has it.
    async fn commit(
        &mut self,
        prefix: &mut Prefix<'_>,
        in_flight: &mut InFlight,
        within: Duration,
    ) -> Result<(), PipelineError> {
        let started = Instant::now();
        while let Some(done) = in_flight.next().await {
            if let Err(e) = self.settle(prefix, done) {
                self.sink.abort();
                return Err(e);
            }
        }
        let drained = started.elapsed();
        crash_point!("txn.before_commit");
        let marker = prefix.next_marker();
        self.sink
            .commit_within(Some(marker.encode()), within)
            .await?;
        prefix.marker_committed(&marker);
        tracing::debug!(
            records = self.records,
            drain_ms = drained.as_millis() as u64,
            commit_ms = (started.elapsed() - drained).as_millis() as u64,
            "Kafka transaction committed"
        );
        crash_point!("txn.after_commit");
        for notify in self.told_on_commit.drain(..) {
            let _ = notify.send(());
        }
        self.is_open = false;
        self.records = 0;
        self.bytes = 0;
        self.commit_took = started.elapsed();
        let metrics = prefix.metrics();
        metrics.kafka_transaction_committed();
        metrics.acked(std::mem::take(&mut self.acknowledged));
        prefix.hand_over();
        Ok(())
    }
}

impl CommitPolicy for KafkaTransactions<'_> {
    fn tick(&self) -> Duration {
        self.max_age.min(DRAINED_QUIET)
    }

    /// The batch goes into the open transaction (opened if need be).
    fn sending(&mut self, batch: &Batch, bytes: usize) -> Result<(), PipelineError> {
        if !self.is_open {
            self.sink.begin()?;
            self.is_open = true;
            self.opened_at = Instant::now();
        }
        self.records += batch.records.len();
        self.bytes += bytes;
        self.at_boundary = batch.complete;
        self.backlog.observe(batch);
        Ok(())
    }

    fn acknowledged(&mut self, records: u64, _: &Metrics) {
        self.acknowledged += records;
    }

    fn counted(&mut self, notify: tokio::sync::oneshot::Sender<()>) {
        self.told_on_commit.push(notify);
    }

    async fn after_step(
        &mut self,
        prefix: &mut Prefix<'_>,
        in_flight: &mut InFlight,
        waiting: bool,
    ) -> Result<(), PipelineError> {
        let now = prefix.metrics().server_clock().now_ms();
        match self.due(waiting, in_flight.is_empty(), now) {
            true => self.commit(prefix, in_flight, Duration::MAX).await,
            false => Ok(()),
        }
    }

    async fn at_stop(
        &mut self,
        prefix: &mut Prefix<'_>,
        in_flight: &mut InFlight,
        stop: Stop,
    ) -> Option<PipelineError> {
        let Stop {
            mut failure,
            drained,
            within,
        } = stop;
        if self.is_open {
            // Everything delivered: the last transaction commits like any other — unless
            // it ends inside a large binlog transaction, whose parts must all commit
            // together. Otherwise nothing of it becomes visible.
            if self.at_boundary && failure.is_none() && drained {
                let committed = match stop_commit_failpoint() {
                    Ok(()) => self.commit(prefix, in_flight, within).await,
                    Err(e) => {
                        self.sink.abort();
                        Err(e)
                    }
                };
                failure = committed.err();
            } else {
                self.sink.abort();
            }
        }
        // A Kafka transaction that outlived its timeout fails like a fenced one.
        if self.is_open {
            let open_for = self.opened_at.elapsed();
            failure = failure.map(|f| match f {
                PipelineError::Sink(e) => {
                    PipelineError::Sink(self.sink.outlived_transaction_timeout(e, open_for))
                }
                other => other,
            });
        }
        failure
    }
}

/// Tests fail a stop's last commit (`txn.stop_commit_fails`) the way an unanswered
/// commit marker does.
fn stop_commit_failpoint() -> Result<(), PipelineError> {
    fail::fail_point!("txn.stop_commit_fails", |_| Err(PipelineError::Sink(
        crate::sink::SinkError::MarkerUnproven {
            transactional_id: "(failpoint)".into(),
            topic: "(failpoint)".into(),
            why: "not acknowledged in time",
        }
    )));
    Ok(())
}
