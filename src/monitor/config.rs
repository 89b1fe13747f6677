//! `[monitor]`: the endpoint, the watcher's interval and the alert thresholds.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::server::access::{Credential, MIN_TOKEN_CHARS};

/// Monitoring: HTTP endpoint, how often the server is asked, alert thresholds.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonitorConfig {
    /// Address of `/metrics`, `/health`, `/ready`, `/status`; `off` disables it.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Seconds between lag / runway observations.
    #[serde(
        default = "default_monitor_interval_secs",
        deserialize_with = "crate::units::secs"
    )]
    pub interval_secs: u64,
    /// Warn when the retention runway is below this share of the retention.
    #[serde(default = "default_runway_warn")]
    pub runway_warn_ratio: f64,
    /// Critical when the retention runway is below this share of the retention.
    #[serde(default = "default_runway_critical")]
    pub runway_critical_ratio: f64,
    /// Warn when lag exceeds this many seconds.
    #[serde(
        default = "default_lag_warn_secs",
        deserialize_with = "crate::units::secs"
    )]
    pub lag_warn_secs: u64,
    /// Critical when lag exceeds this many seconds.
    #[serde(
        default = "default_lag_critical_secs",
        deserialize_with = "crate::units::secs"
    )]
    pub lag_critical_secs: u64,
    /// Hours your alerting needs to notice a dead router: with `repair_hours`, the
    /// retention budget `status` and `validate` hold the binlog retention against.
    #[serde(
        default = "default_detect_hours",
        deserialize_with = "crate::units::hours_opt"
    )]
    pub detect_hours: Option<f64>,
    /// Hours you need to repair it (retention budget in `status` and `validate`).
    #[serde(
        default = "default_repair_hours",
        deserialize_with = "crate::units::hours_opt"
    )]
    pub repair_hours: Option<f64>,
    /// `/ready` answers 503 once undelivered records waited this many seconds without
    /// any acknowledgement from Kafka.
    #[serde(
        default = "default_ready_max_stall_secs",
        deserialize_with = "crate::units::secs"
    )]
    pub ready_max_stall_secs: u64,
    /// The fleet's status topic: every instance reports its sources there and the
    /// console shows every instance's reports from it; `off` shows this instance's only.
    #[serde(default = "default_status_topic")]
    pub status_topic: String,
    /// Where the console's pause and resume go, for every instance of a source to
    /// follow (compacted: the newest record per source is its state); `off`: no pauses.
    #[serde(default = "default_control_topic")]
    pub control_topic: String,
    /// A single router's name on the console (a pool's sources are named by their
    /// files); default `delivery.transactional_id`, else `checkpoint.name`, else `router`.
    #[serde(default)]
    pub name: String,
    /// The console's credentials, by name (`[monitor.credentials.NAME]`).
    #[serde(default)]
    pub credentials: BTreeMap<String, Credential>,
    /// The monitor port over TLS (`[monitor.tls]`: `cert_file`, `key_file`): needed for
    /// credentials off loopback.
    #[serde(default)]
    pub tls: Option<super::server::tls::MonitorTls>,
    /// OpenTelemetry traces over OTLP (`[monitor.tracing]`), off by default.
    #[serde(default)]
    pub tracing: super::traces::TracingConfig,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        toml::from_str("").expect("monitor defaults")
    }
}

impl MonitorConfig {
    /// What is wrong with these settings, if anything.
    pub fn check(&self) -> Result<(), String> {
        if let Some(addr) = self.listen_addr() {
            addr.parse::<std::net::SocketAddr>()
                .map_err(|_| format!("monitor.listen {addr:?} is not IP:PORT (or \"off\")"))?;
        }
        if let Some(topic) = self.status_topic() {
            crate::kafka::check_topic(topic).map_err(|e| format!("monitor.status_topic: {e}"))?;
        }
        if let Some(topic) = self.control_topic() {
            crate::kafka::check_topic(topic).map_err(|e| format!("monitor.control_topic: {e}"))?;
        }
        if let Some(tls) = &self.tls {
            tls.acceptor()?;
        }
        for (name, c) in &self.credentials {
            if name.trim().is_empty() || name.chars().any(char::is_control) {
                return Err(format!(
                    "monitor.credentials: {name:?} is not a name the audit trail can show"
                ));
            }
            if c.token.expose().chars().count() < MIN_TOKEN_CHARS {
                return Err(format!("monitor.credentials.{name}.token is shorter than {MIN_TOKEN_CHARS} characters: a guessable token protects nothing (e.g. `openssl rand -hex 24`)"));
            }
        }
        Ok(())
    }

    /// The fleet's control topic, or `None` when off.
    pub fn control_topic(&self) -> Option<&str> {
        (self.control_topic != "off").then_some(self.control_topic.as_str())
    }

    /// The fleet's status topic, or `None` when off.
    pub fn status_topic(&self) -> Option<&str> {
        (self.status_topic != "off").then_some(self.status_topic.as_str())
    }

    /// The endpoint address, or `None` when disabled.
    pub fn listen_addr(&self) -> Option<&str> {
        (self.listen != "off").then_some(self.listen.as_str())
    }

    /// Alert thresholds; `detect_hours`/`repair_hours` may be overridden.
    pub fn thresholds(
        &self,
        detect_hours: Option<f64>,
        repair_hours: Option<f64>,
    ) -> super::Thresholds {
        let secs = |h: Option<f64>| h.map(|h| (h * 3600.0) as u64);
        super::Thresholds {
            runway_warn_ratio: self.runway_warn_ratio,
            runway_critical_ratio: self.runway_critical_ratio,
            lag_warn_ms: self.lag_warn_secs as i64 * 1000,
            lag_critical_ms: self.lag_critical_secs as i64 * 1000,
            detect_secs: secs(detect_hours.or(self.detect_hours)),
            repair_secs: secs(repair_hours.or(self.repair_hours)),
        }
    }
}

/// A night and a day: a router that dies on a Friday evening is noticed by Saturday's.
fn default_detect_hours() -> Option<f64> {
    Some(24.0)
}

/// A weekend and a half: the time to get the right people and fix it.
fn default_repair_hours() -> Option<f64> {
    Some(60.0)
}

fn default_control_topic() -> String {
    "outbox-router.control".into()
}

fn default_status_topic() -> String {
    "outbox-router.status".into()
}

fn default_listen() -> String {
    "127.0.0.1:9612".into()
}

fn default_monitor_interval_secs() -> u64 {
    10
}

fn default_runway_warn() -> f64 {
    0.5
}

fn default_runway_critical() -> f64 {
    0.2
}

fn default_lag_warn_secs() -> u64 {
    300
}

fn default_lag_critical_secs() -> u64 {
    1800
}

fn default_ready_max_stall_secs() -> u64 {
    60
}
