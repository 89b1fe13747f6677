//! Wiring: source → outbox → route in a reader task, sink → acker → checkpoint in the
//! acker loop, joined by a bounded channel; plus the supervisor that restarts after
//! transient errors.
//!
//! Reading never waits for acknowledgements, but the in-flight window
//! (`pipeline.max_in_flight` records) and the channel bound how far it runs ahead, so
//! when Kafka stalls the binlog stays on the server and memory stays flat. Deliveries
//! complete in any order; an ordered queue releases them in commit order, so the
//! checkpoint only ever covers a contiguous prefix of acknowledged transactions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::FuturesOrdered;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::checkpoint::{Checkpoint, CheckpointError, CheckpointStore};
use crate::config::{Config, ResumeBy, SnapshotMode, StartFrom, ValueFormat};
use crate::monitor::{Metrics, RestartReason};
use crate::outbox::{InvalidEvent, Mapper, OnInvalid};
use crate::route::{AvroError, AvroValues, Batch, RegistryError, Router};
use crate::sink::{KafkaSink, Sink, SinkError, StdoutSink};
use crate::source::{self, server, BinlogReader, Position, SourceError};

/// Transactions buffered between the reader and the sink. The in-flight window, not
/// this queue, keeps Kafka busy: 16 is as fast as 128 in `bench/backlog` and holds a
/// tenth of the memory when transactions are large.
const CHANNEL_TRANSACTIONS: usize = 16;

/// Which sink to run with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkKind {
    /// Kafka, the product.
    Kafka,
    /// JSON lines on stdout (dry run).
    Stdout,
    /// Nowhere: acknowledged at once (benchmarks of the read side).
    Null,
}

/// Why the pipeline stopped.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    // Not a `source`: the message already contains it, and error chains would repeat it.
    #[error("{0}\n  the checkpoint stays before this transaction; fix the row's data or the column mapping, then restart")]
    Invalid(InvalidEvent),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Avro(#[from] AvroError),
    #[error("the server is not configured for row-based CDC:\n  {0}")]
    Settings(String),
    #[error("{0}")]
    Config(String),
    #[error("another replica with source.server_id = {server_id} took the binlog stream {times} times within {window_mins} minutes: two routers (or a router and a replica) share the id; give each its own source.server_id and restart")]
    ServerIdConflicts {
        server_id: u32,
        times: usize,
        window_mins: u64,
    },
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<RegistryError> for PipelineError {
    fn from(e: RegistryError) -> Self {
        PipelineError::Avro(AvroError::Registry(e))
    }
}

impl From<InvalidEvent> for PipelineError {
    fn from(e: InvalidEvent) -> Self {
        PipelineError::Invalid(e)
    }
}

impl PipelineError {
    /// True when the needed binlog is gone from the server (exit code 3).
    pub fn is_purged(&self) -> bool {
        matches!(self, PipelineError::Source(SourceError::Purged { .. }))
    }

    /// Why a transient error restarts the pipeline, for `restarts_total{reason}`.
    pub fn restart_reason(&self) -> RestartReason {
        match self {
            PipelineError::Source(SourceError::ServerIdConflict { .. }) => {
                RestartReason::ServerIdConflict
            }
            PipelineError::Sink(SinkError::Unproven { .. }) => RestartReason::UnprovenDelivery,
            PipelineError::Sink(SinkError::CreateTopic { .. }) => RestartReason::Topic,
            PipelineError::Sink(_) => RestartReason::Delivery,
            PipelineError::Avro(_) => RestartReason::Registry,
            _ => RestartReason::Source,
        }
    }

    /// True when restarting from the checkpoint may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            PipelineError::Source(e) => e.is_transient(),
            PipelineError::Sink(e) => e.is_transient(),
            PipelineError::Avro(AvroError::Registry(e)) => e.is_transient(),
            _ => false,
        }
    }
}

