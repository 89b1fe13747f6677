//! A pool: many sources over many instances. Every instance joins one Kafka consumer
//! group subscribed to one single-partition lock topic per source; the group's
//! cooperative-sticky assignment decides which instance leads which source, and moves
//! a source when its instance dies, joins or leaves. Each source runs as a standby
//! pair's member does (`pipeline::run_pooled`): exactly-once, its position in the
//! commit marker, its transactional producer fencing whoever led it before.
//!
//! A source's failure stays the source's: it is logged with its name, shows in its
//! metrics and `/status`, and is retried after `SOURCE_RETRY`, while the others stream.

//!
//! `checks`: what a source needs before it may run; `failures`: the sources shown failed
//! here; `lead`: one source's task; `running`: the sources this instance runs, and a
//! reload's changes to them.

mod checks;
mod config;
mod failures;
mod lead;
mod running;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

pub use config::{Pool, PoolSource};

use checks::{lockable, partition_failing, prepare};
use failures::Failures;
use running::Running;

use crate::ha::{Lock, LockGroup};
use crate::monitor::Served;
use crate::pipeline;

/// How long leaving the group may take on shutdown.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs this instance's part of the pool until `shutdown`; `init` records each
/// source's first start where it has none (as `checkpoint init` would). SIGHUP, and
/// every `pool.watch_secs`, reads the sources directory again: added sources join,
/// removed ones stop (drained and committed) and leave, changed ones restart. The
/// console offers `desk` over the sources running here, which are kept in `lookup`; a
/// source led here carries out `duties` for the fleet.
pub async fn run(
    path: &Path,
    init: bool,
    shutdown: CancellationToken,
    lookup: Arc<crate::pipeline::lookup::EventLookup>,
    desk: crate::monitor::server::Desk,
    mut duties: crate::pipeline::LeaderDuties,
) -> Result<()> {
    let pool = Pool::load(path)?;
    duties.tracing = crate::monitor::traces::Tracing::start(
        &pool.monitor.tracing,
        &pool.settings.instance_name(),
    )
    .map_err(anyhow::Error::msg)
    .context("monitor.tracing")?;
    let tracing = duties.tracing.clone();
    let ran = run_loaded(path, pool, init, shutdown, lookup, desk, duties).await;
    if let Some(tracing) = tracing {
        // The last events' spans (every source's), before the process ends.
        tracing.flush(Duration::from_secs(5)).await;
    }
    ran
}

/// `run`, once the pool's files are read and its tracing started.
async fn run_loaded(
    path: &Path,
    mut pool: Pool,
    init: bool,
    shutdown: CancellationToken,
    lookup: Arc<crate::pipeline::lookup::EventLookup>,
    desk: crate::monitor::server::Desk,
    duties: crate::pipeline::LeaderDuties,
) -> Result<()> {
    let settings = pool.settings.clone();
    let instance = settings.instance_name();
    let group = settings.group_id.clone();
    let view = Arc::new(Served::pool(instance.clone(), group.clone()));
    let mut failures = Failures::default();
    // Sources whose `--init` failed here: each tries again before it starts.
    let mut init_pending = Vec::new();
    for failed in std::mem::take(&mut pool.failed) {
        failures.show(&view, &instance, &failed.name, failed.error);
    }
    // Answering from the start, while `--init` runs.
    let monitor_stop = CancellationToken::new();
    // Whatever ends this function (a panic too), the monitor's followers of Kafka
    // topics stop: the runtime waits for their threads before the process can exit.
    let _monitor_stopped = monitor_stop.clone().drop_guard();
    crate::monitor::start(
        &pool.monitor,
        Some(&pool.kafka),
        view.clone(),
        desk,
        monitor_stop.clone(),
    )
    .await
    .with_context(|| format!("cannot listen on monitor.listen = {}", pool.monitor.listen))?;
    // Each check is its source's: one that fails is shown failed, the rest start.
    let (ready, unprepared) = partition_failing(std::mem::take(&mut pool.sources), |s| {
        prepare(s).map_err(|e| crate::cause_chain(&e))
    });
    for (source, why) in unprepared {
        failures.show(&view, &instance, &source.name, why);
    }
    pool.sources = ready;
    if init {
        // A stop during the first starts is honoured within the sources' longest
        // `pipeline.shutdown_timeout_secs`, whatever the brokers do.
        let bound = pool
            .sources
            .iter()
            .map(|s| s.config.pipeline.shutdown_timeout_secs)
            .max()
            .unwrap_or(30);
        let work = tokio::spawn(init_all(std::mem::take(&mut pool.sources)));
        let bound = Duration::from_secs(bound);
        let Some(done) = crate::stop::until_stopped(work, &shutdown, bound).await else {
            monitor_stop.cancel();
            return Ok(());
        };
        let (sources, refused) = done.context("--init")?;
        if shutdown.is_cancelled() {
            monitor_stop.cancel();
            return Ok(());
        }
        pool.sources = sources;
        for (source, why) in refused {
            failures.show(&view, &instance, &source, why);
            init_pending.push(source);
        }
    }
    let (lockable, refused) =
        tokio::task::block_in_place(|| lockable(&pool.kafka, std::mem::take(&mut pool.sources)));
    for (source, why) in refused {
        failures.show(&view, &instance, &source.name, why);
    }
    pool.sources = lockable;
    let lock_group = LockGroup {
        group: group.clone(),
        topics: pool.sources.iter().map(|s| s.lock_topic.clone()).collect(),
        instance: instance.clone(),
        session_timeout_ms: settings.session_timeout_ms,
    };
    let Some(lock) = join(&pool, &lock_group, &shutdown).await? else {
        monitor_stop.cancel();
        return Ok(());
    };
    info!(%instance, %group, sources = pool.sources.len(), failed = failures.0.len(), "joined the pool: sources are led where the group assigns them");
    let mut running = Running {
        init,
        sources: BTreeMap::new(),
        lock,
        view,
        lookup,
        duties,
        instance,
        group,
        shutdown: shutdown.clone(),
        failures,
    };
    let mut loaded = pool;
    for source in std::mem::take(&mut loaded.sources) {
        let init = init_pending.contains(&source.name);
        running.start(source, init);
    }
    let mut hangup = signal(SignalKind::hangup()).context("SIGHUP")?;
    let mut watch = tokio::time::interval(Duration::from_secs(settings.watch_secs.max(1)));
    watch.tick().await;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = hangup.recv() => {
                info!("SIGHUP: reading the pool's sources again");
                running.reload(path, &loaded).await;
            }
            _ = watch.tick(), if settings.watch_secs > 0 => running.reload(path, &loaded).await,
        }
    }
    running.stop_all().await;
    // After every source has drained: whoever takes them over finds each transaction
    // committed or aborted.
    running.lock.release(RELEASE_TIMEOUT).await;
    monitor_stop.cancel();
    Ok(())
}

