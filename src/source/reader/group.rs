//! A group's life in the reader: what the boundary logic's steps do to the rows read so
//! far, XA branches held until they resolve, parts of large groups streamed early, and
//! the transaction (with its checkpoint) a group's end hands on.

use super::{BinlogReader, MAX_TABLE_IDS, PART_BYTES, PART_ROWS};
use crate::pattern::Pattern;
use crate::source::boundary::{statement_tables, Step, Xid};
use crate::source::{Position, RowChange, RowOp, SourceError, Transaction};

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

impl BinlogReader {
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
        event_end: u64,
        timestamp_secs: u32,
    ) -> Result<Option<Transaction>, SourceError> {
        let position = || format!("{}:{}", self.at.file, event_end);
        match step {
            Step::Continue | Step::StatementDml => return Ok(None),
            Step::Begin => {
                self.changes.clear();
                self.group = GroupSize::default();
                self.group_start = self.at.clone();
                return Ok(None);
            }
            Step::Commit => {}
            Step::Rollback => {
                let inserted = self.changes.iter().find(|c| c.op == RowOp::Insert);
                if inserted.is_some() || self.group.streamed_inserts {
                    return Err(SourceError::RolledBack {
                        table: inserted.map_or_else(|| "(streamed part)".into(), |r| r.table.to_string()),
                        position: position(),
                    });
                }
                self.changes.clear();
            }
            // Parts of a group go out before its end only when it is not an XA branch;
            // had one gone out, its rows would be public before the branch commits.
            Step::XaPrepared(_) if self.group.streamed => {
                return Err(SourceError::Unaccountable {
                    position: position(),
                    reason: "an XA branch whose rows were streamed before its prepare (its group did not say it was XA)".into(),
                })
            }
            Step::XaPrepared(xid) => {
                self.xa_held_bytes += self.group.bytes;
                self.prepared.push(PreparedXa {
                    xid,
                    bytes: self.group.bytes,
                    changes: std::mem::take(&mut self.changes),
                    resume: self.group_start.clone(),
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
                    None if commit && !self.already_delivered(&self.at.at_offset(event_end)) => {
                        return Err(SourceError::XaNotSeen {
                            xid: xid.to_string(),
                            position: position(),
                        })
                    }
                    None => {
                        tracing::info!(%xid, position = %position(), commit, "XA resolution of a branch prepared before the start position: published before (commit) or nothing to publish (rollback)")
                    }
                }
            }
            Step::Unaccountable(reason) => {
                return Err(SourceError::Unaccountable {
                    position: position(),
                    reason: reason.to_string(),
                })
            }
        }
        Ok(Some(self.commit(event_end, timestamp_secs)))
    }

    /// A data change in the binlog as text: its rows are not there to publish, and no
    /// statement text can prove it left the outbox alone (a trigger, stored function,
    /// view or foreign-key cascade writes tables the statement does not name).
    pub(super) fn statement_logged(&self, sql: &[u8], schema: &str, event_end: u64) -> SourceError {
        let text = String::from_utf8_lossy(sql);
        SourceError::StatementLogged {
            names: outbox_named(sql, schema, &self.watched),
            position: format!("{}:{}", self.at.file, event_end),
            statement: text.chars().take(200).collect(),
        }
    }

    /// Ends a group at `end`. The transaction's checkpoint is `end`, unless a prepared
    /// XA branch is unresolved: then the position before the oldest such branch.
    pub(super) fn commit(&mut self, end: u64, timestamp_secs: u32) -> Transaction {
        self.payload_end = None;
        // Every group maps its own tables before its rows, so between groups the map
        // can be dropped: many tenant tables and table-cache churn would grow it forever.
        if self.table_ids.len() > MAX_TABLE_IDS {
            tracing::debug!(
                entries = self.table_ids.len(),
                "table-id map past its bound: dropped (the next transactions map their tables again)"
            );
            self.table_ids.clear();
        }
        self.at.offset = end;
        let (checkpoint, delivered_through) = match self.prepared.first() {
            Some(oldest) => (oldest.resume.clone(), Some(self.at.clone())),
            None => (self.at.clone(), None),
        };
        self.group = GroupSize::default();
        let mut changes = std::mem::take(&mut self.changes);
        if self.already_delivered(&self.at) {
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

    /// A part of a large group, once enough of it is read (never of an XA branch).
    pub(super) fn part(&mut self, timestamp_secs: u32) -> Option<Transaction> {
        let big = self.changes.len() >= PART_ROWS || self.group.pending_bytes >= PART_BYTES;
        // With a ceiling set, a transaction is held whole up to it (then refused), so
        // nothing of a refused one goes out.
        let held_whole = self.max_transaction_bytes.is_some();
        if !big || held_whole || self.group.xa || !self.boundaries.in_group() {
            return None;
        }
        self.group.pending_bytes = 0;
        if self.already_delivered(&self.group_start) {
            // A group that starts before the delivered point ends at or before it.
            self.changes.clear();
            return None;
        }
        self.group.streamed = true;
        self.group.streamed_inserts |= self.changes.iter().any(|c| c.op == RowOp::Insert);
        Some(Transaction {
            end: self.group_start.clone(),
            delivered_through: None,
            commit_time_ms: i64::from(timestamp_secs) * 1000,
            changes: std::mem::take(&mut self.changes),
            complete: false,
        })
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
