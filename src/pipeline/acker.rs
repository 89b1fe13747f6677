//! The acknowledgement path: hands batches to the sink within the in-flight window,
//! releases their deliveries in commit order, and passes the watermark — the end of the
//! last transaction acknowledged with all before it — to the checkpoint writer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::FuturesOrdered;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::PipelineError;
use crate::checkpoint::{Checkpoint, CheckpointStore, CheckpointWriter};
use crate::config::Config;
use crate::monitor::Metrics;
use crate::position::Position;
use crate::route::Batch;
use crate::sink::{Sink, SinkError};

/// Tracks acknowledged transactions and hands the watermark to the checkpoint writer.
pub(super) struct Acker<'a> {
    metrics: &'a Metrics,
    /// End of the last transaction whose records, and all earlier ones, are acknowledged
    /// (with how far delivery got while a prepared XA branch holds the position back).
    watermark: Checkpoint,
    /// The watermark moved since it was last handed to the writer.
    unpublished: bool,
    writer: CheckpointWriter,
    /// Exactly-once mode: records acknowledged in the open Kafka transaction, counted as
    /// acknowledged only once it commits (before that no consumer can see them).
    uncommitted: Option<u64>,
}

/// Records and bytes handed to the sink and not yet acknowledged.
#[derive(Default)]
struct Window {
    records: usize,
    bytes: usize,
}

impl Window {
    fn add(&mut self, records: usize, bytes: usize) {
        self.records += records;
        self.bytes += bytes;
    }

    fn remove(&mut self, done: &Completed) {
        self.records -= done.records;
        self.bytes -= done.bytes;
    }
}

/// Deliveries in commit order.
type InFlight = FuturesOrdered<futures::future::BoxFuture<'static, Completed>>;

/// Exactly-once mode's Kafka transaction: when it opened and how much it holds.
struct OpenTransaction {
    is_open: bool,
    /// The last batch sent ended a binlog transaction: a commit may follow.
    at_boundary: bool,
    opened_at: Instant,
    records: usize,
    max_records: usize,
    max_age: Duration,
}

impl OpenTransaction {
    fn new(config: &Config) -> Self {
        Self {
            is_open: false,
            at_boundary: true,
            opened_at: Instant::now(),
            records: 0,
            max_records: config.delivery.commit_max_records,
            max_age: Duration::from_millis(config.delivery.commit_max_ms.max(1)),
        }
    }

    /// Opens one unless one is open.
    fn open(&mut self, sink: &Sink) -> Result<(), PipelineError> {
        if !self.is_open {
            sink.begin()?;
            self.is_open = true;
            self.opened_at = Instant::now();
        }
        Ok(())
    }

    /// Time to commit: full, or old enough, and at the end of a binlog transaction (a
    /// large one's parts all go into one Kafka transaction).
    fn due(&self) -> bool {
        self.is_open
            && self.at_boundary
            && (self.records >= self.max_records || self.opened_at.elapsed() >= self.max_age)
    }

    fn committed(&mut self) {
        self.is_open = false;
        self.records = 0;
    }
}

/// A transaction whose delivery finished, one way or the other.
struct Completed {
    /// Where its transaction ends: the checkpoint once it is acknowledged.
    end: Position,
    /// Delivered up to here though `end` is held before a prepared XA branch.
    delivered_through: Option<Position>,
    /// Its commit time (ms since epoch).
    commit_time_ms: i64,
    /// Records it had, and their bytes.
    records: usize,
    bytes: usize,
    /// It ended a binlog transaction (else a streamed part of one).
    complete: bool,
    /// When they were handed to the producer.
    sent_at: Instant,
    /// What Kafka said: records acknowledged, or the first failure.
    delivery: Result<usize, SinkError>,
}

impl<'a> Acker<'a> {
    pub(super) fn new(
        store: &CheckpointStore,
        start: &Checkpoint,
        interval: Duration,
        metrics: &'a Metrics,
    ) -> Self {
        Self {
            metrics,
            watermark: start.clone(),
            unpublished: false,
            uncommitted: None,
            writer: {
                let metrics = metrics.clone();
                CheckpointWriter::start(store.clone(), interval, move |cp| {
                    metrics.checkpoint_written(cp)
                })
            },
        }
    }

