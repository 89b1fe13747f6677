//! One pipeline run and its supervisor: connect, check the server, open the sink, find
//! the start position, stream through read → sink → acknowledgements → checkpoint;
//! after a transient error, again from the durable checkpoint with backoff.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::read::{self, ReadStages};
use super::refusals::{Noted, Refusals};
use super::release::{At, Releases};
use super::InvalidPolicy;
use super::{ack, preflight, resume, PipelineError};
use crate::checkpoint::CheckpointStore;
use crate::config::Config;
use crate::monitor::traces::{span_id_field, trace_id_field, LogIds};
use crate::monitor::{Metrics, RestartReason};
use crate::outbox::OnInvalid;
use crate::route::parking::Parking;
use crate::sink::{NullSink, Sink, StdoutSink};
use crate::source::{self, server, SourceError};

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

/// What every run of the pipeline shares.
#[derive(Clone, Copy)]
pub(super) struct Ctx<'a> {
    pub(super) config: &'a Config,
    pub(super) store: &'a CheckpointStore,
    pub(super) sink_kind: SinkKind,
    pub(super) shutdown: &'a CancellationToken,
    pub(super) metrics: &'a Metrics,
    /// `[ha]`: the lock this instance must hold to stream.
    pub(super) lock: Option<&'a crate::ha::Lease>,
    /// Told `true` once a run's start position is fixed and its stream open, `false`
    /// when the run ends: what a standby's takeover waits for before it calls itself
    /// leader (metrics are written for the operator, never read for a decision).
    pub(super) streaming: Option<&'a tokio::sync::watch::Sender<bool>>,
    /// An operator's pause of this source, as the fleet's control topic says it.
    pub(super) pauses: Option<&'a super::pause::Pauses>,
    /// Replays asked of this source's leader on the control topic.
    pub(super) replays: Option<&'a super::replays::Replays>,
}

/// Leads: restarts `run_once` after transient errors, with backoff, and carries out the
/// replays asked of the leader meanwhile (paused or not: a replay reads the tables).
pub(super) async fn supervise(ctx: &Ctx<'_>) -> Result<(), PipelineError> {
    match ctx.replays {
        None => supervise_runs(ctx).await,
        Some(replays) => tokio::select! {
            result = supervise_runs(ctx) => result,
            never = replays.carry_out(ctx.config, ctx.shutdown) => match never {},
        },
    }
}

/// Restarts `run_once` after transient errors, with backoff.
async fn supervise_runs(ctx: &Ctx<'_>) -> Result<(), PipelineError> {
    let Ctx {
        shutdown, metrics, ..
    } = *ctx;
    let mut delay = Duration::from_millis(500);
    let mut conflicts = ConflictWindow::default();
    let refusals = Refusals::default();
    loop {
        if let Some(lock) = ctx.lock {
            // A restart must not fence a leader that took over while we were failing.
            if let Err(why) = lock.confirm().await {
                warn!(reason = %why, "not restarting: the lock is no longer ours");
                return Ok(());
            }
        }
        // An operator's pause, as the fleet knows it, before anything streams.
        let run_stop = shutdown.child_token();
        let pause_watch = match ctx.pauses {
            None => None,
            Some(pauses) => match pauses.in_force(shutdown).await? {
                None => return Ok(()),
                Some(Some(pause)) => {
                    metrics.set_paused(Some(pause.describe()));
                    info!(by = %pause.by, reason = %pause.reason, at = %pause.at, "paused by an operator: not streaming until resumed; the position stays at the last checkpoint");
                    pauses.until_resumed(shutdown).await;
                    metrics.set_paused(None);
                    if !shutdown.is_cancelled() {
                        info!("resumed by an operator: streaming from the last checkpoint");
                    }
                    continue;
                }
                Some(None) => {
                    let (pauses, run_stop) = (pauses.clone(), run_stop.clone());
                    Some(tokio::spawn(async move {
                        if let Some(pause) = pauses.until_paused().await {
                            info!(by = %pause.by, reason = %pause.reason, "paused by an operator: draining, then stopping the stream at the last acknowledged transaction");
                            run_stop.cancel();
                        }
                    }))
                }
            },
        };
        let started = Instant::now();
        let run_ctx = Ctx {
            shutdown: &run_stop,
            ..*ctx
        };
        let result = run_once(&run_ctx, &refusals).await;
        if let Some(watch) = pause_watch {
            watch.abort();
        }
        metrics.set_connected(false);
        if let Some(streaming) = ctx.streaming {
            streaming.send_replace(false);
        }
        metrics.progress().restarted();
        let snapshot = metrics.snapshot();
        match result {
            // Paused: drained and checkpointed; the loop's top waits for the resume.
            Ok(()) if run_stop.is_cancelled() && !shutdown.is_cancelled() => {}
            Ok(()) => {
                info!(?snapshot, "stopped");
                return Ok(());
            }
            Err(e) if !shutdown.is_cancelled() && parks_refusal(ctx.config, &refusals, &e) => {
                metrics.restart(RestartReason::Delivery);
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
                let trace = trace_of(&e);
                warn!(error = %e, reason = reason.as_str(), retry_in_ms = delay.as_millis() as u64, trace_id = trace_id_field(trace), span_id = span_id_field(trace), "pipeline stopped by a transient error; resuming from the last checkpoint");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = shutdown.cancelled() => return Ok(()),
                }
                delay = (delay * 2).min(Duration::from_secs(30));
            }
            Err(e) if e.is_transient() => {
                // Asked to stop (or the lock was lost) and the stop's last step met what a
                // restart would retry: nothing is lost, the next start reads it again.
                warn!(error = %e, ?snapshot, "stopped; the stop's last step failed, so a start resumes from the last durable checkpoint and what was not acknowledged or committed is read again");
                return Ok(());
            }
            Err(e) => {
                let trace = trace_of(&e);
                error!(
                    ?snapshot,
                    trace_id = trace_id_field(trace),
                    span_id = span_id_field(trace),
                    "stopped by an error"
                );
                return Err(with_what_is_purged(ctx.config, e).await);
            }
        }
    }
}