/// Runs until `shutdown` fires (Ok) or a non-transient error (Err), restarting from the
/// durable checkpoint with backoff after transient ones.
pub async fn run(
    config: &Config,
    sink_kind: SinkKind,
    shutdown: CancellationToken,
    metrics: Metrics,
) -> Result<(), PipelineError> {
    // A dry run starts where the real checkpoint is but never writes it: the next real
    // run must not skip what was only printed.
    let (store, scratch) = match sink_kind {
        SinkKind::Kafka => (CheckpointStore::open(&config.checkpoint.dir)?, None),
        SinkKind::Stdout | SinkKind::Null => {
            let (store, dir) = CheckpointStore::scratch_copy_of(&config.checkpoint.dir)?;
            info!(real = %config.checkpoint.dir.display(), scratch = %dir.display(), "dry run: checkpoints go to a scratch store, the real one is left as it is");
            (store, Some(dir))
        }
    };
    if let Some(cp) = store.load()? {
        metrics.set_checkpoint(&cp);
    }
    metrics.set_ready_max_stall(Duration::from_secs(config.monitor.ready_max_stall_secs));
    if config.outbox.on_invalid == OnInvalid::DeadLetter {
        metrics.expect_dead_letters(&config.outbox.dead_letter_topic);
    }
    // Not a child of `shutdown`: the endpoints answer until the pipeline has drained.
    let monitor_stop = CancellationToken::new();
    if let Some(addr) = config.monitor.listen_addr() {
        crate::monitor::serve(addr, metrics.clone(), monitor_stop.clone())
            .await
            .map_err(|e| {
                PipelineError::Config(format!("cannot listen on monitor.listen {addr}: {e}"))
            })?;
    }
    let watcher = crate::monitor::watch(config, metrics.clone(), monitor_stop.clone());
    let ctx = Ctx {
        config,
        store: &store,
        sink_kind,
        shutdown: &shutdown,
        metrics: &metrics,
    };
    let supervised = supervise(&ctx);
    let result = tokio::select! {
        r = supervised => r,
        _ = watcher => Err(PipelineError::Internal("monitor stopped unexpectedly".into())),
    };
    monitor_stop.cancel();
    if let Some(dir) = scratch {
        drop(store);
        let _ = std::fs::remove_dir_all(dir);
    }
    result
}

/// What every run of the pipeline shares.
struct Ctx<'a> {
    config: &'a Config,
    store: &'a CheckpointStore,
    sink_kind: SinkKind,
    shutdown: &'a CancellationToken,
    metrics: &'a Metrics,
}

/// Restarts `run_once` after transient errors, with backoff.
async fn supervise(ctx: &Ctx<'_>) -> Result<(), PipelineError> {
    let Ctx {
        shutdown, metrics, ..
    } = *ctx;
    let mut delay = Duration::from_millis(500);
    let mut conflicts = ConflictWindow::default();
    loop {
        let started = Instant::now();
        let result = run_once(ctx).await;
        metrics.set_connected(false);
        metrics.progress().restarted();
        let snapshot = metrics.snapshot();
        match result {
            Ok(()) => {
                info!(?snapshot, "stopped");
                return Ok(());
            }
            Err(e) if e.is_transient() && !shutdown.is_cancelled() => {
                if started.elapsed() > Duration::from_secs(60) {
                    delay = Duration::from_millis(500);
                }
                let reason = e.restart_reason();
                if reason == RestartReason::ServerIdConflict {
                    metrics.server_id_conflict();
                    let times = conflicts.record();
                    let max = ctx.config.source.server_id_conflicts_max.max(1) as usize;
                    let server_id = ctx.config.source.server_id;
                    if times >= max {
                        error!(?snapshot, server_id, times, "stopped: the binlog stream keeps being taken by another replica with this server id");
                        return Err(PipelineError::ServerIdConflicts {
                            server_id,
                            times,
                            window_mins: CONFLICT_WINDOW.as_secs() / 60,
                        });
                    }
                    warn!(error = %e, server_id, times, stop_at = max, "another replica with this source.server_id is connected to the server (a second router or a copied config?); give each its own server_id");
                }
                metrics.restart(reason);
                warn!(error = %e, reason = reason.as_str(), retry_in_ms = delay.as_millis() as u64, "pipeline stopped by a transient error; resuming from the last checkpoint");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shutdown.cancelled() => return Ok(()),
                }
                delay = (delay * 2).min(Duration::from_secs(30));
            }
            Err(e) => {
                error!(?snapshot, "stopped by an error");
                return Err(with_oldest_binlog(ctx.config, e).await);
            }
        }
    }
}

/// How far back server-id conflicts count towards `source.server_id_conflicts_max`.
const CONFLICT_WINDOW: Duration = Duration::from_secs(600);

/// Recent times another replica with our server id took the stream.
#[derive(Default)]
struct ConflictWindow(std::collections::VecDeque<Instant>);

impl ConflictWindow {
    /// Records one now; returns how many fall in the window.
    fn record(&mut self) -> usize {
        let now = Instant::now();
        self.0.push_back(now);
        while self
            .0
            .front()
            .is_some_and(|t| now.duration_since(*t) > CONFLICT_WINDOW)
        {
            self.0.pop_front();
        }
        self.0.len()
    }
}

