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
    let view = Arc::new(PoolView::new(instance.clone(), group.clone()));
    let mut failures = Failures::default();
    // Sources whose `--init` failed here: each tries again before it starts.
    let mut init_pending = Vec::new();
    for failed in std::mem::take(&mut pool.failed) {
        failures.show(&view, &instance, &failed.name, failed.error);
    }
    // Answering from the start, while `--init` runs.
    let monitor_stop = CancellationToken::new();
    if let Some(addr) = pool.monitor.listen_addr() {
        crate::monitor::serve_pool(addr, view.clone(), monitor_stop.clone())
            .await
            .with_context(|| format!("cannot listen on monitor.listen = {addr}"))?;
    }
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

/// `items` split into those `check` passes and those it fails, with why.
fn partition_failing<T>(
    items: Vec<T>,
    check: impl Fn(&T) -> Result<(), String>,
) -> (Vec<T>, Vec<(T, String)>) {
    let (mut ok, mut failed) = (Vec::new(), Vec::new());
    for item in items {
        match check(&item) {
            Ok(()) => ok.push(item),
            Err(why) => failed.push((item, why)),
        }
    }
    (ok, failed)
}

/// The sources whose lock topic exists or could be created, and those whose lock topic
/// the broker refuses for good (an ACL, a name colliding with another topic's, such as
/// `shop.eu` and `shop_eu`). A transient failure keeps the source: the join retries.
fn lockable(
    kafka: &crate::kafka::KafkaConfig,
    sources: Vec<PoolSource>,
) -> (Vec<PoolSource>, Vec<(PoolSource, String)>) {
    let creator = match crate::kafka::TopicCreator::new(kafka) {
        Ok(creator) => creator,
        // The join says why, and retries.
        Err(_) => return (sources, Vec::new()),
    };
    partition_failing(sources, |s| {
        match creator.ensure_compacted(&s.lock_topic, "lock") {
            Err(e) if !e.is_transient() => Err(format!("its lock topic {}: {e}", s.lock_topic)),
            _ => Ok(()),
        }
    })
}

/// The sources shown failed by this instance, with why: each logged once per cause.
#[derive(Default)]
struct Failures(BTreeMap<String, String>);

impl Failures {
    /// Shows `name` failed for `why` (a source not running on this instance).
    fn show(&mut self, view: &PoolView, instance: &str, name: &str, why: String) {
        if self.0.get(name) != Some(&why) {
            error!(source = %name, error = %why, "the source cannot run; the pool's other sources go on");
        }
        let metrics = view
            .metrics_of(name)
            .unwrap_or_else(|| Metrics::for_source(name));
        metrics.set_role(Role::Standby, Some(instance));
        metrics.set_standby_check(Err(format!("the source cannot run: {why}")));
        metrics.set_failure(Some(why.clone()));
        view.insert(name, metrics);
        self.0.insert(name.to_string(), why);
    }