    /// Sends batches and advances the watermark until the channel closes or a delivery
    /// fails; then drains what is in flight (bounded) and writes the final checkpoint.
    ///
    /// In exactly-once mode the batches go into Kafka transactions of up to
    /// `delivery.commit_max_records` records / `commit_max_ms`; each commits with the
    /// checkpoint of its last binlog transaction as its marker, and only a committed
    /// watermark reaches the store.
    pub(super) async fn run(
        mut self,
        sink: &Sink,
        mut rx: mpsc::Receiver<Batch>,
        config: &Config,
        stop_reading: &CancellationToken,
    ) -> Result<(), PipelineError> {
        let max_in_flight = config.pipeline.max_in_flight;
        let max_in_flight_bytes = config.pipeline.max_in_flight_bytes;
        let mut in_flight: InFlight = FuturesOrdered::new();
        let mut window = Window::default();
        let mut txn = sink
            .is_transactional()
            .then(|| OpenTransaction::new(config));
        if txn.is_some() {
            self.uncommitted = Some(0);
        }
        let tick_every = match &txn {
            Some(t) => t.max_age.min(Duration::from_millis(200)),
            None => Duration::from_millis(200),
        };
        let mut tick = tokio::time::interval(tick_every);
        let mut failure: Option<PipelineError> = None;
        loop {
            tokio::select! {
                biased;
                Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                    window.remove(&done);
                    if let Err(e) = self.complete(done) {
                        failure = Some(e);
                        break;
                    }
                }
                batch = rx.recv(), if window.records < max_in_flight && window.bytes < max_in_flight_bytes => {
                    let Some(batch) = batch else { break };
                    if let Some(t) = &mut txn {
                        if let Err(e) = t.open(sink) {
                            failure = Some(e);
                            break;
                        }
                        t.records += batch.records.len();
                        t.at_boundary = batch.complete;
                    }
                    let n = batch.records.len();
                    let bytes: usize = batch.records.iter().map(crate::route::Record::size).sum();
                    let (end, delivered_through, commit_time_ms, routed_at, complete) = (batch.end, batch.delivered_through, batch.commit_time_ms, batch.routed_at, batch.complete);
                    let records_topics = topics_of(&batch.records);
                    let delivery = match sink.send(batch.records).await {
                        Ok(d) => d,
                        Err(e) => { failure = Some(e.into()); break; }
                    };
                    crash_point!("sink.after_send_before_ack");
                    let sent_at = Instant::now();
                    self.metrics.routed_to_sent((sent_at - routed_at).as_secs_f64());
                    count_routed(self.metrics, &records_topics);
                    window.add(n, bytes);
                    in_flight.push_back(Box::pin(async move {
                        Completed { end, delivered_through, commit_time_ms, records: n, bytes, complete, sent_at, delivery: delivery.await }
                    }));
                }
                _ = tick.tick() => {
                    // A failed checkpoint write stops the pipeline; its error is reported below.
                    if self.writer.has_stopped() {
                        break;
                    }
                }
            }
            match &mut txn {
                None => self.publish(),
                Some(t) if t.due() => {
                    if let Err(e) = self.commit(sink, t, &mut in_flight, &mut window).await {
                        failure = Some(e);
                        break;
                    }
                }
                Some(_) => {}
            }
        }
        // Stop reading first, then wait for what Kafka already has, so a restart does
        // not race the old producer's last deliveries.
        stop_reading.cancel();
        drop(rx);
        if failure.is_some() {
            // What is behind the failed record must wait for its re-send (same order).
            sink.abandon();
        }
        let deadline = Duration::from_secs(config.pipeline.shutdown_timeout_secs);
        let drained = tokio::time::timeout(deadline, async {
            while let Some(done) = in_flight.next().await {
                window.remove(&done);
                if failure.is_none() {
                    if let Err(e) = self.complete(done) {
                        failure = Some(e);
                    }
                }
            }
        })
        .await;
        if drained.is_err() {
            warn!(
                records = window.records,
                deadline_secs = deadline.as_secs(),
                "records still unacknowledged at the deadline; they will be sent again after restart"
            );
        }
        match &mut txn {
            None => self.publish(),
            // Everything delivered: the last transaction commits like any other — unless
            // it ends inside a large binlog transaction, whose parts must all commit
            // together.
            Some(t) if t.is_open && t.at_boundary && failure.is_none() && drained.is_ok() => {
                if let Err(e) = self.commit(sink, t, &mut in_flight, &mut window).await {
                    failure = Some(e);
                }
            }
            // Nothing of an unfinished transaction becomes visible.
            Some(t) if t.is_open => sink.abort(),
            Some(_) => {}
        }
        // A Kafka transaction that outlived its timeout fails like a fenced one.
        if let Some(t) = txn.as_ref().filter(|t| t.is_open) {
            if let Some(PipelineError::Sink(e)) = failure {
                let open_for = t.opened_at.elapsed();
                failure = Some(PipelineError::Sink(
                    sink.outlived_transaction_timeout(e, open_for),
                ));
            }
        }
        let written = self.writer.finish().await;
        match (failure, written) {
            (Some(e), _) => Err(e),
            (None, Err(e)) => Err(e.into()),
            (None, Ok(())) => Ok(()),
        }
    }

    /// Waits for every record of the open Kafka transaction, then commits it with the
    /// watermark as its marker; the store gets the watermark once Kafka has it.
    async fn commit(
        &mut self,
        sink: &Sink,
        txn: &mut OpenTransaction,
        in_flight: &mut InFlight,
        window: &mut Window,
    ) -> Result<(), PipelineError> {
        let started = Instant::now();
        while let Some(done) = in_flight.next().await {
            window.remove(&done);
            if let Err(e) = self.complete(done) {
                sink.abort();
                return Err(e);
            }
        }
        let drained = started.elapsed();
        crash_point!("txn.before_commit");
        let marker = self.stamped();
        sink.commit(Some(marker.encode())).await?;
        tracing::debug!(
            records = txn.records,
            drain_ms = drained.as_millis() as u64,
            commit_ms = (started.elapsed() - drained).as_millis() as u64,
            "Kafka transaction committed"
        );
        crash_point!("txn.after_commit");
        txn.committed();
        self.metrics.kafka_transaction_committed();
        if let Some(pending) = &mut self.uncommitted {
            self.metrics.acked(std::mem::take(pending));
        }
        self.publish();
        Ok(())
    }

    fn complete(&mut self, done: Completed) -> Result<(), PipelineError> {
        let n = done.delivery?;
        self.metrics.progress().acknowledged();
        self.metrics
            .sent_to_acked(done.sent_at.elapsed().as_secs_f64());
        match &mut self.uncommitted {
            Some(pending) => *pending += n as u64,
            None => self.metrics.acked(n as u64),
        }
        // A part of a large transaction moves nothing: only its last part has an end.
        if done.complete {
            self.watermark.position = done.end;
            self.watermark.delivered_through = done.delivered_through;
            self.unpublished = true;
            if done.commit_time_ms > 0 {
                self.watermark.commit_time_ms = done.commit_time_ms;
            }
        }
        crash_point!("ack.before_checkpoint");
        Ok(())
    }

    fn publish(&mut self) {
        if std::mem::take(&mut self.unpublished) {
            self.writer.publish(self.stamped());
        }
    }

    /// The watermark as a checkpoint written now.
    fn stamped(&self) -> Checkpoint {
        Checkpoint {
            written_at_ms: crate::checkpoint::now_ms(),
            ..self.watermark.clone()
        }
    }
}

/// Records per topic, in runs of the same topic (records of a transaction are usually
/// grouped), so metrics cost one label lookup per run, not per record.
fn topics_of(records: &[crate::route::Record]) -> Vec<(Arc<str>, u64)> {
    let mut runs: Vec<(Arc<str>, u64)> = Vec::new();
    for r in records {
        match runs.last_mut() {
            Some((t, n)) if *t == r.topic => *n += 1,
            _ => runs.push((r.topic.clone(), 1)),
        }
    }
    runs
}

fn count_routed(metrics: &Metrics, runs: &[(Arc<str>, u64)]) {
    for (topic, n) in runs {
        metrics.routed(topic, *n);
    }
}
