//! `/ready` and the instance's part in a hot-standby pair: whether it streams and
//! delivers, or as a standby could take over.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Metrics;
use crate::monitor::role::Role;

impl Metrics {
    /// Sets how long deliveries may stall before `/ready` fails.
    pub fn set_ready_max_stall(&self, d: Duration) {
        self.0
            .ready_max_stall_ms
            .store(d.as_millis() as u64, Ordering::Relaxed);
    }
    /// `Ok` when streaming and delivering; else why not (for `/ready`).
    pub fn readiness(&self) -> Result<(), String> {
        {
            let state = self.0.state.lock().expect("metrics state");
            if let Some(pause) = &state.role.paused {
                return Err(pause.clone());
            }
            if state.role.role == Role::Standby {
                return state.role.standby_check.clone();
            }
        }
        if !self.is_connected() {
            return Err("not connected to the binlog".into());
        }
        let stalled = self.0.progress.stalled_for();
        let bound = Duration::from_millis(self.0.ready_max_stall_ms.load(Ordering::Relaxed));
        if stalled > bound {
            return Err(format!(
                "{} record(s) waiting {:.0} s without a delivery (bound: monitor.ready_max_stall_secs = {})",
                self.0.progress.records(),
                stalled.as_secs_f64(),
                bound.as_secs()
            ));
        }
        Ok(())
    }
    /// This instance's part: single, leader or standby (`instance`: its `[ha]` name).
    pub fn set_role(&self, role: Role, instance: Option<&str>) {
        self.0.m.leader.set(i64::from(role != Role::Standby));
        if role != Role::Standby {
            self.0.m.standby_ready.set(0);
        }
        let mut state = self.0.state.lock().expect("metrics state");
        state.role.role = role;
        state.role.instance = instance.map(str::to_string);
        if role == Role::Standby {
            state.role.standby_check = Err("standby: not checked yet".into());
        }
        drop(state);
        self.send_router_state();
    }
    /// An operator's pause in force here (`by`, when and why), or none. A paused
    /// source's lock holder is its leader: it streams nothing, and no one else does.
    pub fn set_paused(&self, pause: Option<String>) {
        self.0.m.paused.set(i64::from(pause.is_some()));
        let mut state = self.0.state.lock().expect("metrics state");
        if pause.is_some() && state.role.role == Role::Standby {
            state.role.role = Role::Leader;
        }
        state.role.paused = pause;
        drop(state);
        self.send_router_state();
    }
    /// This instance's part.
    pub fn role(&self) -> Role {
        self.0.state.lock().expect("metrics state").role.role
    }
    /// A standby's check: `Ok` when it could take over, else why not.
    pub fn set_standby_check(&self, check: Result<(), String>) {
        self.0.m.standby_ready.set(i64::from(check.is_ok()));
        self.0
            .state
            .lock()
            .expect("metrics state")
            .role
            .standby_check = check;
    }
    /// Why this source is stopped by a failure of its own (`None`: it is not): its file
    /// does not load, its first start or lock topic is refused, or it stopped with an
    /// error and waits to be retried.
    pub fn set_failure(&self, why: Option<String>) {
        self.0.m.source_failed.set(i64::from(why.is_some()));
        self.0.state.lock().expect("metrics state").role.failure = why;
    }
    /// The lock was taken and the stream connected `after` the assignment.
    pub fn took_over(&self, after: Duration) {
        self.0.m.takeovers.inc();
        self.0.m.takeover_seconds.set(after.as_secs_f64());
    }
    /// The leader lost the lock.
    pub fn lost_lock(&self) {
        self.0.m.lock_losses.inc();
    }
    /// The producer was fenced.
    pub fn fenced(&self) {
        self.0.m.fenced.inc();
    }
}
