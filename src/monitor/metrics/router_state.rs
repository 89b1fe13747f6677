//! What the process is doing — starting, standby, running — published as it changes.

use tokio::sync::watch;

use super::Metrics;
use crate::monitor::role::Role;
use crate::monitor::RouterState;

impl Metrics {
    /// Derives the state from the role and the first observation, and publishes a change.
    pub(super) fn send_router_state(&self) {
        let now = {
            let state = self.0.state.lock().expect("metrics state");
            match (state.role.role, state.status.is_some()) {
                (Role::Standby, _) => RouterState::Standby,
                (_, true) => RouterState::Running,
                (_, false) => RouterState::Starting,
            }
        };
        self.0.router_state.send_if_modified(|was| {
            let changed = *was != now;
            *was = now;
            changed
        });
    }
    /// The state, following its changes.
    pub fn router_state(&self) -> watch::Receiver<RouterState> {
        self.0.router_state.subscribe()
    }
}
