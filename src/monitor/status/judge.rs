//! The judging half of `status`: a verdict, its reasons and the retention budget from
//! the measurements and the thresholds. Pure: no I/O.

use super::{RouterState, Status, Thresholds, Verdict};

/// A router starting this long without its first observation is a warning: a start
/// takes seconds, a wait for Kafka or the source can take forever.
const STARTING_WARN_SECS: i64 = 120;

fn hours(secs: i64) -> String {
    let h = secs as f64 / 3600.0;
    if (h - h.round()).abs() < 0.05 {
        format!("{} h", h.round() as i64)
    } else {
        format!("{h:.1} h")
    }
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
