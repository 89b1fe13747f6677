//! The operator's question — is the router keeping up, and how long until its binlog is
//! gone? — answered from the checkpoint and the server, whether the router runs or not.

use mysql_async::Conn;
use serde::{Deserialize, Serialize};

use super::retention::{self, Runway};
use crate::checkpoint::Checkpoint;
use crate::position::Position;
use crate::source::server::{self, Flavor};
use crate::source::SourceError;

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

/// A router starting this long without its first observation is a warning: a start
/// takes seconds, a wait for Kafka or the source can take forever.
const STARTING_WARN_SECS: i64 = 120;

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
}

fn hours(secs: i64) -> String {
    let h = secs as f64 / 3600.0;
    if (h - h.round()).abs() < 0.05 {
        format!("{} h", h.round() as i64)
    } else {
        format!("{h:.1} h")
    }
}

/// Measures the server against a checkpoint (not yet judged: call `judge`). `reader`:
/// where the running router has read and acknowledged everything up to, when it holds
/// nothing undelivered — caught up there is caught up, whatever the checkpoint says.
pub async fn observe(
    conn: &mut Conn,
    checkpoint: Option<&Checkpoint>,
    running: bool,
    reader: Option<&Position>,
) -> Result<Status, SourceError> {
    let flavor: Flavor = server::flavor(conn).await?;
    let current = server::current_position(conn, flavor).await?;
    let files = server::binary_logs(conn).await?;
    let retention = retention::retention(conn).await?;
    let retention_secs = retention.kept.secs();
    let size_limit_bytes = retention::size_limit(conn).await?;
    // The server's clock: commit times and file times are in it.
    let now = server::now_ms(conn).await?;
    let mut status = Status {
        router: if running {
            RouterState::Running
        } else {
            RouterState::Stopped
        },
        starting_secs: None,
        checkpoint: checkpoint.map(|c| c.position.to_string()),
        checkpoint_commit_time_ms: checkpoint.map(|c| c.commit_time_ms),
        checkpoint_age_secs: checkpoint.map(|c| (now - c.written_at_ms) / 1000),
        server_position: current.to_string(),
        bytes_behind: None,
        lag_ms: None,
        retention_secs,
        retention_unknown: retention.kept == retention::Kept::Unknown,
        retention_setting: retention.setting.to_string(),
        retention_problem: retention.problem,
        runway_secs: None,
        runway_unknown: false,
        size_limit_bytes,
        size_headroom_bytes: None,
        purged: false,
        server_settings: server::settings_problems(conn)
            .await?
            .into_iter()
            .map(|p| format!("{}: {}", p.what, p.fix))
            .collect(),
        verdict: Verdict::Ok,
        reasons: Vec::new(),
        budget: None,
        live: None,
    };
    if let Some(cp) = checkpoint {
        status.size_headroom_bytes =
            size_limit_bytes.and_then(|l| retention::size_headroom(&cp.position, &files, l));
        status.bytes_behind = retention::bytes_behind(&cp.position, &files, &current);
        // With GTIDs, "nothing committed since the checkpoint" is exact; bytes alone also
        // count rotation and heartbeat bytes that hold no transaction.
        let at_server = |p: &Position| {
            if !p.gtid.is_empty() && !current.gtid.is_empty() {
                p.gtid == current.gtid
            } else {
                retention::bytes_behind(p, &files, &current) == Some(0)
            }
        };
        let caught_up = at_server(&cp.position) || reader.is_some_and(at_server);
        status.lag_ms = match caught_up {
            true => Some(0),
            false if cp.commit_time_ms > 0 => Some(now - cp.commit_time_ms),
            false => None,
        };
        match retention::runway(
            &cp.position,
            cp.commit_time_ms,
            &files,
            &current.file,
            retention.kept,
            now,
        ) {
            Runway::Purged => status.purged = true,
            Runway::Unbounded => {}
            Runway::Unknown => status.runway_unknown = true,
            Runway::Seconds(s) => status.runway_secs = Some(s),
        }
    }
    Ok(status)
}

