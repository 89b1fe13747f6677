//! What this instance's endpoints and reports show: its name and group, and every
//! source it runs with its metrics — one for a single router, a pool's as they are
//! added and removed.

use std::sync::RwLock;

use super::Metrics;

/// A single router, or a pool instance (its endpoints answer per source).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Single,
    Pool,
}

/// This instance and the sources it runs.
pub struct Served {
    instance: String,
    group: Option<String>,
    shape: Shape,
    sources: RwLock<Vec<(String, Metrics)>>,
}

impl Served {
    /// A single router (alone, or one of a standby pair's `group`) serving `source`.
    pub fn single(instance: String, group: Option<String>, source: &str, metrics: Metrics) -> Self {
        Self {
            instance,
            group,
            shape: Shape::Single,
            sources: RwLock::new(vec![(source.to_string(), metrics)]),
        }
    }

    /// A pool instance, before its sources start.
    pub fn pool(instance: String, group: String) -> Self {
        Self {
            instance,
            group: Some(group),
            shape: Shape::Pool,
            sources: RwLock::new(Vec::new()),
        }
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    pub fn group(&self) -> Option<&str> {
        self.group.as_deref()
    }

    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Shows `name` (replacing its metrics, if shown).
    pub fn insert(&self, name: &str, metrics: Metrics) {
        let mut sources = self.sources.write().expect("served sources");
        sources.retain(|(n, _)| n != name);
        sources.push((name.to_string(), metrics));
        sources.sort_by(|a, b| a.0.cmp(&b.0));
    }

    /// Stops showing `name`.
    pub fn remove(&self, name: &str) {
        self.sources
            .write()
            .expect("served sources")
            .retain(|(n, _)| n != name);
    }

    /// The metrics shown for `name`.
    pub fn metrics_of(&self, name: &str) -> Option<Metrics> {
        self.sources()
            .into_iter()
            .find_map(|(n, m)| (n == name).then_some(m))
    }

    /// Every source with its metrics, by name.
    pub fn sources(&self) -> Vec<(String, Metrics)> {
        self.sources.read().expect("served sources").clone()
    }
}