/// How many sources' first starts `--init` records at once: each is a connection to
/// its server and a transaction on the checkpoint topic, about a second apiece.
const INIT_CONCURRENCY: usize = 8;

/// `run --init` for every source, `INIT_CONCURRENCY` at a time, before the instance
/// joins the group (so no source's start races its own first-start record). A source
/// whose first start is refused is named with why and still started: its start says
/// the same and is retried (an operator's `checkpoint set` fixes it for the fleet),
/// while the others stream. Bounded by nothing but the sources' own timeouts.
async fn init_all(sources: Vec<PoolSource>) -> (Vec<PoolSource>, Vec<(String, String)>) {
    let limit = Arc::new(tokio::sync::Semaphore::new(INIT_CONCURRENCY));
    let mut inits = tokio::task::JoinSet::new();
    for (index, source) in sources.into_iter().enumerate() {
        let limit = limit.clone();
        inits.spawn(async move {
            let _permit = limit.acquire_owned().await;
            let init = pipeline::init(&source.config).await;
            (index, source, init)
        });
    }
    let (mut done, mut failed) = (Vec::new(), Vec::new());
    while let Some(joined) = inits.join_next().await {
        match joined {
            Ok((index, source, Ok(init))) => {
                info!(source = %source.name, recorded = ?init.recorded, "--init: the source's first start");
                done.push((index, source));
            }
            Ok((index, source, Err(e))) => {
                let why = format!("--init: {}", crate::cause_chain(&anyhow::Error::from(e)));
                failed.push((source.name.clone(), why));
                done.push((index, source));
            }
            Err(e) => error!(error = %e, "--init: a source's task failed"),
        }
    }
    done.sort_by_key(|(index, _)| *index);
    (done.into_iter().map(|(_, source)| source).collect(), failed)
}

/// Joins the pool's group, retrying while Kafka cannot be reached; `None` on shutdown.
async fn join(
    pool: &Pool,
    spec: &LockGroup,
    shutdown: &CancellationToken,
) -> Result<Option<Arc<Lock>>> {
    let kafka = &pool.kafka;
    loop {
        match tokio::task::block_in_place(|| Lock::join_group(kafka, spec)) {
            Ok(lock) => return Ok(Some(Arc::new(lock))),
            Err(crate::ha::LockError::Topic(e)) if !e.is_transient() => {
                return Err(e).context("the pool's lock topics")
            }
            Err(e) => {
                warn!(error = %e, group = %spec.group, "pool: cannot join the group yet; retrying in 5 s")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = shutdown.cancelled() => return Ok(None),
        }
    }
}
