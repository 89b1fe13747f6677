//! The acknowledgement path: hands batches to the sink within the in-flight window,
//! releases their deliveries in commit order, and passes the acknowledged prefix — the
//! end of the last transaction acknowledged with all before it — to the checkpoint
//! writer. ("Watermark" in this project means only the polling relay's handover
//! condition, `source.snapshot = { watermark }`.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::FuturesOrdered;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::backlog::Backlog;
use super::PipelineError;
use crate::checkpoint::{Checkpoint, CheckpointStore, CheckpointWriter};
use crate::config::Config;
use crate::monitor::Metrics;
use crate::position::Position;
use crate::route::Batch;
use crate::sink::{Sink, SinkError};

/// Tracks acknowledged transactions and hands the acknowledged prefix to the checkpoint
/// writer.
pub(super) struct Acker<'a> {
    metrics: &'a Metrics,
    /// End of the last transaction whose records, and all earlier ones, are acknowledged
    /// (with how far delivery got while a prepared XA branch holds the position back).
    acknowledged: Checkpoint,
    /// It moved since it was last handed to the writer.
    not_handed_over: bool,
    writer: CheckpointWriter,
    /// At-least-once, or exactly-once with its Kafka transaction.
    mode: Mode,
}

/// Which delivery mode runs.
enum Mode {
    /// Every acknowledgement counts at once and may move the checkpoint.
    AtLeastOnce,
    /// Acknowledgements count, and the checkpoint moves, when their Kafka transaction
    /// commits (before that no consumer can see them).
    ExactlyOnce(OpenTransaction),
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

    fn remove(&mut self, done: &Settled) {
        self.records -= done.records;
        self.bytes -= done.bytes;
    }
}

/// Deliveries in commit order.
type InFlight = FuturesOrdered<futures::future::BoxFuture<'static, Settled>>;

/// Exactly-once mode's Kafka transaction: when it opened and how much it holds.
struct OpenTransaction {
    /// Records acknowledged in it, counted as acknowledged once it commits.
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
}