/// With parking, whether `e` is Kafka refusing one outbox event's record for good,
/// noted for the next run to park (or to refuse the release it belonged to).
fn parks_refusal(config: &Config, refusals: &Refusals, e: &PipelineError) -> bool {
    if config.outbox.on_invalid != OnInvalid::Park {
        return false;
    }
    let PipelineError::Sink(sink_error) = e else {
        return false;
    };
    let Some(refusal) = sink_error.refusal() else {
        return false;
    };
    // The parking topic refusing its own records cannot be parked around.
    if *refusal.topic == *config.outbox.parking.topic {
        return false;
    }
    let (event, topic) = (refusal.event_id.clone(), refusal.topic.clone());
    let trace = trace_of(e);
    match refusals.note(refusal) {
        Noted::Parks => {
            warn!(error = %e, %event, %topic, trace_id = trace_id_field(trace), span_id = span_id_field(trace), "Kafka refused an outbox event's record for good: resuming from the last checkpoint with its aggregate parked from that event on");
            true
        }
        Noted::RefusesRelease => {
            warn!(error = %e, %event, %topic, trace_id = trace_id_field(trace), span_id = span_id_field(trace), "Kafka refused a released record: resuming from the last checkpoint, the release is answered as refused and the aggregate stays parked");
            true
        }
        Noted::Again => false,
    }
}

