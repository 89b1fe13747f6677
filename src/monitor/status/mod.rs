//! The operator's question — is the router keeping up, and how long until its binlog is
//! gone? — answered from the checkpoint and the server, whether the router runs or not.

use serde::{Deserialize, Serialize};

mod judge;
mod observe;
mod render;

pub use observe::observe;

/// Overall verdict; its exit code is usable from cron or a Nagios-style check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Nothing to do.
    Ok,
    /// Look at it soon.
    Warning,
    /// Act now: data is at risk.
    Critical,
}

impl Verdict {
    /// 0 ok, 1 warning, 2 critical.
    pub fn exit_code(self) -> u8 {
        self as u8
    }
}

/// When to warn and when to page.
#[derive(Debug, Clone)]
pub struct Thresholds {
    /// Warn when runway < this share of retention.
    pub runway_warn_ratio: f64,
    /// Critical when runway < this share of retention.
    pub runway_critical_ratio: f64,
    /// Warn when lag exceeds this (ms).
    pub lag_warn_ms: i64,
    /// Critical when lag exceeds this (ms).
    pub lag_critical_ms: i64,
    /// Time to notice a dead router (seconds), for the retention budget.
    pub detect_secs: Option<u64>,
    /// Time to repair it (seconds), for the retention budget.
    pub repair_secs: Option<u64>,
}

/// What the router's process is doing, as far as `status` can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RouterState {
    /// Its endpoint answered with an observation.
    Running,
    /// Its process runs (it holds the store's run lock, or its endpoint answers) and
    /// has not published its first observation yet.
    Starting,
    /// Under `[ha]`, waiting for the lead: it observes nothing until it leads.
    Standby,
    /// No process runs on this store.
    Stopped,
}

/// What a router's `/status` answers (with 503) before its first observation: that it
/// runs, and its own view.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Unobserved {
    /// `starting` or `standby`.
    pub router: RouterState,
    /// Why there are no figures.
    pub reason: String,
    /// Its own view (role, readiness).
    pub live: Live,
}

impl Unobserved {
    /// What a router says of itself before its first observation.
    pub fn new(router: RouterState, live: Live) -> Self {
        Self {
            router,
            reason: "no observation yet".into(),
            live,
        }
    }
}

/// Measurements plus verdict.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    /// Running, starting, standby or stopped.
    pub router: RouterState,
    /// Seconds since a `starting` router's process started, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting_secs: Option<i64>,
    /// The durable checkpoint.
    pub checkpoint: Option<String>,
    /// Commit time of the checkpoint's transaction (ms since epoch).
    pub checkpoint_commit_time_ms: Option<i64>,
    /// Seconds since the checkpoint was written.
    pub checkpoint_age_secs: Option<i64>,
    /// The server's current binlog position.
    pub server_position: String,
    /// Binlog bytes between checkpoint and server position.
    pub bytes_behind: Option<u64>,
    /// Now minus the checkpoint's commit time; 0 when no transaction committed since.
    pub lag_ms: Option<i64>,
    /// Server binlog retention (seconds); `None`: never expires, or unknown.
    pub retention_secs: Option<u64>,
    /// The retention cannot be read (`retention_problem` says why and the fix).
    #[serde(default)]
    pub retention_unknown: bool,
    /// The setting that governs it (the server's variables, or a managed platform's).
    #[serde(default)]
    pub retention_setting: String,
    /// What is wrong with the retention setting, and the fix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_problem: Option<String>,
    /// Seconds until the checkpoint's file may be purged; `None`: unbounded or unknown.
    pub runway_secs: Option<i64>,
    /// The runway cannot be told yet: the checkpoint has no commit time (a first start
    /// at a given or the earliest position, before its first acknowledged transaction).
    #[serde(default)]
    pub runway_unknown: bool,
    /// MariaDB `max_binlog_total_size`, when set.
    #[serde(default)]
    pub size_limit_bytes: Option<u64>,
    /// Binlog bytes the server may still write before the size limit purges the
    /// checkpoint's file.
    #[serde(default)]
    pub size_headroom_bytes: Option<i64>,
    /// The checkpoint's file is already gone.
    pub purged: bool,
    /// Server settings the router depends on that are wrong now (a global
    /// `binlog_format` set to MIXED while the router runs, …), each with its fix.
    #[serde(default)]
    pub server_settings: Vec<String>,
    /// The verdict.
    pub verdict: Verdict,
    /// Why the verdict is not ok.
    pub reasons: Vec<String>,
    /// Retention vs detection + repair time, when both are declared.
    pub budget: Option<String>,
    /// What only the running router knows (absent from a stopped router's status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<Live>,
}

/// The running router's own view, at the moment of the request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Live {
    /// `/ready` would answer 200.
    pub ready: bool,
    /// Why not, when not ready.
    pub not_ready_reason: Option<String>,
    /// Records read from the binlog and not yet acknowledged by Kafka.
    pub in_flight_records: usize,
    /// Seconds undelivered records have waited without any acknowledgement.
    pub delivery_stall_secs: f64,
    /// End of the last transaction the reader routed.
    pub reader_position: Option<String>,
    /// Single instance, or leader / standby under `[ha]`.
    #[serde(default)]
    pub role: super::Role,
    /// This instance's `[ha]` name.
    #[serde(default)]
    pub instance: Option<String>,
    /// A pool's source stopped by a failure of its own: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// An operator's pause in force: who, when and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<String>,
}
