//! The sources this instance runs a task for, whether it leads them now or waits: started,
//! stopped (drained and committed), and changed by a reload of the sources directory.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::checks::{lockable, partition_failing, prepare};
use super::failures::Failures;
use super::lead::lead_source;
use super::{Pool, PoolSource};
use crate::ha::{Lease, Lock};
use crate::monitor::{Metrics, Served};
use crate::pipeline::Pooled;

/// The sources this instance runs a task for, whether it leads them now or waits.
pub(super) struct Running {
    /// `run --init`: sources added later get their first start recorded too.
    pub(super) init: bool,
    pub(super) sources: BTreeMap<String, SourceTask>,
    pub(super) lock: Arc<Lock>,
    pub(super) view: Arc<Served>,
    /// The console's event lookup: the sources running here.
    pub(super) lookup: Arc<crate::pipeline::lookup::EventLookup>,
    /// What a source led here does for the fleet.
    pub(super) duties: crate::pipeline::LeaderDuties,
    pub(super) instance: String,
    pub(super) group: String,
    pub(super) shutdown: CancellationToken,
    pub(super) failures: Failures,
}

pub(super) struct SourceTask {
    source: Arc<PoolSource>,
    metrics: Metrics,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Starts `source`'s task (its lock topic must be subscribed); keeps the metrics of
    /// a source restarted for a change, so its counters go on.
    pub(super) fn start(&mut self, source: PoolSource, init: bool) {
        let metrics = self
            .view
            .metrics_of(&source.name)
            .unwrap_or_else(|| Metrics::for_source(&source.name));
        self.view.insert(&source.name, metrics.clone());
        let lease = Lease::of(&self.lock, &source.lock_topic.clone()).expect("subscribed");
        let source = Arc::new(source);
        self.lookup.insert(&source.name, source.clone());
        let stop = self.shutdown.child_token();
        let task = {
            let (source, metrics, stop) = (source.clone(), metrics.clone(), stop.clone());
            let (instance, group) = (self.instance.clone(), self.group.clone());
            let duties = self.duties.clone();
            tokio::spawn(async move {
                let pooled = Pooled {
                    lease: &lease,
                    instance: &instance,
                    group: &group,
                    duties: &duties,
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

    pub(super) async fn stop_all(&mut self) {
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
    pub(super) async fn reload(&mut self, path: &Path, started: &Pool) {
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
                self.lookup.remove(name);
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