    /// `name` runs again (or is gone): no longer shown failed by this table.
    fn clear(&mut self, name: &str) {
        self.0.remove(name);
    }
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
    failures: Failures,
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
    fn start(&mut self, source: PoolSource, init: bool) {
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
                let pooled = Pooled {
                    lease: &lease,
                    instance: &instance,
                    group: &group,
                };
                lead_source(&source, metrics, pooled, init, &stop).await
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
    /// no longer loads changes nothing (the running sources go on). Each source's
    /// trouble is its own: a file that no longer loads leaves that source running as
    /// loaded before; one that cannot start is shown failed; and no source is left
    /// stopped while this instance holds its lock.
    async fn reload(&mut self, path: &Path, started: &Pool) {
        let mut pool = match Pool::load(path) {
            Ok(pool) => pool,
            Err(e) => {
                error!(error = %crate::cause_chain(&e.into()), "pool reload refused; the running sources go on unchanged");
                return;
            }
        };
        if format!("{:?}", pool.settings) != format!("{:?}", started.settings) {
            warn!("pool reload: [pool] changed; the group, lock topics and endpoint take the change at the next start");
        }
        // A running source whose file broke runs on; any other is shown failed.
        let mut still_failing = Vec::new();
        for failed in std::mem::take(&mut pool.failed) {
            if self.sources.contains_key(&failed.name) {
                if self.failures.0.get(&failed.name) != Some(&failed.error) {
                    error!(source = %failed.name, error = %failed.error, "pool reload: the source's file no longer loads; it runs on as loaded before");
                    self.failures.0.insert(failed.name.clone(), failed.error);
                }
            } else {
                self.failures
                    .show(&self.view, &self.instance, &failed.name, failed.error);
            }
            still_failing.push(failed.name);
        }
        // No longer failing: running again, or gone from the directory.
        let stale: Vec<String> = self
            .failures
            .0
            .keys()
            .filter(|n| !still_failing.contains(n))
            .filter(|n| {
                self.sources.contains_key(*n) || !pool.sources.iter().any(|s| &s.name == *n)
            })
            .cloned()
            .collect();
        for name in stale {
            self.failures.clear(&name);
            if !self.sources.contains_key(&name) {
                self.view.remove(&name);
            }
        }
        let keep = |s: &PoolSource| {
            self.sources
                .get(&s.name)
                .is_some_and(|t| t.source.text == s.text)
        };
        let (unchanged, changed): (Vec<PoolSource>, Vec<PoolSource>) =
            pool.sources.into_iter().partition(|s| keep(s));
        let mut unchanged: Vec<String> = unchanged.into_iter().map(|s| s.name).collect();
        unchanged.extend(
            still_failing
                .into_iter()
                .filter(|n| self.sources.contains_key(n)),
        );
        let to_stop: Vec<String> = self
            .sources
            .keys()
            .filter(|n| !unchanged.contains(n))
            .cloned()
            .collect();
        if to_stop.is_empty() && changed.is_empty() {
            return;
        }
        let subscribed = |s: &PoolSource| self.sources.contains_key(&s.name);
        let (prepared, unprepared) =
            partition_failing(changed, |s| prepare(s).map_err(|e| crate::cause_chain(&e)));
        // A new source's lock topic is checked before anything stops: one the broker
        // refuses is that source's failure, not the reload's.
        let (new, restarting): (Vec<PoolSource>, Vec<PoolSource>) =
            prepared.into_iter().partition(|s| !subscribed(s));
        let kafka = started.kafka.clone();
        let (new, refused) = tokio::task::block_in_place(|| lockable(&kafka, new));
        let mut starting = restarting;
        starting.extend(new);
        for (source, why) in unprepared.into_iter().chain(refused) {
            if !subscribed(&source) {
                self.failures
                    .show(&self.view, &self.instance, &source.name, why);
            } else {
                error!(source = %source.name, error = %why, "pool reload: the changed source cannot start; it runs on as loaded before");
                unchanged.push(source.name);
            }
        }
        let to_stop: Vec<String> = to_stop
            .into_iter()
            .filter(|n| !unchanged.contains(n))
            .collect();
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
            .filter_map(|n| self.sources.get(n))
            .map(|t| t.source.lock_topic.clone())
            .collect();
        topics.extend(starting.iter().map(|s| s.lock_topic.clone()));
        if let Err(e) = self.lock.resubscribe(&started.kafka, &topics).await {
            // The subscription is as it was: a restarted source still holds its lock
            // here and starts again (never left unled); a new one waits for the next
            // reload, shown failed.
            let why =
                format!("cannot subscribe to its lock topic yet ({e}); retried at the next reload");
            for source in starting {
                if to_stop.contains(&source.name) {
                    self.start(source, false);
                } else {
                    self.failures
                        .show(&self.view, &self.instance, &source.name, why.clone());
                }
            }
            return;
        }
        for source in starting {
            let new = !to_stop.contains(&source.name);
            info!(source = %source.name, new, "pool reload: source started");
            // `run --init`: an added source's first start, recorded as its task begins.
            self.start(source, new && self.init);
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
    pooled: Pooled<'_>,
    mut init: bool,
    shutdown: &CancellationToken,
) {
    let (name, instance) = (&source.name, pooled.instance);
    let config = &source.config;
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
        // `run --init` not done for this source yet (added by a reload, or its first
        // start refused or unreachable at launch): before anything else, retried.
        if init {
            match pipeline::init(config).await {
                Ok(done) => {
                    info!(source = %name, recorded = ?done.recorded, "--init: the source's first start");
                    init = false;
                }
                Err(e) => {
                    let why = format!("--init: {}", crate::cause_chain(&anyhow::Error::from(e)));
                    error!(source = %name, error = %why, retry_secs = SOURCE_RETRY.as_secs(), "the source's first start is not recorded; the pool's other sources go on");
                    metrics.set_role(Role::Standby, Some(instance));
                    metrics.set_standby_check(Err(format!("the source cannot start: {why}")));
                    metrics.set_failure(Some(why));
                    tokio::select! {
                        _ = tokio::time::sleep(SOURCE_RETRY) => continue,
                        _ = shutdown.cancelled() => return,
                    }
                }
            }
        }
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
                metrics.set_failure(Some(why));
                tokio::select! {
                    _ = tokio::time::sleep(SOURCE_RETRY) => {}
                    _ = shutdown.cancelled() => return,
                }
            }
        }
    }
}