/// A purge found through the stream (by GTID) does not know the oldest file yet: ask.
async fn with_oldest_binlog(config: &Config, e: PipelineError) -> PipelineError {
    let PipelineError::Source(SourceError::Purged { needed, oldest }) = e else {
        return e;
    };
    let oldest = match source::connect(&config.source).await {
        Ok(mut conn) => match server::binary_logs(&mut conn).await {
            Ok(logs) => logs.first().map(|l| l.file.to_string()).unwrap_or(oldest),
            Err(_) => oldest,
        },
        Err(_) => oldest,
    };
    PipelineError::Source(SourceError::Purged { needed, oldest })
}

/// Where to start: the checkpoint, else the initial snapshot or `source.start` (stored
/// at once, so a crash before the first delivery cannot move a `latest` start past
/// committed events).
async fn start_position(
    config: &Config,
    store: &CheckpointStore,
    conn: &mut mysql_async::Conn,
    flavor: server::Flavor,
    sink: &Sink,
) -> Result<Checkpoint, PipelineError> {
    if let Some(cp) = store.load()? {
        return Ok(cp);
    }
    if config.source.start != StartFrom::Earliest || config.source.snapshot != SnapshotMode::Never {
        let prepared = server::prepared_xa(conn).await?;
        if prepared > 0 {
            return Err(PipelineError::Config(format!(
                "{prepared} XA transaction(s) are prepared on the server (XA RECOVER) and not yet committed: their rows are logged at PREPARE, before this first start's position, and would never be published when they commit.\n  Commit or roll them back first, or start earlier (source.start = \"FILE:OFFSET\" before their PREPARE)"
            )));
        }
    }
    // The server's clock just before the position is taken: every transaction after the
    // position commits later, and its file is written (rotated) later, so lag and
    // retention runway computed from it are never understated. A given or earliest
    // position has no known time (0) until its first transaction is acknowledged.
    let taken_at = server::now_ms(conn).await?;
    let (position, commit_time_ms) = match (&config.source.snapshot, &config.source.start) {
        (SnapshotMode::Initial, _) => (
            crate::recover::initial_snapshot(config, sink).await?,
            taken_at,
        ),
        (SnapshotMode::Never, StartFrom::Latest) => {
            (server::current_position(conn, flavor).await?, taken_at)
        }
        (SnapshotMode::Never, StartFrom::Earliest) => (server::earliest_position(conn).await?, 0),
        (SnapshotMode::Never, StartFrom::At(p)) => (p.clone(), 0),
    };
    let checkpoint = Checkpoint::new(position.clone(), commit_time_ms);
    store.save(&checkpoint)?;
    info!(%position, start = ?config.source.start, snapshot = ?config.source.snapshot, "no checkpoint yet: starting here and recorded it");
    Ok(checkpoint)
}

