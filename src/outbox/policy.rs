//! What happens to a row that cannot become a record.

use serde::Deserialize;

/// Policy for invalid outbox rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnInvalid {
    /// Stop the router; the checkpoint stays before the row's transaction.
    #[default]
    Fail,
    /// Publish the raw row, the reason and the position to the dead-letter topic, with the
    /// same event id header, and go on.
    DeadLetter,
    /// Log it with table, position and event id, count it, and go on.
    Skip,
    /// Hold its aggregate back: it and every later event of the same aggregate go to
    /// the parking topic in commit order, every other aggregate goes on (`route::parking`).
    Park,
}

impl OnInvalid {
    /// The name used in config, logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            OnInvalid::Fail => "fail",
            OnInvalid::DeadLetter => "dead-letter",
            OnInvalid::Skip => "skip",
            OnInvalid::Park => "park",
        }
    }
}
