//! What `/status` reports: the last observed status and checkpoint, with the router's
//! live view (what it holds, how far it read) as of the request.

use super::Metrics;
use crate::checkpoint::Checkpoint;
use crate::monitor::status::Live;
use crate::monitor::Status;
use crate::position::Position;

impl Metrics {
    /// Where the reader has routed up to (`None` before its first transaction).
    pub fn reader_position(&self) -> Option<Position> {
        self.0.state.lock().expect("metrics state").reader.clone()
    }
    /// Records a durable checkpoint write.
    pub fn checkpoint_written(&self, checkpoint: &Checkpoint) {
        self.0.m.checkpoint_writes.inc();
        self.set_checkpoint(checkpoint);
    }
    /// Publishes the current durable checkpoint (e.g. the one found at start).
    pub fn set_checkpoint(&self, checkpoint: &Checkpoint) {
        self.0
            .m
            .checkpoint_offset
            .set(checkpoint.position.offset as i64);
        self.0
            .m
            .checkpoint_file_index
            .set(checkpoint.position.file.index() as i64);
        self.0.m.checkpoint_age_seconds.set(0);
        self.0.state.lock().expect("metrics state").checkpoint = Some(checkpoint.clone());
    }
    /// The last durable checkpoint.
    pub fn checkpoint(&self) -> Option<Checkpoint> {
        self.0
            .state
            .lock()
            .expect("metrics state")
            .checkpoint
            .clone()
    }
    /// Publishes a freshly observed status in gauges and for `/status`.
    pub fn set_status(&self, status: &Status) {
        let i = &self.0;
        self.set_optional_gauges(
            status.lag_ms.map(|ms| ms as f64 / 1000.0),
            status.bytes_behind.map(|b| b as i64),
            status.runway_secs,
            status.retention_secs.map(|s| s as i64),
        );
        // An unreadable retention is a warning of its own, not a wrong setting.
        let retention_problem =
            usize::from(status.retention_problem.is_some() && !status.retention_unknown);
        i.m.settings_problems
            .set((status.server_settings.len() + retention_problem) as i64);
        if let Some(age) = status.checkpoint_age_secs {
            i.m.checkpoint_age_seconds.set(age);
        }
        i.state.lock().expect("metrics state").status = Some(status.clone());
        self.refresh_parked_age();
        self.send_router_state();
    }
    /// The gauges that are left out while unknown (see `ABSENT_WHILE_UNKNOWN`): lag
    /// (seconds), binlog bytes behind, runway and retention (seconds).
    pub(crate) fn set_optional_gauges(
        &self,
        lag_secs: Option<f64>,
        bytes_behind: Option<i64>,
        runway_secs: Option<i64>,
        retention_secs: Option<i64>,
    ) {
        let m = &self.0.m;
        m.lag.set(lag_secs);
        m.bytes_behind.set(bytes_behind);
        m.runway_seconds.set(runway_secs);
        m.retention_seconds.set(retention_secs);
    }
    /// The last observed status, with the router's live view as of now.
    pub fn status(&self) -> Option<Status> {
        let mut status = self.0.state.lock().expect("metrics state").status.clone()?;
        if let Some(lag) = self.held_lag_ms() {
            status.lag_ms = Some(lag);
        }
        status.live = Some(self.live());
        Some(status)
    }
    /// What the running router holds and whether it delivers, now.
    pub fn live(&self) -> Live {
        let progress = &self.0.progress;
        let readiness = self.readiness();
        let (role, instance, failure, paused) = {
            let state = self.0.state.lock().expect("metrics state");
            (
                state.role.role,
                state.role.instance.clone(),
                state.role.failure.clone(),
                state.role.paused.clone(),
            )
        };
        Live {
            ready: readiness.is_ok(),
            not_ready_reason: readiness.err(),
            in_flight_records: progress.records(),
            delivery_stall_secs: progress.stalled_for().as_secs_f64(),
            reader_position: self.reader_position().map(|p| p.to_string()),
            role,
            instance,
            failure,
            paused,
        }
    }
    /// Lag from what the router holds: now minus the commit time of the oldest
    /// transaction read and not yet acknowledged (`None` when it holds nothing).
    pub fn held_lag_ms(&self) -> Option<i64> {
        self.0
            .progress
            .oldest_commit_ms()
            .filter(|c| *c > 0)
            .map(|c| (self.0.server_clock.now_ms() - c).max(0))
    }
}