impl OpenTransaction {
    fn new(config: &Config) -> Self {
        let max_age = Duration::from_millis(config.delivery.commit_max_ms.max(1));
        Self {
            acknowledged: 0,
            is_open: false,
            at_boundary: true,
            opened_at: Instant::now(),
            records: 0,
            bytes: 0,
            max_records: config.delivery.commit_max_records,
            max_backlog_records: config
                .delivery
                .commit_backlog_max_records
                .max(config.delivery.commit_max_records),
            max_backlog_bytes: config.delivery.commit_backlog_max_bytes.max(1),
            max_age,
            max_backlog_age: Duration::from_millis(
                config
                    .delivery
                    .commit_backlog_ms
                    .max(config.delivery.commit_max_ms)
                    .max(1),
            ),
            // A reader quiet for as long as a caught-up transaction lasts has caught up.
            backlog: Backlog::new(max_age),
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

    /// Time to commit: at the end of a binlog transaction (a large one's parts all go
    /// into one Kafka transaction), and full or old enough — or, while a backlog is
    /// read, old enough for a backlog (`waiting`: the reader has batches ready).
    fn due(&self, waiting: bool) -> bool {
        if !self.is_open || !self.at_boundary {
            return false;
        }
        let age = self.opened_at.elapsed();
        if self.backlog.active(waiting) {
            age >= self.max_backlog_age
                || self.records >= self.max_backlog_records
                || self.bytes >= self.max_backlog_bytes
        } else {
            self.records >= self.max_records || age >= self.max_age
        }
    }

    /// The batch about to be sent goes into the open transaction (opened if need be).
    fn add(&mut self, sink: &Sink, batch: &Batch, bytes: usize) -> Result<(), PipelineError> {
        self.open(sink)?;
        self.records += batch.records.len();
        self.bytes += bytes;
        self.at_boundary = batch.complete;
        self.backlog.observe(batch);
        Ok(())
    }

    /// Committed: the acknowledged records to count.
    fn committed(&mut self) -> u64 {
        self.is_open = false;
        self.records = 0;
        self.bytes = 0;
        std::mem::take(&mut self.acknowledged)
    }
}

/// A transaction whose delivery settled, one way or the other ("complete" means only
/// that a batch ends its binlog transaction).
struct Settled {
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
        sink: &Sink,
        config: &Config,
    ) -> Self {
        Self {
            metrics,
            // What a run writes is its own: an operator's record is taken over once.
            acknowledged: Checkpoint {
                set_by: None,
                ..start.clone()
            },
            not_handed_over: false,
            mode: match sink.is_transactional() {
                true => Mode::ExactlyOnce(OpenTransaction::new(config)),
                false => Mode::AtLeastOnce,
            },
            writer: {
                let metrics = metrics.clone();
                CheckpointWriter::start(store.clone(), interval, move |cp| {
                    metrics.checkpoint_written(cp)
                })
            },
        }
    }

    /// Sends batches and advances the acknowledged prefix until the channel closes or a delivery
    /// fails; then drains what is in flight (bounded) and writes the final checkpoint.
    ///
    /// In exactly-once mode the batches go into Kafka transactions of up to
    /// `delivery.commit_max_records` records / `commit_max_ms`; each commits with the
    /// checkpoint of its last binlog transaction as its marker, and only a committed
    /// prefix reaches the store.
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
        let tick_every = match &self.mode {
            Mode::ExactlyOnce(t) => t.max_age.min(Duration::from_millis(200)),
            Mode::AtLeastOnce => Duration::from_millis(200),
        };
        let mut tick = tokio::time::interval(tick_every);
        let mut failure: Option<PipelineError> = None;
        loop {
            tokio::select! {
                biased;
                Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                    window.remove(&done);
                    if let Err(e) = self.settle(done) {
                        failure = Some(e);
                        break;
                    }
                }
                batch = rx.recv(), if window.records < max_in_flight && window.bytes < max_in_flight_bytes => {
                    let Some(batch) = batch else { break };
                    if let Err(e) = self.send_batch(sink, batch, &mut in_flight, &mut window).await {
                        failure = Some(e);
                        break;
                    }
                }
                _ = tick.tick() => {
                    // A failed checkpoint write stops the pipeline; its error is reported below.
                    if self.writer.has_stopped() {
                        break;
                    }
                }
            }
            match &self.mode {
                Mode::AtLeastOnce => self.hand_over_checkpoint(),
                Mode::ExactlyOnce(t) if t.due(!rx.is_empty()) => {
                    if let Err(e) = self
                        .commit(sink, &mut in_flight, &mut window, Duration::MAX)
                        .await
                    {
                        failure = Some(e);
                        break;
                    }
                }
                Mode::ExactlyOnce(_) => {}
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
        let stop_by = Instant::now() + deadline;
        let drained = tokio::time::timeout(deadline, async {
            while let Some(done) = in_flight.next().await {
                window.remove(&done);
                if failure.is_none() {
                    if let Err(e) = self.settle(done) {
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
        match &self.mode {
            Mode::AtLeastOnce => self.hand_over_checkpoint(),
            // Everything delivered: the last transaction commits like any other — unless
            // it ends inside a large binlog transaction, whose parts must all commit
            // together.
            Mode::ExactlyOnce(t)
                if t.is_open && t.at_boundary && failure.is_none() && drained.is_ok() =>
            {
                let within = stop_by.saturating_duration_since(Instant::now());
                let committed = match stop_commit_failpoint() {
                    Err(e) => {
                        sink.abort();
                        Err(e)
                    }
                    Ok(()) => self.commit(sink, &mut in_flight, &mut window, within).await,
                };
                if let Err(e) = committed {
                    failure = Some(e);
                }
            }
            // Nothing of an unfinished transaction becomes visible.
            Mode::ExactlyOnce(t) if t.is_open => sink.abort(),
            Mode::ExactlyOnce(_) => {}
        }
        // A Kafka transaction that outlived its timeout fails like a fenced one.
        if let Mode::ExactlyOnce(t) = &self.mode {
            if t.is_open {
                let open_for = t.opened_at.elapsed();
                failure = failure.map(|f| match f {
                    PipelineError::Sink(e) => {
                        PipelineError::Sink(sink.outlived_transaction_timeout(e, open_for))
                    }
                    other => other,
                });
            }
        }
        self.finish(failure).await
    }

    /// Hands a batch to the sink (exactly-once: into the open Kafka transaction) and
    /// queues its delivery.
    async fn send_batch(
        &mut self,
        sink: &Sink,
        batch: Batch,
        in_flight: &mut InFlight,
        window: &mut Window,
    ) -> Result<(), PipelineError> {
        let n = batch.records.len();
        let bytes: usize = batch.records.iter().map(crate::route::Record::size).sum();
        if let Mode::ExactlyOnce(t) = &mut self.mode {
            t.add(sink, &batch, bytes)?;
        }
        let (end, delivered_through, commit_time_ms, routed_at, complete) = (
            batch.end,
            batch.delivered_through,
            batch.commit_time_ms,
            batch.routed_at,
            batch.complete,
        );
        let records_topics = topics_of(&batch.records);
        let delivery = sink.send(batch.records).await?;
        crash_point!("sink.after_send_before_ack");
        let sent_at = Instant::now();
        self.metrics
            .routed_to_sent((sent_at - routed_at).as_secs_f64());
        count_routed(self.metrics, &records_topics);
        window.add(n, bytes);
        in_flight.push_back(Box::pin(async move {
            Settled {
                end,
                delivered_through,
                commit_time_ms,
                records: n,
                bytes,
                complete,
                sent_at,
                delivery: delivery.await,
            }
        }));
        Ok(())
    }

    /// Writes the last checkpoint; the run's failure, else the writer's, is the outcome.
    async fn finish(self, failure: Option<PipelineError>) -> Result<(), PipelineError> {
        let written = self.writer.finish().await;
        match (failure, written) {
            (Some(e), _) => Err(e),
            (None, Err(e)) => Err(e.into()),
            (None, Ok(())) => Ok(()),
        }
    }

    /// Waits for every record of the open Kafka transaction, then commits it with the
    /// acknowledged prefix as its marker (within `within`); the store gets it once Kafka
    /// has it.
    async fn commit(
        &mut self,
        sink: &Sink,
        in_flight: &mut InFlight,
        window: &mut Window,
        within: Duration,
    ) -> Result<(), PipelineError> {
        let started = Instant::now();
        while let Some(done) = in_flight.next().await {
            window.remove(&done);
            if let Err(e) = self.settle(done) {
                sink.abort();
                return Err(e);
            }
        }
        let drained = started.elapsed();
        crash_point!("txn.before_commit");
        // Numbered one past the last marker: a start compares store and marker by this
        // number, never by a clock.
        let marker = self
            .acknowledged
            .clone()
            .committed_as(self.acknowledged.commit_seq + 1);
        sink.commit_within(Some(marker.encode()), within).await?;
        self.acknowledged.commit_seq = marker.commit_seq;
        let Mode::ExactlyOnce(txn) = &mut self.mode else {
            unreachable!("only exactly-once mode commits")
        };
        tracing::debug!(
            records = txn.records,
            drain_ms = drained.as_millis() as u64,
            commit_ms = (started.elapsed() - drained).as_millis() as u64,
            "Kafka transaction committed"
        );
        crash_point!("txn.after_commit");
        let acknowledged = txn.committed();
        self.metrics.kafka_transaction_committed();
        self.metrics.acked(acknowledged);
        self.hand_over_checkpoint();
        Ok(())
    }

    fn settle(&mut self, done: Settled) -> Result<(), PipelineError> {
        let n = done.delivery?;
        self.metrics.progress().acknowledged();
        self.metrics
            .sent_to_acked(done.sent_at.elapsed().as_secs_f64());
        match &mut self.mode {
            Mode::ExactlyOnce(t) => t.acknowledged += n as u64,
            Mode::AtLeastOnce => self.metrics.acked(n as u64),
        }
        // A part of a large transaction moves nothing: only its last part has an end.
        if done.complete {
            self.acknowledged.position = done.end;
            self.acknowledged.delivered_through = done.delivered_through;
            self.not_handed_over = true;
            if done.commit_time_ms > 0 {
                self.acknowledged.commit_time_ms = done.commit_time_ms;
            }
        }
        crash_point!("ack.before_checkpoint");
        Ok(())
    }

    fn hand_over_checkpoint(&mut self) {
        if std::mem::take(&mut self.not_handed_over) {
            self.writer.hand_over(self.stamped());
        }
    }

    /// The acknowledged prefix as a checkpoint written now.
    fn stamped(&self) -> Checkpoint {
        Checkpoint {
            written_at_ms: crate::checkpoint::now_ms(),
            ..self.acknowledged.clone()
        }
    }
}

/// Tests fail a stop's last commit (`txn.stop_commit_fails`) the way an unanswered
/// commit marker does.
fn stop_commit_failpoint() -> Result<(), PipelineError> {
    fail::fail_point!("txn.stop_commit_fails", |_| Err(PipelineError::Sink(
        SinkError::MarkerUnproven {
            transactional_id: "(failpoint)".into(),
            topic: "(failpoint)".into(),
            why: "not acknowledged in time",
        }
    )));
    Ok(())
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

#[cfg(test)]
mod tests {
    //! The acknowledgement path against a sink whose acknowledgements the test releases:
    //! the checkpoint only ever names the end of a prefix of acknowledged transactions.

    use super::*;
    use crate::outbox::EventId;
    use crate::position::TableName;
    use crate::route::{EventRef, Record};
    use crate::sink::scripted::{Call, ScriptedSink};

    fn config(extra: &str) -> Config {
        let text = format!(
            "[source]\nuser = \"cdc\"\nserver_id = 7\n[outbox]\ntables = [\"shop.outbox\"]\n\
             [checkpoint]\ndir = \"/unused\"\n[pipeline]\nshutdown_timeout_secs = 5\n{extra}"
        );
        Config::parse(&text, std::path::Path::new("test.toml")).unwrap()
    }

    fn at(offset: u64) -> Position {
        format!("mysql-bin.000001:{offset}").parse().unwrap()
    }

    /// A batch of `records` records ending at `offset` (`complete`: it ends a binlog
    /// transaction), committed on the server just now.
    fn batch(offset: u64, records: usize, complete: bool) -> Batch {
        Batch {
            commit_time_ms: crate::checkpoint::now_ms(),
            ..backlog_batch(offset, records, complete)
        }
    }

    /// The same from a backlog: committed on the server a minute ago.
    fn backlog_batch(offset: u64, records: usize, complete: bool) -> Batch {
        let table = Arc::new(TableName {
            database: "shop".into(),
            table: "outbox".into(),
        });
        Batch {
            end: at(offset),
            delivered_through: None,
            commit_time_ms: crate::checkpoint::now_ms() - 60_000,
            records: (0..records)
                .map(|i| Record {
                    topic: "t".into(),
                    key: b"k".to_vec(),
                    value: Some(b"{}".to_vec()),
                    headers: Vec::new(),
                    timestamp_ms: 0,
                    partition: None,
                    event: EventRef {
                        table: table.clone(),
                        position: format!("mysql-bin.000001:{offset}"),
                        id: EventId(format!("{offset}-{i}").into_bytes()),
                    },
                })
                .collect(),
            invalid: Vec::new(),
            routed_at: Instant::now(),
            complete,
        }
    }

    /// The acker and what the test holds of it.
    struct Harness {
        _dir: tempfile::TempDir,
        store: CheckpointStore,
        metrics: Metrics,
        sink: ScriptedSink,
        config: Config,
    }

    impl Harness {
        fn new(transactional: bool, extra: &str) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let store = CheckpointStore::create(dir.path()).unwrap();
            Self {
                _dir: dir,
                store,
                metrics: Metrics::default(),
                sink: ScriptedSink::new(transactional),
                config: config(extra),
            }
        }

        /// Runs the acker from a checkpoint at offset 4 while `script` feeds it.
        async fn run<F: std::future::Future<Output = ()>>(
            &self,
            script: impl FnOnce(mpsc::Sender<Batch>) -> F,
        ) -> Result<(), PipelineError> {
            let sink = Sink::Scripted(self.sink.clone());
            let acker = Acker::new(
                &self.store,
                &Checkpoint::new(at(4), 0),
                Duration::from_millis(1),
                &self.metrics,
                &sink,
                &self.config,
            );
            let (tx, rx) = mpsc::channel(16);
            let stop = CancellationToken::new();
            let (result, ()) = tokio::join!(acker.run(&sink, rx, &self.config, &stop), script(tx));
            result
        }

        /// The written checkpoint's offset once it is `offset`; fails after a second.
        async fn checkpoint_reaches(&self, offset: u64) {
            for _ in 0..200 {
                if self.written() == Some(offset) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            panic!("checkpoint {:?}, expected {offset}", self.written());
        }

        /// The written checkpoint stays at `offset` (checked after a while).
        async fn checkpoint_stays(&self, offset: Option<u64>) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(self.written(), offset);
        }

        fn written(&self) -> Option<u64> {
            self.metrics.checkpoint().map(|c| c.position.offset)
        }

        async fn sent(&self, n: usize) {
            for _ in 0..200 {
                if self.sink.sent() >= n {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            panic!("{} batch(es) sent, expected {n}", self.sink.sent());
        }
    }

    #[tokio::test]
    async fn the_checkpoint_follows_the_acknowledged_prefix_only() {
        let h = Harness::new(false, "");
        let s = &h;
        let result = h
            .run(|tx| async move {
                for end in [10, 20, 30] {
                    tx.send(batch(end, 2, true)).await.unwrap();
                }
                s.sent(3).await;
                // Later transactions acknowledged first move nothing.
                s.sink.ack(2);
                s.sink.ack(1);
                s.checkpoint_stays(None).await;
                s.sink.ack(0);
                s.checkpoint_reaches(30).await;
                drop(tx);
            })
            .await;
        result.unwrap();
        assert_eq!(h.store.load().unwrap().unwrap().position, at(30));
        assert_eq!(h.metrics.snapshot().events_acked, 6);
    }

    #[tokio::test]
    async fn a_streamed_part_moves_nothing_until_its_transaction_ends() {
        let h = Harness::new(false, "");
        let s = &h;
        let result = h
            .run(|tx| async move {
                tx.send(batch(10, 1, true)).await.unwrap();
                // (A part's end is its transaction's start; a later one shows it is unused.)
                tx.send(batch(40, 3, false)).await.unwrap();
                tx.send(batch(50, 3, true)).await.unwrap();
                s.sent(3).await;
                s.sink.ack(0);
                s.checkpoint_reaches(10).await;
                s.sink.ack(1);
                s.checkpoint_stays(Some(10)).await;
                s.sink.ack(2);
                s.checkpoint_reaches(50).await;
                drop(tx);
            })
            .await;
        result.unwrap();
    }

    #[tokio::test]
    async fn a_failed_delivery_stops_at_the_last_acknowledged_prefix() {
        let h = Harness::new(false, "");
        let s = &h;
        let result = h
            .run(|tx| async move {
                for end in [10, 20, 30] {
                    tx.send(batch(end, 1, true)).await.unwrap();
                }
                s.sent(3).await;
                s.sink.ack(0);
                s.sink.ack(2);
                s.sink.fail(1);
            })
            .await;
        assert!(matches!(result, Err(PipelineError::Sink(_))), "{result:?}");
        // What is behind the failure waits for its re-send; the checkpoint stays before it.
        assert!(h.sink.calls().contains(&Call::Abandon));
        assert_eq!(h.store.load().unwrap().unwrap().position, at(10));
    }

    #[tokio::test]
    async fn exactly_once_commits_whole_binlog_transactions_with_their_checkpoint() {
        let h = Harness::new(true, &exactly_once(2, 60_000, 60_000));
        let s = &h;
        let result = h
            .run(|tx| async move {
                // 1 + 1 records: full, at a boundary → commits. Then a large transaction
                // in parts: full long before its end, but commits only after its last part.
                tx.send(batch(10, 1, true)).await.unwrap();
                tx.send(batch(20, 1, true)).await.unwrap();
                s.sent(2).await;
                s.sink.ack(0);
                s.checkpoint_stays(None).await;
                s.sink.ack(1);
                s.checkpoint_reaches(20).await;
                for part in 0..3 {
                    tx.send(batch(20, 2, false)).await.unwrap();
                    s.sent(3 + part).await;
                    s.sink.ack(2 + part);
                }
                s.checkpoint_stays(Some(20)).await;
                tx.send(batch(90, 1, true)).await.unwrap();
                s.sent(6).await;
                s.sink.ack(5);
                s.checkpoint_reaches(90).await;
                drop(tx);
            })
            .await;
        result.unwrap();
        assert_eq!(
            commits(&h.sink),
            [Some(20), Some(90)],
            "{:?}",
            h.sink.calls()
        );
        // Every send happened inside a transaction the acker had begun.
        let calls = h.sink.calls();
        let begins = calls.iter().filter(|c| **c == Call::Begin).count();
        assert_eq!(begins, 2, "{calls:?}");
        assert_eq!(h.metrics.snapshot().events_acked, 9);
    }

    /// The Kafka transactions' markers (their checkpoints' offsets), in commit order.
    fn commits(sink: &ScriptedSink) -> Vec<Option<u64>> {
        sink.calls()
            .iter()
            .filter_map(|c| match c {
                Call::Commit(marker) => Some(marker.as_ref().map(|m| m.position.offset)),
                _ => None,
            })
            .collect()
    }

    /// Exactly-once settings: transactions of `records` records / `ms` when caught up,
    /// `backlog_ms` while a backlog is read.
    fn exactly_once(records: usize, ms: u64, backlog_ms: u64) -> String {
        format!(
            "[delivery]\nmode = \"exactly-once\"\ntransactional_id = \"t\"\ncheckpoint_topic = \"c\"\n\
             commit_max_records = {records}\ncommit_max_ms = {ms}\ncommit_backlog_ms = {backlog_ms}\n"
        )
    }

    /// Feeds 40 binlog transactions of one record, 10 ms apart, acknowledging each;
    /// returns the Kafka transactions' markers.
    async fn feed_40(h: &Harness, batch: fn(u64, usize, bool) -> Batch) -> Vec<Option<u64>> {
        let result = h
            .run(|tx| async move {
                for i in 0..40 {
                    tx.send(batch(10 * (i + 1), 1, true)).await.unwrap();
                    h.sent(i as usize + 1).await;
                    h.sink.ack(i as usize);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                h.checkpoint_reaches(400).await;
                drop(tx);
            })
            .await;
        result.unwrap();
        commits(&h.sink)
    }

    #[tokio::test]
    async fn exactly_once_keeps_a_transaction_open_while_a_backlog_is_read() {
        // Each binlog transaction fills a Kafka transaction (one record); read from a
        // backlog, they share one until it is as old as a backlog allows (300 ms: 10-20
        // of them at the pace fed).
        let h = Harness::new(true, &exactly_once(1, 50, 300));
        let commits = feed_40(&h, backlog_batch).await;
        assert!((1..=8).contains(&commits.len()), "{commits:?}");
        assert_eq!(commits.last(), Some(&Some(400)));
        // Caught up (committed on the server just now), each commits alone.
        let h = Harness::new(true, &exactly_once(1, 50, 300));
        assert_eq!(feed_40(&h, batch).await.len(), 40);
    }

    #[tokio::test]
    async fn exactly_once_commits_when_the_backlog_reader_goes_quiet() {
        // A backlog's last transactions are as old as the rest; that nothing follows them
        // is what says the reader caught up.
        let h = Harness::new(true, &exactly_once(1, 50, 60_000));
        let s = &h;
        let result = h
            .run(|tx| async move {
                tx.send(backlog_batch(10, 1, true)).await.unwrap();
                tx.send(backlog_batch(20, 1, true)).await.unwrap();
                s.sent(2).await;
                s.sink.ack(0);
                s.sink.ack(1);
                s.checkpoint_reaches(20).await;
                drop(tx);
            })
            .await;
        result.unwrap();
        assert_eq!(commits(&h.sink), [Some(20)], "{:?}", h.sink.calls());
    }
}
