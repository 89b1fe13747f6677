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

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
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
/// source's first start where it has none (as `checkpoint init` would).
pub async fn run(pool: Pool, init: bool, shutdown: CancellationToken) -> Result<()> {
    let settings = &pool.settings;
    let instance = settings.instance_name();
    let group = settings.group_id.clone();
    for source in &pool.sources {
        for key in &source.config.inline_secrets {
            warn!(source = %source.name, key = %key, "a secret is written into the source's file: reference it as \"${{env:VARIABLE}}\" or \"${{file:PATH}}\"");
        }
        crate::kafka::check_properties(&source.config.kafka)
            .map_err(anyhow::Error::msg)
            .context("kafka.properties")?;
    }
    if init {
        for source in &pool.sources {
            let init = pipeline::init(&source.config)
                .await
                .with_context(|| format!("source {}: --init", source.name))?;
            info!(source = %source.name, recorded = ?init.recorded, "--init: the source's first start");
        }
    }
    let metrics: Vec<(String, Metrics)> = pool
        .sources
        .iter()
        .map(|s| (s.name.clone(), Metrics::for_source(&s.name)))
        .collect();
    let monitor_stop = CancellationToken::new();
    if let Some(addr) = pool.monitor.listen_addr() {
        let view = Arc::new(PoolView {
            instance: instance.clone(),
            group: group.clone(),
            sources: metrics.clone(),
        });
        crate::monitor::serve_pool(addr, view, monitor_stop.clone())
            .await
            .with_context(|| format!("cannot listen on monitor.listen = {addr}"))?;
    }
    let lock_group = LockGroup {
        group: group.clone(),
        topics: pool
            .sources
            .iter()
            .map(|s| pool.lock_topic(&s.name))
            .collect(),
        instance: instance.clone(),
        session_timeout_ms: settings.session_timeout_ms,
    };
    let Some(lock) = join(&pool, &lock_group, &shutdown).await? else {
        monitor_stop.cancel();
        return Ok(());
    };
    info!(%instance, %group, sources = pool.sources.len(), "joined the pool: sources are led where the group assigns them");
    let pool = Arc::new(pool);
    let mut tasks = Vec::new();
    for (index, (name, m)) in metrics.into_iter().enumerate() {
        let lease = Lease::of(&lock, &pool.lock_topic(&name)).expect("joined with every topic");
        let (pool, shutdown, instance, group) = (
            pool.clone(),
            shutdown.clone(),
            instance.clone(),
            group.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let source = &pool.sources[index];
            lead_source(source, m, &lease, &instance, &group, &shutdown).await
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    // After every source has drained: whoever takes them over finds each transaction
    // committed or aborted.
    lock.release(RELEASE_TIMEOUT).await;
    monitor_stop.cancel();
    Ok(())
}

/// Joins the pool's group, retrying while Kafka cannot be reached; `None` on shutdown.
async fn join(
    pool: &Pool,
    spec: &LockGroup,
    shutdown: &CancellationToken,
) -> Result<Option<Arc<Lock>>> {
    let kafka = &pool.sources[0].config.kafka;
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