async fn run_once(ctx: &Ctx<'_>) -> Result<(), PipelineError> {
    let Ctx {
        config,
        store,
        sink_kind,
        shutdown,
        metrics,
    } = *ctx;
    let mut conn = source::connect(&config.source).await?;
    let flavor = server::flavor(&mut conn).await?;
    let problems = server::settings_problems(&mut conn).await?;
    if !problems.is_empty() {
        let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Err(PipelineError::Settings(text.join("\n  ")));
    }
    let tables = config.table_patterns();
    check_outbox_tables(&mut conn, &tables, metrics).await?;
    let sink = match sink_kind {
        SinkKind::Kafka => Sink::Kafka(KafkaSink::new(&config.kafka, metrics)?),
        SinkKind::Stdout => Sink::Stdout(StdoutSink),
        SinkKind::Null => Sink::Null,
    };
    let start = start_position(config, store, &mut conn, flavor, &sink).await?;
    metrics.set_checkpoint(&start);
    let start_commit_ms = start.commit_time_ms;
    let start = start.position;
    let by_gtid = match config.source.resume_by {
        ResumeBy::Position => false,
        ResumeBy::Auto => {
            !start.gtid.is_empty() && {
                // A MariaDB domain the checkpoint never saw would be replayed from the
                // server's oldest binlog: only resume by GTID when every domain is covered.
                let server_gtid = server::current_position(&mut conn, flavor).await?.gtid;
                start.gtid.covers_domains_of(&server_gtid)
            }
        }
        ResumeBy::Gtid if start.gtid.is_empty() => {
            return Err(PipelineError::Config(format!(
                "source.resume_by = \"gtid\" but checkpoint {start} has no GTID state"
            )))
        }
        ResumeBy::Gtid => true,
    };
    if !by_gtid {
        // By GTID the server itself says (error 1236) when the history is gone; file
        // names only mean something on the server that wrote them.
        server::ensure_available(&mut conn, &start).await?;
    }
    let reader = BinlogReader::start(
        conn,
        flavor,
        config.source.server_id,
        start.clone(),
        by_gtid,
        &tables,
        config.source.heartbeat(),
    )
    .await?;
    metrics.set_connected(true);
    info!(position = %start, by_gtid, tables = ?config.outbox.tables, "streaming binlog");

    let (mapper, router) = mapper_and_router(config, metrics).await?;
    let (tx, rx) = mpsc::channel(CHANNEL_TRANSACTIONS);
    let stop_reading = shutdown.child_token();
    let reader_task = tokio::spawn(read_loop(
        InvalidPolicy::of(config),
        reader,
        mapper,
        router,
        tx,
        stop_reading.clone(),
        metrics.clone(),
    ));

    let acker = Acker::new(
        store,
        (start, start_commit_ms),
        Duration::from_millis(config.checkpoint.flush_interval_ms),
        metrics,
    );
    let acked = acker.run(&sink, rx, config, &stop_reading).await;
    stop_reading.cancel();
    let read = reader_task
        .await
        .map_err(|e| PipelineError::Internal(format!("reader task failed: {e}")))?;
    // A delivery failure explains a reader stop, not the other way round.
    acked?;
    read
}

/// Every exact outbox table name must exist as written (a typo would make its INSERTs
/// unrelated traffic, and the checkpoint would move past them); a pattern matching
/// nothing yet is a warning (tables created later are picked up at their first row).
async fn check_outbox_tables(
    conn: &mut mysql_async::Conn,
    tables: &[crate::pattern::Pattern],
    metrics: &Metrics,
) -> Result<(), PipelineError> {
    let found = server::outbox_tables(conn, tables).await?;
    if !found.hidden_by_filters.is_empty() {
        return Err(PipelineError::Settings(format!(
            "outbox changes never reach the binlog: {}; remove the filter from the server's configuration (binlog_do_db / binlog_ignore_db) and restart it",
            found.hidden_by_filters.join("; ")
        )));
    }
    metrics.set_unmatched_patterns(found.unmatched_patterns.len());
    for pattern in &found.unmatched_patterns {
        warn!(%pattern, "outbox.tables pattern matches no table yet; its tables are picked up when they appear");
    }
    if found.missing.is_empty() {
        return Ok(());
    }
    let text: Vec<String> = found
        .missing
        .iter()
        .map(|(name, like)| {
            let hint = if like.is_empty() {
                "no table of that database exists".to_string()
            } else {
                format!("tables there: {}", like.join(", "))
            };
            format!("{name} ({hint})")
        })
        .collect();
    Err(PipelineError::Config(format!(
        "outbox table(s) not on the server: {}.\n  Names are case-sensitive and must exist before the router starts; fix outbox.tables (or use a pattern such as \"tenant_*.outbox\" for tables created later)",
        text.join("; ")
    )))
}

/// The outbox and route stages, as configured (schemas loaded and, with a registry,
/// registered).
pub(crate) async fn mapper_and_router(
    config: &Config,
    metrics: &Metrics,
) -> Result<(Mapper, Router), PipelineError> {
    let rules = std::sync::Arc::new(config.rules().map_err(PipelineError::Config)?);
    let avro = match config.value.format {
        ValueFormat::Json => None,
        ValueFormat::Avro if rules.has_envelope() => {
            return Err(PipelineError::Config(
                "value.format = \"avro\" encodes the payload alone; it cannot be combined with envelope placements (table.fields.additional.placement …:envelope)".into(),
            ))
        }
        ValueFormat::Avro => Some(std::sync::Arc::new(AvroValues::load(&config.value).await?)),
    };
    let mapper = Mapper::new(rules.clone(), metrics.clone());
    let router =
        Router::new(rules, &config.route, config.kafka.max_message_bytes()).with_avro(avro);
    Ok((mapper, router))
}

