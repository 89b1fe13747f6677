//! What every instance knows of the fleet: the status topic read from its start and
//! tailed, each instance's newest report of each source and each source's history.
//! Instances cannot reach each other's monitor ports; they all read this topic.

use rdkafka::message::Message;
use rdkafka::Offset;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::history::{Columns, History};
use super::{SourceReport, SourceState};
use crate::kafka::{KafkaConfig, Tailed};

/// The fleet as the status topic tells it.
#[derive(Default)]
pub struct Board {
    reports: RwLock<BTreeMap<String, SourceReport>>,
    history: RwLock<HashMap<String, History>>,
    /// The topic was read up to its end once: what is shown is the whole fleet.
    caught_up: AtomicBool,
    /// The control topic's records (pauses, resumes), oldest first.
    actions: RwLock<VecDeque<serde_json::Value>>,
}

/// Control records kept for the audit view.
const CONTROL_KEPT: usize = 10_000;

/// One source across the fleet.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FleetSource {
    pub source: String,
    /// The instance that streams it, if one reports doing so.
    pub leader: Option<String>,
    /// `starting / running / stopped / failed`, or `unknown` when no report is fresh.
    pub state: String,
    /// The leader's newest report (else the newest of any instance).
    pub report: SourceReport,
    /// Seconds since that report.
    pub report_age_secs: i64,
    /// Every instance that reports it (leader and standbys), newest report each.
    pub members: Vec<Member>,
}

/// One instance's part in a source.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Member {
    pub instance: String,
    pub role: crate::monitor::Role,
    pub state: SourceState,
    pub cause: Option<String>,
    pub report_age_secs: i64,
    /// No report for three intervals: the instance is gone (or cut off).
    pub stale: bool,
}

impl Board {
    /// Takes in one report (read from the topic, or this instance's own).
    pub fn add(&self, report: SourceReport) {
        if report.leads() {
            self.history
                .write()
                .expect("board history")
                .entry(report.source.clone())
                .or_default()
                .add(&report);
        }
        let mut reports = self.reports.write().expect("board reports");
        let key = report.key();
        // Read out of order (its own report and the topic's copy): the newest stays.
        if reports.get(&key).is_none_or(|r| r.at_ms <= report.at_ms) {
            reports.insert(key, report);
        }
    }

    pub fn caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Relaxed)
    }

    /// Every source, by name, as of `now_ms`; instances silent for a day are left out.
    pub fn sources(&self, now_ms: i64) -> Vec<FleetSource> {
        let reports = self.reports.read().expect("board reports");
        let mut by_source: BTreeMap<&str, Vec<&SourceReport>> = BTreeMap::new();
        for r in reports.values() {
            if now_ms - r.at_ms < i64::from(super::history::WINDOW_SECS) * 1000 {
                by_source.entry(&r.source).or_default().push(r);
            }
        }
        by_source
            .into_iter()
            .map(|(source, mut rs)| {
                rs.sort_by_key(|r| std::cmp::Reverse(r.at_ms));
                let leader = rs.iter().find(|r| r.leads() && !r.stale(now_ms)).copied();
                let shown = leader.unwrap_or(rs[0]);
                let state = match (leader, shown.stale(now_ms)) {
                    (Some(l), _) => serde_json::to_value(l.state)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                    (None, _)
                        if rs
                            .iter()
                            .any(|r| r.state == SourceState::Failed && !r.stale(now_ms)) =>
                    {
                        "failed".into()
                    }
                    (None, false) => "starting".into(),
                    (None, true) if shown.state == SourceState::Stopped => "stopped".into(),
                    (None, true) => "unknown".into(),
                };
                let age = |r: &SourceReport| (now_ms - r.at_ms).max(0) / 1000;
                FleetSource {
                    source: source.to_string(),
                    leader: leader.map(|l| l.instance.clone()),
                    state,
                    report: shown.clone(),
                    report_age_secs: age(shown),
                    members: rs
                        .iter()
                        .map(|r| Member {
                            instance: r.instance.clone(),
                            role: r.role,
                            state: r.state,
                            cause: r.cause.clone(),
                            report_age_secs: age(r),
                            stale: r.stale(now_ms),
                        })
                        .collect(),
                }
            })
            .collect()
    }

    /// `source`'s history since `since` (seconds since the epoch), `points` at most.
    pub fn history(&self, source: &str, since: u32, points: usize) -> Option<Columns> {
        let history = self.history.read().expect("board history");
        history.get(source).map(|h| h.columns(since, points))
    }

    /// Samples held over all sources (the memory figure: 24 bytes each).
    pub fn samples(&self) -> usize {
        self.history
            .read()
            .expect("board history")
            .values()
            .map(History::len)
            .sum()
    }

    /// Reads `topic` from its start and then as it grows, until `stop`. A record that is
    /// not a report is passed over (a newer router's, or another writer's).
    pub fn follow(self: &Arc<Self>, kafka: &KafkaConfig, topic: &str, stop: CancellationToken) {
        let board = self.clone();
        let name = topic.to_string();
        let mut warned = false;
        from_start(kafka, topic, stop, move |t| {
            match t {
                Tailed::Record(m) => {
                    warned = false;
                    if let Some(Ok(report)) = m.payload().map(serde_json::from_slice) {
                        board.add(report);
                    }
                }
                Tailed::CaughtUp => board.caught_up.store(true, Ordering::Relaxed),
                Tailed::Failed(error) if !warned => {
                    warn!(topic = %name, %error, "reading the status topic (the fleet view shows this instance's own reports meanwhile)");
                    warned = true;
                }
                Tailed::Failed(_) => {}
            }
            ControlFlow::Continue(())
        });
    }

    /// Reads the control topic (the console's actions) from its start and as it grows,
    /// keeping the newest `CONTROL_KEPT` records for the audit view.
    pub fn follow_control(
        self: &Arc<Self>,
        kafka: &KafkaConfig,
        topic: &str,
        stop: CancellationToken,
    ) {
        let board = self.clone();
        from_start(kafka, topic, stop, move |t| {
            if let Tailed::Record(m) = t {
                if let Some(Ok(record)) =
                    m.payload().map(serde_json::from_slice::<serde_json::Value>)
                {
                    let mut actions = board.actions.write().expect("board actions");
                    actions.push_back(record);
                    if actions.len() > CONTROL_KEPT {
                        actions.pop_front();
                    }
                }
            }
            ControlFlow::Continue(())
        });
    }

    /// The console's actions, newest first.
    pub fn actions(&self) -> Vec<serde_json::Value> {
        self.actions
            .read()
            .expect("board actions")
            .iter()
            .rev()
            .cloned()
            .collect()
    }
}

/// Follows one of the console's topics from its start.
fn from_start(
    kafka: &KafkaConfig,
    topic: &str,
    stop: CancellationToken,
    each: impl FnMut(Tailed<'_>) -> ControlFlow<()> + Send + 'static,
) {
    crate::kafka::tail(
        kafka,
        topic,
        "outbox-router-console",
        Offset::Beginning,
        stop,
        each,
    );
}
