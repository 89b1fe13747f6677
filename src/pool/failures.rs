//! The sources this instance shows failed, with why: a source that cannot load, start or
//! lock is shown in its metrics and `/status`, logged once per cause.

use std::collections::BTreeMap;

use tracing::error;

use crate::monitor::{Metrics, Role, Served};

/// The sources shown failed by this instance, with why: each logged once per cause.
#[derive(Default)]
pub(super) struct Failures(pub(super) BTreeMap<String, String>);

impl Failures {
    /// Shows `name` failed for `why` (a source not running on this instance).
    pub(super) fn show(&mut self, view: &Served, instance: &str, name: &str, why: String) {
        if self.0.get(name) != Some(&why) {
            error!(source = %name, error = %why, "the source cannot run; the pool's other sources go on");
        }
        let metrics = view
            .metrics_of(name)
            .unwrap_or_else(|| Metrics::for_source(name));
        metrics.set_role(Role::Standby, Some(instance));
        metrics.set_standby_check(Err(format!("the source cannot run: {why}")));
        metrics.set_failure(Some(why.clone()));
        view.insert(name, metrics);
        self.0.insert(name.to_string(), why);
    }

    /// `name` runs again (or is gone): no longer shown failed by this table.
    pub(super) fn clear(&mut self, name: &str) {
        self.0.remove(name);
    }
}
