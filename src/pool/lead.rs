//! One source's task, for as long as the pool runs it: its lease, its first start when
//! `--init` asks for one, leading while it holds the lease, and its own failures retried.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::PoolSource;
use crate::monitor::{Metrics, Role, RunLock};
use crate::pipeline::{self, Pooled};

/// How long a source that failed waits before it tries again.
const SOURCE_RETRY: Duration = Duration::from_secs(15);

/// One source, for as long as the pool runs: waits for its lease, leads while it holds
/// it, and after a failure of its own waits `SOURCE_RETRY` and goes on waiting.
pub(super) async fn lead_source(
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
