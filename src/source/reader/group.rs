//! A group's life in the reader: what the boundary logic's steps do to the rows read so
//! far, XA branches held until they resolve, parts of large groups streamed early, and
//! the transaction (with its checkpoint) a group's end hands on.

use crate::pattern::Pattern;
use crate::source::boundary::Step;
use crate::source::statement::{statement_tables, Xid};
use crate::source::{Position, RowChange, RowOp, SourceError, Transaction};

/// Rows in a transaction before a part of it is streamed: a transaction of any size then
/// holds at most this much in the reader, and the pipeline's in-flight window (records
/// and bytes) holds inside it too.
const PART_ROWS: usize = 2_000;
/// Row-event bytes before a part is streamed.
const PART_BYTES: u64 = 4 << 20;

/// A prepared XA branch waiting for its `XA COMMIT` / `XA ROLLBACK`.
pub(super) struct PreparedXa {
    xid: Xid,
    /// Its rows, published when it commits.
    changes: Vec<RowChange>,
    /// Their row-event bytes (counted against `source.max_xa_held_bytes`).
    bytes: u64,
    /// The position just before its prepare group: a restart before the branch is
    /// resolved must read the group again, so no checkpoint may pass this point.
    resume: Position,
}

/// How much of the current group has been read, and whether parts of it went out.
#[derive(Debug, Default)]
pub(super) struct GroupSize {
    /// A prepared XA branch: its rows wait for `XA COMMIT`, never streamed.
    pub(super) xa: bool,
    /// Row-event bytes of watched tables in the group.
    pub(super) bytes: u64,
    /// Of those, not yet streamed.
    pub(super) pending_bytes: u64,
    /// Parts already streamed, and whether they held inserts.
    streamed: bool,
    streamed_inserts: bool,
}

/// The group being read and what outlives it: prepared XA branches, the limits on what
/// may be held, and how far an earlier run delivered.
pub(super) struct Group {
    /// Row changes of watched tables read in the group (not yet streamed).
    pub(super) changes: Vec<RowChange>,
    /// How much of it has been read.
    pub(super) size: GroupSize,
    /// The position before the group (its GTID not yet applied).
    pub(super) start: Position,
    /// Prepared XA branches not yet resolved, oldest first.
    prepared: Vec<PreparedXa>,
    /// Outbox row bytes of the prepared branches held now.
    xa_held_bytes: u64,
    /// `source.max_transaction_bytes`.
    pub(super) max_transaction_bytes: Option<u64>,
    /// `source.max_xa_held_bytes`: outbox row bytes of prepared XA branches held until
    /// their `XA COMMIT`, all branches together.
    pub(super) max_xa_held_bytes: u64,
    /// Nothing ending at or before it is published (a checkpoint's `delivered_through`).
    pub(super) delivered_through: Option<Position>,
}

impl Group {
    /// No group yet, at `start`.
    pub(super) fn new(start: Position) -> Self {
        Self {
            changes: Vec::new(),
            size: GroupSize::default(),
            start,
            prepared: Vec::new(),
            xa_held_bytes: 0,
            max_transaction_bytes: None,
            max_xa_held_bytes: u64::MAX,
            delivered_through: None,
        }
    }

    /// Counts a rows event of `bytes` against the limits, before its rows are decoded.
    pub(super) fn admit(&mut self, bytes: u64) -> Result<(), SourceError> {
        self.size.bytes += bytes;
        self.size.pending_bytes += bytes;
        if let Some(limit) = self.max_transaction_bytes {
            if self.size.bytes > limit {
                return Err(SourceError::TransactionTooLarge {
                    position: self.start.to_string(),
                    limit,
                });
            }
        }
        if self.size.xa && self.xa_held_bytes + self.size.bytes > self.max_xa_held_bytes {
            return Err(SourceError::XaTooLarge {
                position: self.start.to_string(),
                held: self.xa_held_bytes + self.size.bytes,
                limit: self.max_xa_held_bytes,
            });
        }
        Ok(())
    }

    /// True while re-reading what a checkpoint says was delivered.
    pub(super) fn already_delivered(&self, position: &Position) -> bool {
        self.delivered_through
            .as_ref()
            .is_some_and(|through| through.includes(position) == Some(true))
    }

