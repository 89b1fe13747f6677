//! The part this instance plays under `[ha]`, and whether a standby could take over.

use serde::{Deserialize, Serialize};

/// Single instance, or leader / standby of a group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// `[ha]` is off: the only instance.
    #[default]
    Single,
    /// Holds the lock and streams.
    Leader,
    /// Waits for the lock, binlog connection cold.
    Standby,
}

/// What the role endpoints report.
#[derive(Debug, Clone)]
pub(super) struct RoleState {
    pub role: Role,
    pub instance: Option<String>,
    /// A standby's last check: `Ok` when it could take over, else why not.
    pub standby_check: Result<(), String>,
    /// Why this source is stopped by a failure of its own, if it is.
    pub failure: Option<String>,
    /// An operator's pause in force (who, when, why), if any.
    pub paused: Option<String>,
}

impl Default for RoleState {
    fn default() -> Self {
        Self {
            role: Role::Single,
            instance: None,
            standby_check: Err("standby: not checked yet".into()),
            failure: None,
            paused: None,
        }
    }
}