impl Status {
    /// Sets verdict, reasons and budget from the measurements.
    pub fn judge(&mut self, t: &Thresholds) {
        let mut verdict = Verdict::Ok;
        let mut reasons = Vec::new();
        let mut raise = |v: Verdict, why: String| {
            verdict = verdict.max(v);
            reasons.push(why);
        };
        // A first start, or a standby that never led, has no checkpoint yet: only a
        // router that is not running has no business being without one.
        let on_its_way = matches!(self.router, RouterState::Starting | RouterState::Standby);
        if self.checkpoint.is_none() && !on_its_way {
            raise(
                Verdict::Warning,
                "no checkpoint yet: the router has never run with this store".into(),
            );
        }
        match (self.router, self.starting_secs) {
            (RouterState::Starting, Some(secs)) if secs > STARTING_WARN_SECS => raise(
                Verdict::Warning,
                format!("starting for {secs} s without a first observation (is it waiting for Kafka or the source? see its log)"),
            ),
            (RouterState::Stopped, _) => raise(Verdict::Warning, "router is not running".into()),
            _ => {}
        }
        // A reconnect is a blip; records waiting past the bound are the problem.
        let stalled = self
            .live
            .as_ref()
            .filter(|l| l.delivery_stall_secs > 0.0)
            .and_then(|l| l.not_ready_reason.clone());
        if let Some(why) = stalled {
            raise(Verdict::Warning, format!("not ready: {why}"));
        }
        for problem in &self.server_settings {
            // New sessions log statements or lose columns: the router will stop at the
            // first outbox write that reaches it that way.
            raise(Verdict::Critical, format!("server setting: {problem}"));
        }
        if let Some(problem) = &self.retention_problem {
            // Unknown is not yet gone: a warning until someone grants the read.
            let level = match self.retention_unknown {
                true => Verdict::Warning,
                false => Verdict::Critical,
            };
            raise(level, format!("binlog retention: {problem}"));
        }
        if self.purged {
            raise(
                Verdict::Critical,
                "the checkpoint's binlog file was purged: run `outbox-router recover`".into(),
            );
        }
        if let (Some(runway), Some(retention)) = (self.runway_secs, self.retention_secs) {
            let share = runway as f64 / retention.max(1) as f64;
            let text = format!(
                "retention runway {} of {}",
                hours(runway),
                hours(retention as i64)
            );
            if share < t.runway_critical_ratio {
                raise(
                    Verdict::Critical,
                    format!("{text}: below {:.0} %", t.runway_critical_ratio * 100.0),
                );
            } else if share < t.runway_warn_ratio {
                raise(
                    Verdict::Warning,
                    format!("{text}: below {:.0} %", t.runway_warn_ratio * 100.0),
                );
            }
        }
        if let (Some(headroom), Some(limit)) = (self.size_headroom_bytes, self.size_limit_bytes) {
            let share = headroom as f64 / limit.max(1) as f64;
            let text =
                format!("binlog size headroom {headroom} of {limit} bytes (max_binlog_total_size)");
            if share < t.runway_critical_ratio {
                raise(Verdict::Critical, text);
            } else if share < t.runway_warn_ratio {
                raise(Verdict::Warning, text);
            }
        }
        if let Some(lag) = self.lag_ms {
            if lag > t.lag_critical_ms {
                raise(
                    Verdict::Critical,
                    format!("lag {} s above {} s", lag / 1000, t.lag_critical_ms / 1000),
                );
            } else if lag > t.lag_warn_ms {
                raise(
                    Verdict::Warning,
                    format!("lag {} s above {} s", lag / 1000, t.lag_warn_ms / 1000),
                );
            }
        }
        self.budget = None;
        if let (Some(detect), Some(repair), Some(retention)) =
            (t.detect_secs, t.repair_secs, self.retention_secs)
        {
            let need = (detect + repair) as i64;
            let spare = retention as i64 - need;
            let summary = format!(
                "retention {} vs detection {} + repair {} = {}",
                hours(retention as i64),
                hours(detect as i64),
                hours(repair as i64),
                hours(need)
            );
            if spare < 0 {
                let text = format!("{summary} → {} short", hours(-spare));
                raise(Verdict::Warning, format!("retention budget: {text}"));
                self.budget = Some(text);
            } else {
                self.budget = Some(format!("{summary} → {} spare", hours(spare)));
            }
        }
        self.verdict = verdict;
        self.reasons = reasons;
    }
}