/// The trace of the event whose record `e` is about, when it went out with one.
fn trace_of(e: &PipelineError) -> Option<LogIds> {
    match e {
        PipelineError::Sink(sink) => sink.event().and_then(|event| event.trace),
        _ => None,
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

/// With `on_invalid = "park"`, the fleet's parked aggregates: the parking topic made
/// sure of (one partition, kept forever) and read to its end, and the offset requests
/// are watched for from. A dry run parks in a set of its own, starting empty: it
/// writes nothing the fleet reads, and carries out no request.
async fn parked_set(
    config: &Config,
    sink_kind: SinkKind,
    metrics: &crate::monitor::Metrics,
) -> Result<Option<(Parking, Option<i64>)>, PipelineError> {
    if config.outbox.on_invalid != OnInvalid::Park {
        return Ok(None);
    }
    let parking = &config.outbox.parking;
    if sink_kind != SinkKind::Kafka {
        warn!(topic = %parking.topic, "dry run: parking starts from an empty set, not the parking topic's");
        return Ok(Some((Parking::empty(parking), None)));
    }
    let read = Instant::now();
    let (kafka, cfg) = (config.kafka.clone(), parking.clone());
    let (set, watch_from) = tokio::task::spawn_blocking(move || {
        crate::kafka::TopicCreator::new(&kafka)
            .and_then(|c| c.ensure_kept_forever(&cfg.topic, "parking"))
            .map_err(|e| PipelineError::Sink(e.into()))?;
        crate::route::parking::load(&kafka, &cfg).map_err(PipelineError::from)
    })
    .await
    .map_err(|e| PipelineError::TaskFailed {
        task: "parking",
        reason: e.to_string(),
    })??;
    metrics.set_parked(set.aggregates(), set.events(), set.oldest_ms());
    info!(topic = %parking.topic, aggregates = set.aggregates(), events = set.events(), read_ms = read.elapsed().as_millis() as u64, "parked aggregates read back from the parking topic: their events keep going there, in order");
    Ok(Some((set, Some(watch_from))))
}

/// Operators' parking requests for this run: those the last leader left open, then
/// every new one as the parking topic's watcher sees it arrive.
fn releases(
    config: &Config,
    set: &Parking,
    watch_from: i64,
    stop_reading: &CancellationToken,
    refusals: &Refusals,
) -> Result<Releases, PipelineError> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for request in set.pending() {
        info!(request = %request.id, action = ?request.action, by = %request.by, "a parking request not carried out before: carried out now");
        let _ = tx.send(request);
    }
    let watching = stop_reading.child_token();
    crate::route::parking::watch(
        &config.kafka,
        &config.outbox.parking.topic,
        watch_from,
        tx,
        watching.clone(),
    );
    Ok(Releases {
        requests: rx,
        kafka: config.kafka.clone(),
        source: config.source.clone(),
        event_id_column: config.rules().map_err(PipelineError::Rules)?.event_id,
        exactly_once: config.delivery.exactly_once(),
        refusals: refusals.clone(),
        _watching: watching.drop_guard(),
    })
}

/// A purge found through the stream does not know what is gone yet: ask.
async fn with_what_is_purged(config: &Config, e: PipelineError) -> PipelineError {
    let PipelineError::Source(SourceError::Purged { needed, missing }) = e else {
        return e;
    };
    let missing = match source::connect(&config.source).await {
        Ok(mut conn) => server::what_is_purged(&mut conn, &needed)
            .await
            .unwrap_or(missing),
        Err(_) => missing,
    };
    PipelineError::Source(SourceError::Purged { needed, missing })
}

async fn run_once(ctx: &Ctx<'_>, refusals: &Refusals) -> Result<(), PipelineError> {
    let Ctx {
        config,
        store,
        sink_kind,
        shutdown,
        metrics,
        ..
    } = *ctx;
    let phases = std::time::Instant::now();
    let mut conn = source::connect(&config.source).await?;
    let connected = phases.elapsed();
    let flavor = server::flavor(&mut conn).await?;
    preflight::measure_server_clock(&mut conn, metrics).await?;
    let problems = server::settings_problems(&mut conn).await?;
    if !problems.is_empty() {
        return Err(PipelineError::ServerSettings {
            problems: problems.iter().map(ToString::to_string).collect(),
        });
    }
    let tables = config.table_patterns();
    preflight::check_outbox_tables(&mut conn, &tables, metrics).await?;
    let checked = phases.elapsed();
    // One claim check (one S3 client) for the stage ahead of the sink and the sink.
    let check_in = match (&config.claim_check, sink_kind) {
        (Some(cfg), SinkKind::Kafka) => Some(crate::sink::CheckIn::new(cfg, metrics)?),
        _ => None,
    };
    let sink: Box<dyn Sink> = match sink_kind {
        SinkKind::Kafka => {
            crate::sink::kafka_sink(&config.kafka, &config.delivery, check_in.clone(), metrics)?
        }
        SinkKind::Stdout => Box::new(StdoutSink),
        SinkKind::Null => Box::new(NullSink),
    };
    let sink = sink.as_ref();
    let sink_ready = phases.elapsed();
    let checkpoint = resume::start_position(config, store, &mut conn, flavor, sink).await?;
    // After the start position (and, exactly-once, the fence): the parked set read now
    // covers every position this run may resume from.
    let mut parking = parked_set(config, sink_kind, metrics).await?;
    if let Some((set, _)) = parking.as_mut() {
        for refusal in refusals.to_park() {
            set.refuse(refusal);
        }
    }
    let positioned = phases.elapsed();
    metrics.set_checkpoint(&checkpoint);
    let resume = source::ResumeAt {
        position: &checkpoint.position,
        server_id: checkpoint.server_id,
        delivered_through: checkpoint.delivered_through.clone(),
    };
    let Some(stream) =
        source::open_stream(&config.source, conn, flavor, resume, &tables, shutdown).await?
    else {
        return Ok(());
    };
    let source::Stream {
        reader,
        server_id,
        by_gtid,
    } = stream;
    // Every checkpoint from here on points into this server's binlog.
    let checkpoint = checkpoint.on_server(server_id);
    let start = &checkpoint.position;
    metrics.set_connected(true);
    if let Some(streaming) = ctx.streaming {
        streaming.send_replace(true);
    }
    tracing::debug!(
        connect_ms = connected.as_millis() as u64,
        server_checks_ms = checked.as_millis() as u64,
        sink_ms = sink_ready.as_millis() as u64,
        position_ms = positioned.as_millis() as u64,
        stream_ms = phases.elapsed().as_millis() as u64,
        "start phases (ms since the pipeline's start)"
    );
    info!(position = %start, delivered_through = ?checkpoint.delivered_through.as_ref().map(ToString::to_string), by_gtid, tables = ?config.outbox.tables, "streaming binlog");

    let (mapper, router) = read::stages(config).await?;
    let budget = check_in.as_ref().map(|c| c.budget().clone());
    let (tx, rx) = mpsc::channel(CHANNEL_TRANSACTIONS);
    // The claim check writes values a few transactions ahead of the sink.
    let (rx, check_in_task) = match check_in {
        Some(check_in) => {
            let (checked_tx, checked_rx) = mpsc::channel(CHANNEL_TRANSACTIONS);
            (
                checked_rx,
                Some(tokio::spawn(check_in.ahead(rx, checked_tx))),
            )
        }
        _ => (rx, None),
    };
    let stop_reading = shutdown.child_token();
    let (parking, releases) = match parking {
        Some((set, Some(watch_from))) => {
            let releases = releases(config, &set, watch_from, &stop_reading, refusals)?;
            (Some(set), Some(releases))
        }
        Some((set, None)) => (Some(set), None),
        None => (None, None),
    };
    let stages = ReadStages {
        policy: InvalidPolicy::of(config).with_parking(parking),
        mapper,
        router,
        handoff: super::handoff::Handoff { tx, budget },
        releases,
    };
    let at = At {
        end: checkpoint.position.clone(),
        delivered_through: checkpoint.delivered_through.clone(),
        between: true,
    };
    let reader_task = tokio::spawn(read::read_loop(
        stages,
        reader,
        at,
        stop_reading.clone(),
        metrics.clone(),
    ));

    let prefix = ack::Prefix::new(
        store,
        &checkpoint,
        Duration::from_millis(config.checkpoint.flush_interval_ms),
        metrics,
    );
    let acked = ack::acknowledge(
        sink,
        rx,
        &stop_reading,
        prefix,
        &config.pipeline,
        &config.delivery,
    )
    .await;
    stop_reading.cancel();
    let read = reader_task.await.map_err(|e| PipelineError::TaskFailed {
        task: "reader",
        reason: e.to_string(),
    })?;
    let checked_in = match check_in_task {
        // The acker failed: values still being written are not needed.
        Some(task) if acked.is_err() => {
            task.abort();
            Ok(())
        }
        Some(task) => task.await.map_err(|e| PipelineError::TaskFailed {
            task: "claim check",
            reason: e.to_string(),
        })?,
        None => Ok(()),
    };
    // A delivery failure explains a reader stop, not the other way round; a fenced
    // producer's failures say so only through its fatal error.
    acked.map_err(|e| match e {
        PipelineError::Sink(e) => PipelineError::Sink(sink.explain(e)),
        other => other,
    })?;
    // A value the claim check could not write ended the stream before its record.
    checked_in.map_err(PipelineError::Sink)?;
    read
}
