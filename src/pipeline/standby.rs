//! `[ha]`: wait as a standby until the lock is ours, stream while it stays ours, and
//! go back to waiting when it is lost. A fenced producer ends the process: another
//! instance leads and this one's producer must never be used again.

use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::supervise::{supervise, Ctx};
use super::PipelineError;
use crate::config::Config;
use crate::ha::{Lease, Lock, LockError};
use crate::monitor::Role;

/// How long a released lock waits for the coordinator to hear that we left.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// Leads whenever this instance holds the lock; returns on shutdown or a final error.
pub(super) async fn lead_when_elected(ctx: &Ctx<'_>) -> Result<(), PipelineError> {
    let config = ctx.config;
    let instance = config.ha.instance_name();
    let group = config.ha.group(&config.delivery.transactional_id);
    ctx.metrics.set_role(Role::Standby, Some(&instance));
    let Some(lock) = join(ctx, &group).await? else {
        return Ok(());
    };
    let result = alternate(ctx, &lock, &instance, &group).await;
    // After the pipeline has drained: a standby taking over now finds every
    // transaction of ours committed or aborted.
    lock.release(RELEASE_TIMEOUT).await;
    result
}

/// Joins the lock group, retrying while Kafka cannot be reached; `None` on shutdown.
async fn join(ctx: &Ctx<'_>, group: &str) -> Result<Option<Lease>, PipelineError> {
    let config = ctx.config;
    loop {
        let joined = tokio::task::block_in_place(|| {
            Lock::join(&config.kafka, &config.ha, &config.delivery.transactional_id)
        });
        match joined {
            Ok(lock) => return Ok(Some(lock)),
            Err(LockError::Topic(e)) if !e.is_transient() => return Err(LockError::Topic(e).into()),
            Err(e) => {
                warn!(error = %e, group, "standby: cannot join the lock group yet; retrying in 5 s");
                ctx.metrics.set_standby_check(Err(e.to_string()));
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = ctx.shutdown.cancelled() => return Ok(None),
        }
    }
}

/// Standby, then leader, then standby again after a lost lock, until shutdown.
pub(super) async fn alternate(
    ctx: &Ctx<'_>,
    lock: &Lease,
    instance: &str,
    group: &str,
) -> Result<(), PipelineError> {
    let mut leading = lock.watch();
    loop {
        ctx.metrics.set_role(Role::Standby, Some(instance));
        info!(instance, group, lock_topic = %lock.topic(), "standby: waiting for the lock; binlog connection cold");
        let mut check =
            tokio::time::interval(Duration::from_secs(ctx.config.ha.standby_check_secs));
        while !*leading.borrow_and_update() {
            tokio::select! {
                changed = leading.changed() => {
                    if changed.is_err() {
                        return Err(LockError::Stopped.into());
                    }
                }
                _ = check.tick() => ctx.metrics.set_standby_check(could_take_over(ctx.config).await),
                _ = ctx.shutdown.cancelled() => return Ok(()),
            }
        }
        let assigned = Instant::now();
        if let Err(why) = lock.confirm().await {
            warn!(instance, reason = %why, "assigned the lock but the coordinator did not confirm it; waiting");
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        // Not called leader yet: that is said once the start position is fixed and the
        // stream open, never before (a leader-and-ready signal while "where to start" is
        // still open invites writes this start could skip).
        info!(
            instance,
            group,
            "took the lock: starting to lead (a new transactional producer fences the previous leader)"
        );
        let term = ctx.shutdown.child_token();
        let watcher = {
            let (mut leading, term, metrics) = (lock.watch(), term.clone(), ctx.metrics.clone());
            tokio::spawn(async move {
                while *leading.borrow_and_update() {
                    if leading.changed().await.is_err() {
                        break;
                    }
                }
                if !term.is_cancelled() {
                    metrics.lost_lock();
                    term.cancel();
                }
            })
        };
        let (streaming_tx, mut streaming_rx) = tokio::sync::watch::channel(false);
        let streaming = {
            let (metrics, term) = (ctx.metrics.clone(), term.clone());
            let instance = instance.to_string();
            tokio::spawn(async move {
                let opened = tokio::select! {
                    opened = streaming_rx.wait_for(|open| *open) => opened.is_ok(),
                    _ = term.cancelled() => false,
                };
                if opened {
                    metrics.set_role(Role::Leader, Some(&instance));
                    let after = assigned.elapsed();
                    metrics.took_over(after);
                    info!(
                        takeover_ms = after.as_millis() as u64,
                        "streaming as the leader"
                    );
                }
            })
        };
        let term_ctx = Ctx {
            shutdown: &term,
            lock: Some(lock),
            streaming: Some(&streaming_tx),
            ..*ctx
        };
        let result = supervise(&term_ctx).await;
        watcher.abort();
        streaming.abort();
        match result {
            Err(e) if e.is_fenced() => {
                ctx.metrics.fenced();
                return Err(e);
            }
            Err(e) => return Err(e),
            Ok(()) if ctx.shutdown.is_cancelled() => return Ok(()),
            Ok(()) => {
                warn!(instance, "lost the lock (session timeout or cut off from Kafka): stopped streaming, nothing uncommitted becomes visible; standby again");
            }
        }
    }
}

/// `Ok` when the source and Kafka answer, so a takeover could start streaming.
async fn could_take_over(config: &Config) -> Result<(), String> {
    let timeout = Duration::from_secs(5);
    match tokio::time::timeout(timeout, crate::source::connect(&config.source)).await {
        Ok(Ok(conn)) => drop(conn),
        Ok(Err(e)) => return Err(format!("standby cannot take over: source: {e}")),
        Err(_) => return Err("standby cannot take over: source: no answer within 5 s".into()),
    }
    crate::kafka::check_reachable(&config.kafka, timeout)
        .await
        .map(|_| ())
        .map_err(|e| format!("standby cannot take over: Kafka: {e}"))
}
