//! What `reconcile` is asked (the window and how to judge it) and what it answers.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

/// Ids listed per kind in a report (all of them are counted); `--republish-missing`
/// sends at most this many per run.
pub const LISTED_IDS: usize = 100_000;

/// The window and how to judge it.
#[derive(Debug, Clone)]
pub struct ReconcileOptions {
    /// Rows written at or after this unix time; with `id_range`, only where the topics
    /// are read from (0: their beginning).
    pub since: i64,
    /// Rows written before this unix time (default: now).
    pub until: Option<i64>,
    /// Rows by event id instead of time (tables without a timestamp column), both ends
    /// included, compared as the column's type.
    pub id_range: Option<(String, String)>,
    /// DATETIME/TIMESTAMP column the window is on, and whose value says how young an
    /// unproven row is.
    pub timestamp_column: String,
    /// How long to wait for the durable checkpoint to pass the snapshot.
    pub wait: Duration,
    /// Unproven rows written this close to the checkpoint's commit time are in flight.
    pub grace: Duration,
    /// Judge by the router's checkpoint (`true`), or — for topics another publisher
    /// fills, such as a polling relay's — by age alone: rows younger than `grace` are in
    /// flight.
    pub by_checkpoint: bool,
}

/// One topic's counts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TopicCounts {
    /// Rows in the window routed to this topic.
    pub expected: u64,
    /// Found exactly once, as routed.
    pub found_once: u64,
    /// Not found, and provably delivered if they were (the checkpoint is past them).
    pub missing: u64,
    /// Not found yet, not provably late either.
    pub in_flight: u64,
    /// Found more than once (same id): allowed by at-least-once, counted.
    pub duplicated: u64,
    /// Found with another topic, key or payload than the row routes to.
    pub misrouted: u64,
    /// Records in the window whose event id is in no outbox row (pruned, or not ours).
    pub not_in_table: u64,
    /// Not found, and parked (`on_invalid = "park"`): waiting for a release, not lost.
    pub parked: u64,
    /// Not found, and dropped by an operator (`parked drop`): never to be delivered.
    pub dropped: u64,
}

/// What reconcile found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReconcileReport {
    /// The window (unix seconds).
    pub since: i64,
    /// End of the window (unix seconds).
    pub until: i64,
    /// Binlog position of the snapshot the rows were read in.
    pub snapshot: String,
    /// The durable checkpoint compared with it (`-` when judged by age).
    pub checkpoint: String,
    /// True when the checkpoint was at or past the snapshot: "missing" is exact.
    pub proven: bool,
    /// Per topic (as routed; the shadow topic's name when comparing with one).
    pub topics: BTreeMap<String, TopicCounts>,
    /// Records read from Kafka.
    pub records_scanned: u64,
    /// Rows of the window that cannot be records (with `on_invalid = "park"`, each
    /// parked its aggregate: `parked list`); expected on no topic.
    pub invalid_rows: u64,
    /// Missing event ids (up to `LISTED_IDS`).
    pub missing_ids: Vec<String>,
    /// Misrouted event ids (up to `LISTED_IDS`).
    pub misrouted_ids: Vec<String>,
    /// Duplicated event ids (up to `LISTED_IDS`).
    pub duplicated_ids: Vec<String>,
    /// Event ids not in the table (up to `LISTED_IDS`).
    pub not_in_table_ids: Vec<String>,
}

impl ReconcileReport {
    /// Nothing missing and nothing misrouted.
    pub fn is_clean(&self) -> bool {
        self.topics
            .values()
            .all(|t| t.missing == 0 && t.misrouted == 0)
    }
}
