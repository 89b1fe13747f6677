//! What the source hands downstream: committed transactions, or streamed parts of
//! large ones, and their row changes.

use std::fmt;
use std::sync::Arc;

use super::{Position, RowImage, TableName};

/// The kind of row change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowOp {
    /// A new row; the only kind an outbox publishes.
    Insert,
    /// A changed row (not expected on an append-only outbox).
    Update,
    /// A removed row (outbox cleanup jobs produce these).
    Delete,
}

impl fmt::Display for RowOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RowOp::Insert => "INSERT",
            RowOp::Update => "UPDATE",
            RowOp::Delete => "DELETE",
        })
    }
}

/// One row change on a watched table.
#[derive(Debug)]
pub struct RowChange {
    /// The table changed.
    pub table: Arc<TableName>,
    /// What happened to the row.
    pub op: RowOp,
    /// The row after the change; only kept for inserts.
    pub row: Option<RowImage>,
    /// End offset of the rows event in the transaction's binlog file, for error messages.
    pub event_offset: u64,
}

/// A committed transaction — or, with `complete: false`, a part of a large one streamed
/// before its commit — with its watched row changes and where a checkpoint may go.
#[derive(Debug)]
pub struct Transaction {
    /// The checkpoint once this transaction is delivered: just past its commit, or,
    /// while a prepared XA branch is unresolved, the position before that branch (a
    /// restart must read its rows again).
    pub end: Position,
    /// Set when `end` is held before a prepared XA branch: just past this transaction's
    /// commit. A resume from `end` re-reads the branch but publishes nothing else up to
    /// here (it was delivered), so a pending branch costs no duplicates.
    pub delivered_through: Option<Position>,
    /// Commit time, milliseconds since the epoch (the server gives seconds).
    pub commit_time_ms: i64,
    /// Changes to watched tables, in binlog order; empty for unrelated transactions.
    pub changes: Vec<RowChange>,
    /// False for a part of a large transaction streamed before its commit event (its
    /// `end` is then the position before the transaction): the checkpoint moves only
    /// past complete transactions.
    pub complete: bool,
}
