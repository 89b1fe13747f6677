//! A pool: many sources over many instances. Every instance joins one Kafka consumer
//! group subscribed to one single-partition lock topic per source; the group's
//! cooperative-sticky assignment decides which instance leads which source, and moves
//! a source when its instance dies, joins or leaves. Each source runs as a standby
//! pair's member does (`pipeline::run_pooled`): exactly-once, its position in the
//! commit marker, its transactional producer fencing whoever led it before.
//!
//! A source's failure stays the source's: it is logged with its name, shows in its
//! metrics and `/status`, and is retried after `SOURCE_RETRY`, while the others stream.

mod config;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

pub use config::{Pool, PoolSource};

use crate::ha::{Lease, Lock, LockGroup};
use crate::monitor::{Metrics, PoolView, Role, RunLock};
use crate::pipeline::{self, Pooled};

/// How long a source that failed waits before it tries again.
const SOURCE_RETRY: Duration = Duration::from_secs(15);

/// How long leaving the group may take on shutdown.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs this instance's part of the pool until `shutdown`; `init` records each
/// source's first start where it has none (as `checkpoint init` would). SIGHUP, and
/// every `pool.watch_secs`, reads the sources directory again: added sources join,
/// removed ones stop (drained and committed) and leave, changed ones restart.
pub async fn run(path: &Path, init: bool, shutdown: CancellationToken) -> Result<()> {
    let mut pool = Pool::load(path)?;
    let settings = pool.settings.clone();
    let instance = settings.instance_name();
    let group = settings.group_id.clone();
    for source in &pool.sources {
        prepare(source)?;
    }
    if init {
        pool.sources = init_all(std::mem::take(&mut pool.sources)).await?;
    }
    let view = Arc::new(PoolView::new(instance.clone(), group.clone()));
    let monitor_stop = CancellationToken::new();
    if let Some(addr) = pool.monitor.listen_addr() {
        crate::monitor::serve_pool(addr, view.clone(), monitor_stop.clone())
            .await
            .with_context(|| format!("cannot listen on monitor.listen = {addr}"))?;
    }
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
    info!(%instance, %group, sources = pool.sources.len(), "joined the pool: sources are led where the group assigns them");
    let mut running = Running {
        init,
        sources: BTreeMap::new(),
        lock,
        view,
        instance,
        group,
        shutdown: shutdown.clone(),
    };
    let mut loaded = pool;
    for source in std::mem::take(&mut loaded.sources) {
        running.start(source);
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
/// joins the group (so no source's start races its own first-start record); the first
/// failure stops the start, naming its source.
async fn init_all(sources: Vec<PoolSource>) -> Result<Vec<PoolSource>> {
    let limit = Arc::new(tokio::sync::Semaphore::new(INIT_CONCURRENCY));
    let mut inits = tokio::task::JoinSet::new();
    for (index, source) in sources.into_iter().enumerate() {
        let limit = limit.clone();
        inits.spawn(async move {
            let _permit = limit.acquire_owned().await;
            init_one(&source).await?;
            anyhow::Ok((index, source))
        });
    }
    let mut done = Vec::new();
    while let Some(init) = inits.join_next().await {
        done.push(init.context("--init: a source's task")??);
    }
    done.sort_by_key(|(index, _)| *index);
    Ok(done.into_iter().map(|(_, source)| source).collect())
}

/// `--init` for one source: its first start recorded where it has none.
async fn init_one(source: &PoolSource) -> Result<()> {
    let init = pipeline::init(&source.config)
        .await
        .with_context(|| format!("source {}: --init", source.name))?;
    info!(source = %source.name, recorded = ?init.recorded, "--init: the source's first start");
    Ok(())
}

/// What a source needs before it may run: a build that honours its Kafka properties;
/// its secrets referenced, or said to be written in.
fn prepare(source: &PoolSource) -> Result<()> {
    for key in &source.config.inline_secrets {
        warn!(source = %source.name, key = %key, "a secret is written into the source's file: reference it as \"${{env:VARIABLE}}\" or \"${{file:PATH}}\"");
    }
    crate::kafka::check_properties(&source.config.kafka)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("source {}: kafka.properties", source.name))
}

/// The sources this instance runs a task for, whether it leads them now or waits.
struct Running {
    /// `run --init`: sources added later get their first start recorded too.
    init: bool,
    sources: BTreeMap<String, SourceTask>,
    lock: Arc<Lock>,
    view: Arc<PoolView>,
    instance: String,
    group: String,
    shutdown: CancellationToken,
}

struct SourceTask {
    source: Arc<PoolSource>,
    metrics: Metrics,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Starts `source`'s task (its lock topic must be subscribed); keeps the metrics of
    /// a source restarted for a change, so its counters go on.
    fn start(&mut self, source: PoolSource) {
        let metrics = self
            .view
            .metrics_of(&source.name)
            .unwrap_or_else(|| Metrics::for_source(&source.name));
        self.view.insert(&source.name, metrics.clone());
        let lease = Lease::of(&self.lock, &source.lock_topic.clone()).expect("subscribed");
        let source = Arc::new(source);
        let stop = self.shutdown.child_token();
        let task = {
            let (source, metrics, stop) = (source.clone(), metrics.clone(), stop.clone());
            let (instance, group) = (self.instance.clone(), self.group.clone());
            tokio::spawn(async move {
                lead_source(&source, metrics, &lease, &instance, &group, &stop).await
            })
        };
        let name = source.name.clone();
        self.sources.insert(
            name,
            SourceTask {
                source,
                metrics,
                stop,
                task,
            },
        );
    }

    /// Stops `name`'s task: what it holds drains and commits, as at shutdown.
    async fn stop(&mut self, name: &str) -> Option<Metrics> {
        let task = self.sources.remove(name)?;
        task.stop.cancel();
        let _ = task.task.await;
        Some(task.metrics)
    }

    async fn stop_all(&mut self) {
        let names: Vec<String> = self.sources.keys().cloned().collect();
        for name in names {
            self.stop(&name).await;
        }
    }

    /// Reads the pool again and applies what changed in its sources; a pool file that
    /// no longer loads changes nothing (the running sources go on).
    async fn reload(&mut self, path: &Path, started: &Pool) {
        let pool = match Pool::load(path) {
            Ok(pool) => pool,
            Err(e) => {
                error!(error = %crate::cause_chain(&e.into()), "pool reload refused; the running sources go on unchanged");
                return;
            }
        };
        if format!("{:?}", pool.settings) != format!("{:?}", started.settings) {
            warn!("pool reload: [pool] changed; the group, lock topics and endpoint take the change at the next start");
        }
        let keep = |s: &PoolSource| {
            self.sources
                .get(&s.name)
                .is_some_and(|t| t.source.text == s.text)
        };
        let (unchanged, changed): (Vec<PoolSource>, Vec<PoolSource>) =
            pool.sources.into_iter().partition(|s| keep(s));
        let unchanged: Vec<String> = unchanged.into_iter().map(|s| s.name).collect();
        let to_stop: Vec<String> = self
            .sources
            .keys()
            .filter(|n| !unchanged.contains(n))
            .cloned()
            .collect();
        if to_stop.is_empty() && changed.is_empty() {
            return;
        }
        let mut starting = Vec::new();
        for source in changed {
            match prepare(&source) {
                Ok(()) => starting.push(source),
                Err(e) => {
                    error!(source = %source.name, error = %crate::cause_chain(&e), "pool reload: the source is not started")
                }
            }
        }
        for name in &to_stop {
            let restarted = starting.iter().any(|s| &s.name == name);
            info!(source = %name, restarted, "pool reload: stopping the source (draining, committing)");
            self.stop(name).await;
            if !restarted {
                self.view.remove(name);
            }
        }
        let mut topics: Vec<String> = unchanged
            .iter()
            .map(|n| self.sources[n].source.lock_topic.clone())
            .collect();
        topics.extend(starting.iter().map(|s| s.lock_topic.clone()));
        if let Err(e) = self.lock.resubscribe(&started.kafka, &topics).await {
            error!(error = %e, "pool reload: cannot subscribe to the sources' lock topics; added sources wait for the next reload");
            return;
        }
        for source in starting {
            let new = !to_stop.contains(&source.name);
            if new && self.init {
                if let Err(e) = init_one(&source).await {
                    error!(error = %crate::cause_chain(&e), "the added source's first start was not recorded; its start says why")
                }
            }
            info!(source = %source.name, new, "pool reload: source started");
            self.start(source);
        }
    }
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

/// One source, for as long as the pool runs: waits for its lease, leads while it holds
/// it, and after a failure of its own waits `SOURCE_RETRY` and goes on waiting.
async fn lead_source(
    source: &PoolSource,
    metrics: Metrics,
    lease: &Lease,
    instance: &str,
    group: &str,
    shutdown: &CancellationToken,
) {
    let name = &source.name;
    let config = &source.config;
    let pooled = Pooled {
        lease,
        instance,
        group,
    };
    let dir = &config.checkpoint.dir;
    // The store is a cache of the commit marker: a source moves to instances that never
    // led it. With it, `status --source` calls the source starting or standby, not
    // stopped, while the pool runs.
    match crate::checkpoint::CheckpointStore::create_if_missing(dir).map(|()| RunLock::take(dir)) {
        Ok(Ok(lock)) => drop(tokio::spawn(lock.follow(metrics.router_state()))),
        Ok(Err(e)) => {
            warn!(source = %name, dir = %dir.display(), error = %e, "cannot hold the store's run lock: `status` calls this source stopped unless the pool's endpoint answers")
        }
        Err(e) => {
            warn!(source = %name, dir = %dir.display(), error = %e, "cannot create the source's store; its start will say why")
        }
    }
    loop {
        let result =
            pipeline::run_pooled(config, shutdown.child_token(), metrics.clone(), pooled).await;
        if shutdown.is_cancelled() {
            return;
        }
        match result {
            Ok(()) => {}
            Err(e) if e.is_fenced() => {
                warn!(source = %name, error = %e, "fenced: another instance leads this source now; waiting for the group to assign it again")
            }
            Err(e) => {
                let why = crate::cause_chain(&anyhow::Error::from(e));
                error!(source = %name, error = %why, retry_secs = SOURCE_RETRY.as_secs(), "the source stopped; the pool's other sources go on");
                metrics.set_role(Role::Standby, Some(instance));
                metrics.set_standby_check(Err(format!("the source stopped: {why}")));
                tokio::select! {
                    _ = tokio::time::sleep(SOURCE_RETRY) => {}
                    _ = shutdown.cancelled() => return,
                }
            }
        }
    }
}
