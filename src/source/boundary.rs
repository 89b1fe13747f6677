//! Transaction boundaries: what a binlog event means for the group it belongs to.
//!
//! Pure (no I/O) and total: any bytes give an answer, never a panic (fuzzed by
//! `fuzz/fuzz_targets/boundary.rs`). The reader feeds it every event that can open or
//! close a group and acts on the [`Step`] it returns.
//!
//! Shapes handled (MariaDB and MySQL):
//! - `GTID … XID` (InnoDB), `GTID BEGIN … COMMIT`, `BEGIN … COMMIT` without GTIDs;
//! - `… ROLLBACK` (a group with non-transactional changes that rolled back);
//! - a standalone statement (DDL) outside a group;
//! - XA: `[XA START] … XA END, XA_PREPARE` then, in a later group, `XA COMMIT xid` or
//!   `XA ROLLBACK xid`; MySQL's `XA COMMIT … ONE PHASE` is an XA_PREPARE with the
//!   one-phase flag, MariaDB's is an ordinary group.

use super::statement::{classify, Statement, Xid};

/// Events that open or close groups.
#[derive(Debug)]
pub enum Event<'a> {
    /// A GTID event (MariaDB, MySQL, anonymous): a new group. `standalone` when the
    /// group is one statement with no closing event (MariaDB's DDL flag).
    Gtid { standalone: bool },
    /// MySQL's GTID event (or anonymous GTID): a new group that is either `BEGIN` …
    /// `COMMIT`/XID or one statement with no closing event (DDL), told apart by the
    /// group's first query.
    MySqlGtid,
    /// A query event's statement.
    Query(&'a [u8]),
    /// An XID event: InnoDB's commit.
    Xid,
    /// An XA_PREPARE_LOG_EVENT body.
    XaPrepare(&'a [u8]),
}

/// What the reader does after an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do (inside a group).
    Continue,
    /// A new group starts: forget rows collected so far (none are pending: every group
    /// ends before the next begins).
    Begin,
    /// The group committed: publish its rows.
    Commit,
    /// The group ended in ROLLBACK: its transactional rows never committed.
    Rollback,
    /// The group is a prepared XA branch: keep its rows until it is resolved.
    XaPrepared(Xid),
    /// A prepared XA branch committed: publish the rows kept for it.
    XaCommitted(Xid),
    /// A prepared XA branch rolled back: drop the rows kept for it.
    XaRolledBack(Xid),
    /// A DML statement logged as a statement: the reader checks its tables.
    StatementDml,
    /// An event the router cannot place; the reader stops with this reason.
    Unaccountable(&'static str),
}

/// Tracks whether the reader is inside a group.
#[derive(Debug, Default, Clone)]
pub struct Boundaries {
    in_group: bool,
    /// After a MySQL GTID, before the group's first statement.
    awaiting_first_statement: bool,
}

impl Boundaries {
    /// True inside a group that has not ended yet.
    pub fn in_group(&self) -> bool {
        self.in_group
    }

    /// The meaning of one event.
    pub fn step(&mut self, event: &Event<'_>) -> Step {
        let first_after_mysql_gtid = std::mem::take(&mut self.awaiting_first_statement);
        match event {
            Event::Gtid { standalone } => {
                self.in_group = !standalone;
                Step::Begin
            }
            Event::MySqlGtid => {
                self.in_group = true;
                self.awaiting_first_statement = true;
                Step::Begin
            }
            // A DDL right after MySQL's GTID is the whole group: it commits itself.
            Event::Query(sql) if first_after_mysql_gtid && classify(sql) == Statement::Other => {
                self.end(Step::Commit)
            }
            Event::Xid => self.end(Step::Commit),
            Event::XaPrepare(body) => match Xid::from_prepare_event(body) {
                Some((_, true)) => self.end(Step::Commit),
                Some((xid, false)) => self.end(Step::XaPrepared(xid)),
                None => Step::Unaccountable("XA_PREPARE event too short to hold its XA id"),
            },
            Event::Query(sql) => match classify(sql) {
                Statement::Begin | Statement::XaStart => {
                    let was_open = self.in_group;
                    self.in_group = true;
                    // After a GTID event the group is already open: same group.
                    if was_open {
                        Step::Continue
                    } else {
                        Step::Begin
                    }
                }
                Statement::Commit => self.end(Step::Commit),
                Statement::Rollback => self.end(Step::Rollback),
                Statement::XaCommit(xid) => self.end(Step::XaCommitted(xid)),
                Statement::XaRollback(xid) => self.end(Step::XaRolledBack(xid)),
                Statement::XaUnreadable => {
                    Step::Unaccountable("XA statement whose XA id cannot be read")
                }
                Statement::Savepoint | Statement::XaEnd => Step::Continue,
                Statement::Dml => Step::StatementDml,
                // DDL and other single statements are transactions of their own.
                Statement::Other if !self.in_group => Step::Commit,
                Statement::Other => Step::Continue,
            },
        }
    }

    fn end(&mut self, step: Step) -> Step {
        self.in_group = false;
        self.awaiting_first_statement = false;
        step
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(events: &[Event<'_>]) -> Vec<Step> {
        let mut b = Boundaries::default();
        events.iter().map(|e| b.step(e)).collect()
    }

    #[test]
    fn mysql_gtid_groups_end_at_their_commit_or_their_one_statement() {
        use Step::*;
        let gtid = Event::MySqlGtid;
        // A DDL is its own group: no COMMIT or XID follows it.
        assert_eq!(
            steps(&[gtid, Event::Query(b"CREATE TABLE t (id INT)")]),
            [Begin, Commit]
        );
        let gtid = Event::MySqlGtid;
        assert_eq!(
            steps(&[
                gtid,
                Event::Query(b"BEGIN"),
                Event::Query(b"SET @a = 1"),
                Event::Xid
            ]),
            [Begin, Continue, Continue, Commit]
        );
        let gtid = Event::MySqlGtid;
        assert_eq!(
            steps(&[
                gtid,
                Event::Query(b"XA START X'78',X'',1"),
                Event::Query(b"XA END X'78',X'',1")
            ]),
            [Begin, Continue, Continue]
        );
        let gtid = Event::MySqlGtid;
        assert_eq!(
            steps(&[gtid, Event::Query(b"INSERT INTO t VALUES (1)")]),
            [Begin, StatementDml]
        );
    }

    #[test]
    fn plain_groups() {
        use Step::*;
        let gtid = Event::Gtid { standalone: false };
        assert_eq!(steps(&[gtid, Event::Xid]), [Begin, Commit]);
        assert_eq!(
            steps(&[Event::Query(b"BEGIN"), Event::Query(b"COMMIT")]),
            [Begin, Commit]
        );
        // MySQL: GTID, then BEGIN opens the same group.
        assert_eq!(
            steps(&[
                Event::Gtid { standalone: false },
                Event::Query(b"BEGIN"),
                Event::Xid
            ]),
            [Begin, Continue, Commit]
        );
        assert_eq!(
            steps(&[
                Event::Gtid { standalone: true },
                Event::Query(b"CREATE TABLE t (a INT)")
            ]),
            [Begin, Commit]
        );
        assert_eq!(
            steps(&[Event::Query(b"BEGIN"), Event::Query(b"ROLLBACK")]),
            [Begin, Rollback]
        );
        assert_eq!(
            steps(&[
                Event::Query(b"BEGIN"),
                Event::Query(b"INSERT INTO shop.outbox VALUES (1)"),
                Event::Query(b"COMMIT")
            ]),
            [Begin, StatementDml, Commit]
        );
    }

    fn prepare_body(one_phase: bool, gtrid: &[u8], bqual: &[u8]) -> Vec<u8> {
        let mut b = vec![u8::from(one_phase)];
        b.extend(1u32.to_le_bytes());
        b.extend((gtrid.len() as u32).to_le_bytes());
        b.extend((bqual.len() as u32).to_le_bytes());
        b.extend(gtrid);
        b.extend(bqual);
        b
    }

    #[test]
    fn xa_shapes_of_mariadb_and_mysql() {
        use Step::*;
        let x = Xid::new(1, b"x", b"");
        assert_eq!(x.to_string(), "X'78',X'',1");
        let prepare = prepare_body(false, b"x", b"");
        // MariaDB: GTID(prepared XA), rows, XA END, XA_PREPARE; later GTID, XA COMMIT.
        assert_eq!(
            steps(&[
                Event::Gtid { standalone: false },
                Event::Query(b"XA END X'78',X'',1"),
                Event::XaPrepare(&prepare),
                Event::Gtid { standalone: false },
                Event::Query(b"XA COMMIT X'78',X'',1"),
            ]),
            [
                Begin,
                Continue,
                XaPrepared(x.clone()),
                Begin,
                XaCommitted(x.clone())
            ]
        );
        // MySQL: GTID, XA START, rows, XA END, XA_PREPARE; GTID, XA ROLLBACK.
        assert_eq!(
            steps(&[
                Event::Gtid { standalone: false },
                Event::Query(b"XA START X'78',X'',1"),
                Event::Query(b"XA END X'78',X'',1"),
                Event::XaPrepare(&prepare),
                Event::Gtid { standalone: false },
                Event::Query(b"XA ROLLBACK X'78',X'',1"),
            ]),
            [
                Begin,
                Continue,
                Continue,
                XaPrepared(x.clone()),
                Begin,
                XaRolledBack(x.clone())
            ]
        );
        // MySQL without GTIDs: XA START opens the group.
        assert_eq!(steps(&[Event::Query(b"XA START X'78',X'',1")]), [Begin]);
        // MySQL's XA COMMIT … ONE PHASE: an XA_PREPARE flagged one-phase commits.
        let one_phase = prepare_body(true, b"x", b"");
        assert_eq!(
            steps(&[
                Event::Gtid { standalone: false },
                Event::XaPrepare(&one_phase)
            ]),
            [Begin, Commit]
        );
        // The same id however the client spelt it.
        assert_eq!(
            classify(b"XA COMMIT x'4A4b',X'01',7"),
            Statement::XaCommit(Xid::new(7, b"JK", b"\x01"))
        );
        assert_eq!(
            classify(b"XA COMMIT 'JK',X'01',7"),
            Statement::XaCommit(Xid::new(7, b"JK", b"\x01"))
        );
        assert_eq!(classify(b"XA COMMIT garbage"), Statement::XaUnreadable);
        assert!(matches!(
            steps(&[Event::XaPrepare(&prepare[..5])])[0],
            Unaccountable(_)
        ));
        assert_eq!(
            Xid::from_prepare_event(&prepare_body(false, b"g", b"b")),
            Some((Xid::new(1, b"g", b"b"), false))
        );
        // Lengths that do not fit the body.
        let mut bad = prepare_body(false, b"g", b"b");
        bad[5..9].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Xid::from_prepare_event(&bad), None);
    }
}
