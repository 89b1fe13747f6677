//! Whether the reader is working through a backlog: exactly-once transactions run
//! longer then (a commit costs the same whatever its size), and stay short when caught
//! up (latency).

use std::time::{Duration, Instant};

use crate::route::Batch;

/// Behind the binlog's end by more than this (its timestamps have a resolution of a
/// second), a reader that keeps handing over batches is working through a backlog.
const BACKLOG_LAG_MS: i64 = 2_000;

/// What the reader's recent batches say about how far behind it is.
pub(super) struct Backlog {
    /// When the last batch came, and the binlog commit time of its transaction.
    last_added: Instant,
    last_commit_time_ms: i64,
    /// A reader that has handed over nothing for this long has caught up.
    quiet_after: Duration,
}

impl Backlog {
    pub(super) fn new(quiet_after: Duration) -> Self {
        Self {
            last_added: Instant::now(),
            last_commit_time_ms: 0,
            quiet_after,
        }
    }

    /// A batch arrived from the reader.
    pub(super) fn observe(&mut self, batch: &Batch) {
        self.last_added = Instant::now();
        if batch.commit_time_ms > 0 {
            self.last_commit_time_ms = batch.commit_time_ms;
        }
    }

    /// How long since the reader handed over its last batch.
    pub(super) fn quiet_for(&self) -> Duration {
        self.last_added.elapsed()
    }

    /// The reader is working through a backlog: its last batch came from a binlog
    /// transaction committed well before `server_now_ms` (the source server's clock,
    /// which commit times are in), and more are `waiting` or it came recently (a reader
    /// that has gone quiet has caught up, however old its last transaction was).
    /// Batches waiting alone say nothing: the reader falls behind the sink for a moment
    /// on every large transaction.
    pub(super) fn active(&self, waiting: bool, server_now_ms: i64) -> bool {
        self.last_commit_time_ms > 0
            && server_now_ms - self.last_commit_time_ms > BACKLOG_LAG_MS
            && (waiting || self.last_added.elapsed() < self.quiet_after)
    }
}