/// Source → outbox → route, one committed transaction at a time.
async fn read_loop(
    policy: InvalidPolicy,
    mut reader: BinlogReader,
    mapper: Mapper,
    router: Router,
    tx: mpsc::Sender<Batch>,
    stop: CancellationToken,
    metrics: Metrics,
) -> Result<(), PipelineError> {
    loop {
        let txn = tokio::select! {
            biased;
            _ = stop.cancelled() => return Ok(()),
            txn = reader.next_transaction() => txn?,
        };
        let mut batch = router.route(mapper.map(txn)?)?;
        if !batch.invalid.is_empty() {
            policy.apply(&router, &metrics, &mut batch)?;
        }
        metrics.read(&batch.end, batch.commit_time_ms, batch.records.len());
        crash_point!("read.before_send");
        let permit = match tx.try_reserve() {
            Ok(permit) => permit,
            Err(mpsc::error::TrySendError::Full(())) => {
                let blocked = Instant::now();
                let permit = tx.reserve().await;
                metrics.reader_blocked(blocked.elapsed().as_secs_f64());
                match permit {
                    Ok(permit) => permit,
                    Err(_) => return Ok(()), // the acker stopped; it says why
                }
            }
            Err(mpsc::error::TrySendError::Closed(())) => return Ok(()),
        };
        permit.send(batch);
    }
}

/// What to do with rows that cannot be records (`outbox.on_invalid`).
#[derive(Debug, Clone)]
pub(crate) struct InvalidPolicy {
    on_invalid: OnInvalid,
    dead_letter_topic: String,
}

impl InvalidPolicy {
    pub(crate) fn of(config: &Config) -> Self {
        Self {
            on_invalid: config.outbox.on_invalid,
            dead_letter_topic: config.outbox.dead_letter_topic.clone(),
        }
    }

    /// Fails on the first invalid row, or dead-letters / skips each one, logged with
    /// table, position, event id and reason, and counted.
    pub(crate) fn apply(
        &self,
        router: &Router,
        metrics: &Metrics,
        batch: &mut Batch,
    ) -> Result<(), PipelineError> {
        let policy = self.on_invalid.as_str();
        for bad in std::mem::take(&mut batch.invalid) {
            metrics.invalid(policy);
            match self.on_invalid {
                OnInvalid::Fail => return Err(PipelineError::Invalid(bad)),
                OnInvalid::DeadLetter => {
                    warn!(error = %bad, topic = %self.dead_letter_topic, policy, "invalid outbox row sent to the dead-letter topic");
                    metrics.dead_letter(&self.dead_letter_topic);
                    batch.records.push(router.dead_letter(
                        &self.dead_letter_topic,
                        &bad,
                        batch.commit_time_ms,
                    ));
                }
                OnInvalid::Skip => warn!(error = %bad, policy, "invalid outbox row skipped"),
            }
        }
        Ok(())
    }
}

/// Tracks acknowledged transactions and hands the watermark to the checkpoint writer.
struct Acker<'a> {
    metrics: &'a Metrics,
    /// End of the last transaction whose records, and all earlier ones, are acknowledged.
    watermark: Position,
    watermark_commit_ms: i64,
    /// The watermark moved since it was last handed to the writer.
    unpublished: bool,
    writer: CheckpointWriter,
}

/// End position, commit time, records, when they were handed over, the delivery.
type Completed = (Position, i64, usize, Instant, Result<usize, SinkError>);

impl<'a> Acker<'a> {
    fn new(
        store: &CheckpointStore,
        (start, start_commit_ms): (Position, i64),
        interval: Duration,
        metrics: &'a Metrics,
    ) -> Self {
        Self {
            metrics,
            watermark: start,
            watermark_commit_ms: start_commit_ms,
            unpublished: false,
            writer: CheckpointWriter::start(store.clone(), interval, metrics.clone()),
        }
    }