impl Status {
    /// The status as the `status` command prints it, one fact per line.
    pub fn render(&self) -> String {
        let mut out = String::new();
        macro_rules! line {
            ($($arg:tt)*) => {{
                out.push_str(&format!($($arg)*));
                out.push('\n');
            }};
        }
        let verdict = format!("{:?}", self.verdict).to_uppercase();
        let since = self
            .starting_secs
            .map(|secs| format!("started {secs} s ago; "))
            .unwrap_or_default();
        match self.router {
            RouterState::Running if self.live.is_none() => line!(
                "{verdict}: router running (its endpoint is off: these figures are read from the store and the server)"
            ),
            RouterState::Running => line!("{verdict}: router running"),
            RouterState::Stopped => line!("{verdict}: router stopped"),
            RouterState::Starting => line!(
                "{verdict}: router starting ({since}no observation yet: these figures are read from the store and the server)"
            ),
            RouterState::Standby => line!(
                "{verdict}: router standby ({since}waiting for the lead; no observation until it leads: these figures are read from its store and the server)"
            ),
        }
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        line!("  checkpoint:      {}", opt(self.checkpoint.clone()));
        line!("  server position: {}", self.server_position);
        line!(
            "  bytes behind:    {}",
            opt(self.bytes_behind.map(|b| b.to_string()))
        );
        let lag = self.lag_ms.map_or_else(
            || "unknown (no commit time yet)".to_string(),
            |l| format!("{:.1} s", l as f64 / 1000.0),
        );
        line!("  lag:             {lag}");
        let retention = match self.retention_secs {
            Some(r) => format!("{r} s ({:.1} h)", r as f64 / 3600.0),
            None if self.retention_unknown => "unknown (cannot be read)".into(),
            None => "none (binlogs never expire)".into(),
        };
        line!(
            "  retention:       {retention} — {}",
            self.retention_setting
        );
        let runway = match (self.purged, self.runway_secs) {
            (true, _) => "0 (purged)".to_string(),
            (false, Some(r)) => format!("{r} s ({:.1} h)", r as f64 / 3600.0),
            (false, None) if self.retention_unknown => {
                "unknown (the retention cannot be read)".into()
            }
            (false, None) if self.runway_unknown => {
                "unknown until the first transaction is acknowledged (the start position has no commit time)".into()
            }
            (false, None) => "unbounded".into(),
        };
        line!("  runway:          {runway}");
        if let Some(live) = &self.live {
            if live.role != super::Role::Single {
                let role = format!("{:?}", live.role).to_lowercase();
                let name = live.instance.clone().unwrap_or_default();
                line!("  role:            {role} ({name})");
            }
            line!("  reader:          {}", opt(live.reader_position.clone()));
            line!(
                "  in flight:       {} record(s), {:.0} s without a delivery",
                live.in_flight_records,
                live.delivery_stall_secs
            );
            let ready = match &live.not_ready_reason {
                None => "yes".to_string(),
                Some(why) => format!("no: {why}"),
            };
            line!("  ready:           {ready}");
        }
        if let Some(b) = &self.budget {
            line!("  budget:          {b}");
        }
        for r in &self.reasons {
            line!("  - {r}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Status {
        Status {
            router: RouterState::Running,
            starting_secs: None,
            checkpoint: Some("mysql-bin.000001:4".into()),
            checkpoint_commit_time_ms: Some(1),
            checkpoint_age_secs: Some(0),
            server_position: "mysql-bin.000002:4".into(),
            bytes_behind: Some(10),
            lag_ms: Some(10),
            retention_secs: Some(72 * 3600),
            retention_setting: "binlog_expire_logs_seconds / expire_logs_days".into(),
            retention_problem: None,
            retention_unknown: false,
            runway_secs: Some(60 * 3600),
            runway_unknown: false,
            size_limit_bytes: None,
            size_headroom_bytes: None,
            purged: false,
            server_settings: vec![],
            verdict: Verdict::Ok,
            reasons: vec![],
            budget: None,
            live: None,
        }
    }

    fn thresholds() -> Thresholds {
        Thresholds {
            runway_warn_ratio: 0.5,
            runway_critical_ratio: 0.2,
            lag_warn_ms: 60_000,
            lag_critical_ms: 600_000,
            detect_secs: None,
            repair_secs: None,
        }
    }

    #[test]
    fn seeds_budget_is_twelve_hours_short() {
        let mut s = base();
        let mut t = thresholds();
        t.detect_secs = Some(24 * 3600);
        t.repair_secs = Some(60 * 3600);
        s.judge(&t);
        assert_eq!(
            s.budget.as_deref(),
            Some("retention 72 h vs detection 24 h + repair 60 h = 84 h → 12 h short")
        );
        assert_eq!(s.verdict, Verdict::Warning);
    }

    #[test]
    fn runway_thresholds() {
        let mut s = base();
        s.judge(&thresholds());
        assert_eq!(s.verdict, Verdict::Ok, "{:?}", s.reasons);
        s.runway_secs = Some(30 * 3600);
        s.judge(&thresholds());
        assert_eq!(s.verdict, Verdict::Warning);
        s.runway_secs = Some(10 * 3600);
        s.judge(&thresholds());
        assert_eq!(s.verdict, Verdict::Critical);
        s.runway_secs = Some(60 * 3600);
        s.purged = true;
        s.judge(&thresholds());
        assert_eq!(s.verdict, Verdict::Critical);
    }

    #[test]
    fn a_start_is_no_alarm_until_it_lasts() {
        let mut s = base();
        s.router = RouterState::Starting;
        s.checkpoint = None;
        s.starting_secs = Some(3);
        s.judge(&thresholds());
        assert_eq!(s.verdict, Verdict::Ok, "{:?}", s.reasons);
        assert!(s
            .render()
            .starts_with("OK: router starting (started 3 s ago; no observation yet"));
        s.starting_secs = Some(STARTING_WARN_SECS + 1);
        s.judge(&thresholds());
        assert_eq!(s.verdict, Verdict::Warning);
        assert!(
            s.reasons[0].starts_with("starting for 121 s"),
            "{:?}",
            s.reasons
        );
        s.router = RouterState::Standby;
        s.judge(&thresholds());
        assert_eq!(s.verdict, Verdict::Ok, "a standby waits as long as it must");
        s.router = RouterState::Stopped;
        s.judge(&thresholds());
        assert_eq!(
            s.reasons,
            [
                "no checkpoint yet: the router has never run with this store",
                "router is not running"
            ]
        );
    }
}
