//! `status` as the command prints it, one fact per line.

use super::{RouterState, Status};

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
            if live.role != crate::monitor::Role::Single {
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