    /// Sends batches and advances the watermark until the channel closes or a delivery
    /// fails; then drains what is in flight (bounded) and writes the final checkpoint.
    async fn run(
        mut self,
        sink: &Sink,
        mut rx: mpsc::Receiver<Batch>,
        config: &Config,
        stop_reading: &CancellationToken,
    ) -> Result<(), PipelineError> {
        let max_in_flight = config.pipeline.max_in_flight;
        let mut in_flight: FuturesOrdered<futures::future::BoxFuture<'static, Completed>> =
            FuturesOrdered::new();
        let mut in_flight_records = 0usize;
        let mut tick = tokio::time::interval(Duration::from_millis(200));
        let mut failure: Option<PipelineError> = None;
        loop {
            tokio::select! {
                biased;
                Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                    in_flight_records -= done.2;
                    if let Err(e) = self.complete(done) {
                        failure = Some(e);
                        break;
                    }
                }
                batch = rx.recv(), if in_flight_records < max_in_flight => {
                    let Some(batch) = batch else { break };
                    let n = batch.records.len();
                    let (end, commit, routed_at) = (batch.end, batch.commit_time_ms, batch.routed_at);
                    let records_topics = topics_of(&batch.records);
                    let delivery = match sink.send(batch.records).await {
                        Ok(d) => d,
                        Err(e) => { failure = Some(e.into()); break; }
                    };
                    crash_point!("sink.after_send_before_ack");
                    let sent_at = Instant::now();
                    self.metrics.routed_to_sent((sent_at - routed_at).as_secs_f64());
                    count_routed(self.metrics, &records_topics);
                    in_flight_records += n;
                    in_flight.push_back(Box::pin(async move { (end, commit, n, sent_at, delivery.await) }));
                }
                _ = tick.tick() => {
                    // A failed checkpoint write stops the pipeline; its error is reported below.
                    if self.writer.has_stopped() {
                        break;
                    }
                }
            }
            self.publish();
        }
        // Stop reading first, then wait for what Kafka already has, so a restart does
        // not race the old producer's last deliveries.
        stop_reading.cancel();
        drop(rx);
        let deadline = Duration::from_secs(config.pipeline.shutdown_timeout_secs);
        let drained = tokio::time::timeout(deadline, async {
            while let Some(done) = in_flight.next().await {
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
                records = in_flight_records,
                deadline_secs = deadline.as_secs(),
                "records still unacknowledged at the deadline; they will be sent again after restart"
            );
        }
        self.publish();
        let written = self.writer.finish().await;
        match (failure, written) {
            (Some(e), _) | (None, Err(e)) => Err(e),
            (None, Ok(())) => Ok(()),
        }
    }

    fn complete(
        &mut self,
        (end, commit_ms, _, sent_at, result): Completed,
    ) -> Result<(), PipelineError> {
        let n = result?;
        self.metrics.progress().acknowledged();
        self.metrics.sent_to_acked(sent_at.elapsed().as_secs_f64());
        self.metrics.acked(n as u64);
        self.watermark = end;
        self.unpublished = true;
        if commit_ms > 0 {
            self.watermark_commit_ms = commit_ms;
        }
        crash_point!("ack.before_checkpoint");
        Ok(())
    }

    fn publish(&mut self) {
        if std::mem::take(&mut self.unpublished) {
            self.writer.publish(Checkpoint::new(
                self.watermark.clone(),
                self.watermark_commit_ms,
            ));
        }
    }
}

/// A checkpoint writer task (or its blocking write) panicked or was cancelled.
fn writer_failed(e: tokio::task::JoinError) -> PipelineError {
    PipelineError::Internal(format!("checkpoint writer failed: {e}"))
}

/// Stores the newest acknowledged watermark at most once per interval, on a blocking
/// thread: sled's flush waits for the disk, and the acker must keep sending meanwhile
/// (checkpoint writes inside the acker put 20 ms stalls into the latency tail).
struct CheckpointWriter {
    tx: tokio::sync::watch::Sender<Option<Checkpoint>>,
    task: tokio::task::JoinHandle<Result<(), PipelineError>>,
}

impl CheckpointWriter {
    fn start(store: CheckpointStore, interval: Duration, metrics: Metrics) -> Self {
        let (tx, mut rx) = tokio::sync::watch::channel::<Option<Checkpoint>>(None);
        let task = tokio::spawn(async move {
            loop {
                // Err once the acker is done; the newest value is still saved below.
                let closed = rx.changed().await.is_err();
                let newest = rx.borrow_and_update().clone();
                if let Some(cp) = newest {
                    let s = store.clone();
                    let saved = cp.clone();
                    tokio::task::spawn_blocking(move || s.save(&saved))
                        .await
                        .map_err(writer_failed)??;
                    metrics.checkpoint_written(&cp);
                }
                if closed {
                    return Ok(());
                }
                tokio::time::sleep(interval).await;
            }
        });
        Self { tx, task }
    }

    /// Hands over a newer watermark; only the newest one waiting is written.
    fn publish(&self, checkpoint: Checkpoint) {
        self.tx.send_replace(Some(checkpoint));
    }

    /// True when the writer ended early (a failed write).
    fn has_stopped(&self) -> bool {
        self.task.is_finished()
    }

    /// Writes what was published last and waits for it to be on disk.
    async fn finish(self) -> Result<(), PipelineError> {
        drop(self.tx);
        self.task.await.map_err(writer_failed)?
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
