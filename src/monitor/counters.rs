//! Process-wide counters, cheap to update from any stage.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use crate::source::RowOp;

#[derive(Default, Debug)]
struct Inner {
    transactions: AtomicU64,
    events_routed: AtomicU64,
    events_acked: AtomicU64,
    ignored_updates: AtomicU64,
    ignored_deletes: AtomicU64,
    checkpoints_written: AtomicU64,
    restarts: AtomicU64,
}

/// Shared counters; clones update the same values.
#[derive(Clone, Default, Debug)]
pub struct Counters(Arc<Inner>);

/// A point-in-time copy of the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Snapshot {
    /// Committed transactions read from the binlog.
    pub transactions: u64,
    /// Records handed to the sink.
    pub events_routed: u64,
    /// Records the sink acknowledged.
    pub events_acked: u64,
    /// UPDATE rows on outbox tables, ignored.
    pub ignored_updates: u64,
    /// DELETE rows on outbox tables, ignored.
    pub ignored_deletes: u64,
    /// Durable checkpoint writes.
    pub checkpoints_written: u64,
    /// Pipeline restarts after transient errors.
    pub restarts: u64,
}

impl Counters {
    /// Counts a committed transaction read.
    pub fn transaction(&self) {
        self.0.transactions.fetch_add(1, Relaxed);
    }
    /// Counts records handed to the sink.
    pub fn routed(&self, n: u64) {
        self.0.events_routed.fetch_add(n, Relaxed);
    }
    /// Counts records acknowledged by the sink.
    pub fn acked(&self, n: u64) {
        self.0.events_acked.fetch_add(n, Relaxed);
    }
    /// Counts ignored rows of an operation; returns the new total for that operation.
    pub fn ignored(&self, op: RowOp, n: u64) -> u64 {
        let c = match op {
            RowOp::Update => &self.0.ignored_updates,
            RowOp::Delete => &self.0.ignored_deletes,
            RowOp::Insert => return 0,
        };
        c.fetch_add(n, Relaxed) + n
    }
    /// Counts a durable checkpoint write.
    pub fn checkpoint_written(&self) {
        self.0.checkpoints_written.fetch_add(1, Relaxed);
    }
    /// Counts a pipeline restart.
    pub fn restart(&self) {
        self.0.restarts.fetch_add(1, Relaxed);
    }
    /// Reads all counters.
    pub fn snapshot(&self) -> Snapshot {
        let i = &self.0;
        Snapshot {
            transactions: i.transactions.load(Relaxed),
            events_routed: i.events_routed.load(Relaxed),
            events_acked: i.events_acked.load(Relaxed),
            ignored_updates: i.ignored_updates.load(Relaxed),
            ignored_deletes: i.ignored_deletes.load(Relaxed),
            checkpoints_written: i.checkpoints_written.load(Relaxed),
            restarts: i.restarts.load(Relaxed),
        }
    }
}