    /// Acts on what the boundary logic made of an event.
    pub(super) fn apply(
        &mut self,
        step: Step,
        at: &mut Position,
        event_end: u64,
        timestamp_secs: u32,
    ) -> Result<Option<Transaction>, SourceError> {
        // Built only for an error or a log line: no allocation per event.
        let position = |at: &Position| format!("{}:{event_end}", at.file);
        match step {
            Step::Continue | Step::StatementDml => return Ok(None),
            Step::Begin => {
                self.changes.clear();
                self.size = GroupSize::default();
                self.start = at.clone();
                return Ok(None);
            }
            Step::Commit => {}
            Step::Rollback => {
                let inserted = self.changes.iter().find(|c| c.op == RowOp::Insert);
                if inserted.is_some() || self.size.streamed_inserts {
                    return Err(SourceError::RolledBack {
                        table: inserted.map_or_else(|| "(streamed part)".into(), |r| r.table.to_string()),
                        position: position(at),
                    });
                }
                self.changes.clear();
            }
            // Parts of a group go out before its end only when it is not an XA branch;
            // had one gone out, its rows would be public before the branch commits.
            Step::XaPrepared(_) if self.size.streamed => {
                return Err(SourceError::Unaccountable {
                    position: position(at),
                    reason: "an XA branch whose rows were streamed before its prepare (its group did not say it was XA)".into(),
                })
            }
            Step::XaPrepared(xid) => {
                self.xa_held_bytes += self.size.bytes;
                self.prepared.push(PreparedXa {
                    xid,
                    bytes: self.size.bytes,
                    changes: std::mem::take(&mut self.changes),
                    resume: self.start.clone(),
                });
            }
            Step::XaCommitted(ref xid) | Step::XaRolledBack(ref xid) => {
                let commit = matches!(step, Step::XaCommitted(_));
                match self.prepared.iter().position(|p| p.xid == *xid) {
                    Some(at) => {
                        let branch = self.prepared.remove(at);
                        self.xa_held_bytes -= branch.bytes;
                        if commit {
                            let mut changes = branch.changes;
                            changes.append(&mut self.changes);
                            self.changes = changes;
                        }
                    }
                    // A checkpoint never passes an unresolved PREPARE, and a first start
                    // or an operator's move refuses while branches are prepared: a
                    // commit of a branch the reader never saw prepared means its rows
                    // were never read (a move forced past it, a checkpoint from before
                    // XA support). Nothing says they were delivered.
                    // Unless the checkpoint says delivery got past this commit: a resume
                    // held before a later branch's PREPARE re-reads commits of earlier
                    // branches it published the first time.
                    None if commit && !self.already_delivered(&at.at_offset(event_end)) => {
                        return Err(SourceError::XaNotSeen {
                            xid: xid.to_string(),
                            position: position(at),
                        })
                    }
                    None => {
                        tracing::info!(%xid, position = %position(at), commit, "XA resolution of a branch prepared before the start position: published before (commit) or nothing to publish (rollback)")
                    }
                }
            }
            Step::Unaccountable(reason) => {
                return Err(SourceError::Unaccountable {
                    position: position(at),
                    reason: reason.to_string(),
                })
            }
        }
        Ok(Some(self.commit(at, event_end, timestamp_secs)))
    }

    /// Ends a group at `end`. The transaction's checkpoint is `end`, unless a prepared
    /// XA branch is unresolved: then the position before the oldest such branch.
    pub(super) fn commit(
        &mut self,
        at: &mut Position,
        end: u64,
        timestamp_secs: u32,
    ) -> Transaction {
        at.offset = end;
        let (checkpoint, delivered_through) = match self.prepared.first() {
            Some(oldest) => (oldest.resume.clone(), Some(at.clone())),
            None => (at.clone(), None),
        };
        self.size = GroupSize::default();
        let mut changes = std::mem::take(&mut self.changes);
        if self.already_delivered(at) {
            // Re-read only for the prepared branches before it: delivered before.
            changes.clear();
        }
        Transaction {
            end: checkpoint,
            delivered_through,
            commit_time_ms: i64::from(timestamp_secs) * 1000,
            changes,
            complete: true,
        }
    }

    /// A part of a large group, once enough of it is read (never of an XA branch);
    /// `in_group` while the group is open.
    pub(super) fn part(&mut self, in_group: bool, timestamp_secs: u32) -> Option<Transaction> {
        let big = self.changes.len() >= PART_ROWS || self.size.pending_bytes >= PART_BYTES;
        // With a ceiling set, a transaction is held whole up to it (then refused), so
        // nothing of a refused one goes out.
        let held_whole = self.max_transaction_bytes.is_some();
        if !big || held_whole || self.size.xa || !in_group {
            return None;
        }
        self.size.pending_bytes = 0;
        if self.already_delivered(&self.start) {
            // A group that starts before the delivered point ends at or before it.
            self.changes.clear();
            return None;
        }
        self.size.streamed = true;
        self.size.streamed_inserts |= self.changes.iter().any(|c| c.op == RowOp::Insert);
        Some(Transaction {
            end: self.start.clone(),
            delivered_through: None,
            commit_time_ms: i64::from(timestamp_secs) * 1000,
            changes: std::mem::take(&mut self.changes),
            complete: false,
        })
    }
}

/// A data change in the binlog as text, at `position`: its rows are not there to
/// publish, and no statement text can prove it left the outbox alone (a trigger, stored
/// function, view or foreign-key cascade writes tables the statement does not name).
pub(super) fn statement_logged(
    sql: &[u8],
    schema: &str,
    watched: &[Pattern],
    position: String,
) -> SourceError {
    let text = String::from_utf8_lossy(sql);
    SourceError::StatementLogged {
        names: outbox_named(sql, schema, watched),
        position,
        statement: text.chars().take(200).collect(),
    }
}

/// `; it writes outbox table db.t` when the table the statement writes (its first name)
/// is watched, `; it names outbox table db.t` when another name in it is, else nothing.
fn outbox_named(sql: &[u8], schema: &str, watched: &[Pattern]) -> String {
    let names = statement_tables(sql, schema);
    let is_watched = |t: &String| watched.iter().any(|p| p.matches(t));
    match names.iter().position(is_watched) {
        Some(0) => format!("; it writes outbox table {}", names[0]),
        Some(i) => format!("; it names outbox table {}", names[i]),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_names_the_outbox_it_writes_never_its_first_word() {
        let everything_in_test = [Pattern::new("test.*")];
        assert_eq!(
            outbox_named(
                b"INSERT INTO outbox (event_id) VALUES ('e')",
                "test",
                &everything_in_test
            ),
            "; it writes outbox table test.outbox"
        );
        let outbox = [Pattern::new("shop.outbox")];
        assert_eq!(
            outbox_named(
                b"UPDATE orders SET n = (SELECT COUNT(*) FROM shop.outbox)",
                "shop",
                &outbox
            ),
            "; it names outbox table shop.outbox"
        );
        assert_eq!(outbox_named(b"DELETE FROM orders", "shop", &outbox), "");
    }
}
