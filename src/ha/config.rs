//! `[ha]`: the lock group, its session timeout, and how this instance names itself.

use serde::Deserialize;

/// Hot standby settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HaConfig {
    /// Run as one of several instances: only the one holding the lock streams.
    #[serde(default)]
    pub enabled: bool,
    /// One-partition topic whose partition is the lock (created if missing; holds no
    /// records).
    #[serde(default = "default_lock_topic")]
    pub lock_topic: String,
    /// Consumer group of the instances (default `outbox-router-ha.<transactional_id>`).
    #[serde(default)]
    pub group_id: String,
    /// A leader that does not heartbeat for this long loses the lock; roughly the
    /// takeover time after a crash. The broker bounds it by
    /// `group.min.session.timeout.ms` (default 6000).
    #[serde(
        default = "default_session_timeout_ms",
        deserialize_with = "crate::units::millis"
    )]
    pub session_timeout_ms: u64,
    /// How often a standby checks that it could take over (source and Kafka reachable).
    #[serde(
        default = "default_standby_check_secs",
        deserialize_with = "crate::units::secs"
    )]
    pub standby_check_secs: u64,
    /// This instance's name in logs, `status` and the group (default `<host>-<pid>`).
    #[serde(default)]
    pub instance: String,
}

impl Default for HaConfig {
    fn default() -> Self {
        toml::from_str("").expect("ha defaults")
    }
}

impl HaConfig {
    /// The lock group's id: by default named after the fleet's `transactional_id`.
    pub fn group(&self, transactional_id: &str) -> String {
        match self.group_id.trim() {
            "" => format!("outbox-router-ha.{transactional_id}"),
            id => id.to_string(),
        }
    }

    /// The name this instance goes by.
    pub fn instance_name(&self) -> String {
        match self.instance.trim() {
            "" => {
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|h| h.trim().to_string())
                    .unwrap_or_else(|_| "host".into());
                format!("{host}-{}", std::process::id())
            }
            name => name.to_string(),
        }
    }

    /// What is wrong with these settings beside the delivery mode's, if anything.
    pub fn check(&self, exactly_once: bool) -> Result<(), String> {
        if !self.enabled {
            return Ok(());
        }
        if !exactly_once {
            return Err("ha.enabled = true needs delivery.mode = \"exactly-once\": the transactional producer is what fences an old leader, so that a paused or cut-off one can never write again".into());
        }
        if self.session_timeout_ms < 1000 {
            return Err("ha.session_timeout_ms must be at least 1000".into());
        }
        if self.standby_check_secs == 0 {
            return Err("ha.standby_check_secs must be at least 1".into());
        }
        crate::kafka::check_topic(&self.lock_topic).map_err(|e| format!("ha.lock_topic: {e}"))
    }
}

fn default_lock_topic() -> String {
    "outbox-router.lock".into()
}
fn default_session_timeout_ms() -> u64 {
    10_000
}
fn default_standby_check_secs() -> u64 {
    5
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ha_needs_exactly_once() {
        let ha: HaConfig = toml::from_str("enabled = true").unwrap();
        let err = ha.check(false).unwrap_err();
        assert!(err.contains("exactly-once"), "{err}");
        ha.check(true).unwrap();
        assert_eq!(ha.group("t1"), "outbox-router-ha.t1");
    }
}
