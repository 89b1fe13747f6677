//! The binlog stream, cut into committed transactions.
//!
//! A transaction ends at an XID event (InnoDB), a `COMMIT`/`ROLLBACK` query event, or is
//! a single statement (DDL) outside `BEGIN`. Rotate events keep the file name current;
//! heartbeats only prove the connection is alive. Rows are decoded for watched tables
//! only, so unrelated traffic costs little but still advances the position.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use mysql_async::binlog::events::{Event, EventData, RowsEventData, TransactionPayloadEvent};
use mysql_async::binlog::EventType;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn};

use super::boundary::{statement_tables, Boundaries, Event as Boundary, Step, Xid};
use super::mariadb;
use super::row::TableLayout;
use super::server::Flavor;
use super::{
    BinlogFile, GtidState, Position, RowChange, RowOp, SourceError, TableName, Transaction,
};
use crate::pattern::Pattern;

/// A table id as its last TABLE_MAP event described it.
struct MappedTable {
    /// The event's bytes: servers repeat the same map before every transaction, and an
    /// identical one needs no new layout.
    raw: Vec<u8>,
    /// `None` for tables that are not watched.
    layout: Option<Arc<TableLayout>>,
}

/// A prepared XA branch waiting for its `XA COMMIT` / `XA ROLLBACK`.
struct PreparedXa {
    xid: Xid,
    /// Its rows, published when it commits.
    changes: Vec<RowChange>,
    /// The position just before its prepare group: a restart before the branch is
    /// resolved must read the group again, so no checkpoint may pass this point.
    resume: Position,
}

/// Where events come from.
enum EventSource {
    /// The server's replication stream.
    Server(BinlogStream),
    /// Events read from a binlog file (unit tests: real servers' bytes).
    #[cfg(test)]
    Recorded(std::vec::IntoIter<std::io::Result<Event>>),
}

impl EventSource {
    async fn next(&mut self) -> Option<Result<Event, mysql_async::Error>> {
        match self {
            EventSource::Server(stream) => stream.next().await,
            #[cfg(test)]
            EventSource::Recorded(events) => events.next().map(|e| e.map_err(Into::into)),
        }
    }
}

/// Reads committed transactions from a binlog stream.
pub struct BinlogReader {
    stream: EventSource,
    /// Position of the last event read; `offset` only moves at transaction ends.
    at: Position,
    /// Outbox table names or patterns (`tenant_*.outbox`).
    watched: Vec<Pattern>,
    /// Table id → the last TABLE_MAP for it, and the layout when the table is watched.
    table_ids: HashMap<u64, MappedTable>,
    read_timeout: Duration,
    /// Joined by GTID state rather than file and offset.
    by_gtid: bool,
    seen_format_description: bool,
    checksums_on: bool,
    /// Where groups begin and end.
    boundaries: Boundaries,
    /// The position before the current group (its GTID not yet applied).
    group_start: Position,
    /// Prepared XA branches not yet resolved, oldest first.
    prepared: Vec<PreparedXa>,
    /// End offset of the current MySQL 8 compressed transaction payload, whose inner
    /// events carry log_pos 0.
    payload_end: Option<u64>,
    changes: Vec<RowChange>,
    /// The current group, for streaming it in parts.
    group: GroupSize,
    /// `source.max_transaction_bytes`.
    max_transaction_bytes: Option<u64>,
    /// Nothing ending at or before it is published (see `with_delivered_through`).
    delivered_through: Option<Position>,
}

/// Rows in a transaction before a part of it is streamed: a transaction of any size then
/// holds at most this much in the reader, and the pipeline's in-flight window (records
/// and bytes) holds inside it too.
const PART_ROWS: usize = 2_000;
/// Table ids remembered between transactions before the map is dropped.
const MAX_TABLE_IDS: usize = 4096;
/// Row-event bytes before a part is streamed.
const PART_BYTES: u64 = 4 << 20;

/// How much of the current group has been read, and whether parts of it went out.
#[derive(Debug, Default)]
struct GroupSize {
    /// A prepared XA branch: its rows wait for `XA COMMIT`, never streamed.
    xa: bool,
    /// Row-event bytes of watched tables in the group.
    bytes: u64,
    /// Of those, not yet streamed.
    pending_bytes: u64,
    /// Parts already streamed, and whether they held inserts.
    streamed: bool,
    streamed_inserts: bool,
}

impl BinlogReader {
    /// Registers as a replica with `server_id` and requests the binlog from `start`: by
    /// its GTID state when `by_gtid` (MariaDB connect state or MySQL GTID set), else by
    /// file and offset.
    pub async fn start(
        mut conn: Conn,
        flavor: Flavor,
        server_id: u32,
        start: Position,
        by_gtid: bool,
        watched: &[Pattern],
        heartbeat: Duration,
    ) -> Result<Self, SourceError> {
        let checksum = super::server::variable(&mut conn, "binlog_checksum").await?;
        let checksums_on = !checksum.unwrap_or_default().eq_ignore_ascii_case("NONE");
        if flavor == Flavor::MariaDb {
            // Without it the server rewrites GTID events as `BEGIN` queries.
            exec(&mut conn, "SET @mariadb_slave_capability=4").await?;
        }
        let period_ns = heartbeat.as_nanos().min(u64::MAX as u128) as u64;
        set_variable(&mut conn, "SET @master_heartbeat_period", period_ns).await?;
        let by_gtid = by_gtid && !start.gtid.is_empty();
        let request = match (&start.gtid, by_gtid) {
            (GtidState::MariaDb(state), true) => {
                // The server finds the place after these GTIDs in its own binlog, whatever
                // its file names: this is what makes a failover to a replica work.
                set_variable(&mut conn, "SET @slave_connect_state", format!("'{state}'")).await?;
                exec(&mut conn, "SET @slave_gtid_strict_mode=0").await?;
                exec(&mut conn, "SET @slave_gtid_ignore_duplicates=0").await?;
                BinlogStreamRequest::new(server_id)
                    .with_filename(b"")
                    .with_pos(4)
            }
            // MySQL sends every transaction not in the set (COM_BINLOG_DUMP_GTID).
            (GtidState::MySql(set), true) => BinlogStreamRequest::new(server_id)
                .with_gtid()
                .with_filename(b"")
                .with_pos(4)
                .with_gtid_set(set.to_sids()),
            _ => BinlogStreamRequest::new(server_id)
                .with_filename(start.file.name().as_bytes())
                .with_pos(start.offset),
        };
        let stream = conn
            .get_binlog_stream(request)
            .await
            .map_err(|e| SourceError::stream(&start, e))?;
        Ok(Self::reading(
            EventSource::Server(stream),
            start,
            watched,
            heartbeat,
            by_gtid,
            checksums_on,
        ))
    }

    /// A reader of `stream` from `start` (see `start`).
    fn reading(
        stream: EventSource,
        start: Position,
        watched: &[Pattern],
        heartbeat: Duration,
        by_gtid: bool,
        checksums_on: bool,
    ) -> Self {
        Self {
            stream,
            group_start: start.clone(),
            at: start,
            watched: watched.to_vec(),
            table_ids: HashMap::new(),
            read_timeout: heartbeat * 3 + Duration::from_secs(1),
            by_gtid,
            seen_format_description: false,
            checksums_on,
            boundaries: Boundaries::default(),
            prepared: Vec::new(),
            payload_end: None,
            changes: Vec::new(),
            group: GroupSize::default(),
            max_transaction_bytes: None,
            delivered_through: None,
        }
    }

    /// Publishes nothing that ends at or before `through` (a checkpoint's
    /// `delivered_through`: the resume position was held before a prepared XA branch,
    /// and what follows it up to here was delivered); XA branches are still collected.
    pub fn with_delivered_through(mut self, through: Option<Position>) -> Self {
        self.delivered_through = through;
        self
    }

    /// True while re-reading what a checkpoint says was delivered.
    fn already_delivered(&self, position: &Position) -> bool {
        self.delivered_through
            .as_ref()
            .is_some_and(|through| through.includes(position) == Some(true))
    }

    /// Stops at a transaction with more outbox row bytes than `limit`, holding each one
    /// whole up to it (unset: transactions stream in parts).
    pub fn with_max_transaction_bytes(mut self, limit: Option<u64>) -> Self {
        self.max_transaction_bytes = limit;
        self
    }

    /// The position of the last completed transaction read.
    pub fn position(&self) -> &Position {
        &self.at
    }

    /// Waits for the next committed transaction.
    pub async fn next_transaction(&mut self) -> Result<Transaction, SourceError> {
        loop {
            let event = match tokio::time::timeout(self.read_timeout, self.stream.next()).await {
                Err(_) => {
                    return Err(SourceError::ReadTimeout {
                        position: self.at.to_string(),
                        secs: self.read_timeout.as_secs(),
                    })
                }
                Ok(None) => {
                    return Err(SourceError::StreamEnded {
                        position: self.at.to_string(),
                    })
                }
                Ok(Some(Err(e))) => return Err(SourceError::stream(&self.at, e)),
                Ok(Some(Ok(event))) => event,
            };
            if let Some(txn) = self.handle(event)? {
                return Ok(txn);
            }
        }
    }

    fn decode_error(&self, event_end: u64, reason: impl ToString) -> SourceError {
        SourceError::Decode {
            position: format!("{}:{}", self.at.file, event_end),
            reason: reason.to_string(),
        }
    }

    /// Handles one event; returns a transaction when this event completed one.
    fn handle(&mut self, event: Event) -> Result<Option<Transaction>, SourceError> {
        // MariaDB's compressed events (log_bin_compress) read as the events they compress.
        let event = match mariadb::uncompressed(&event) {
            None => event,
            Some(Ok(plain)) => plain,
            Some(Err(reason)) => {
                let end = u64::from(event.header().log_pos());
                return Err(self.decode_error(end, reason));
            }
        };
        let header = event.header();
        let raw_type = header.event_type_raw();
        // Events inside a compressed payload carry log_pos 0: they end where it ends.
        let event_end = match header.log_pos() {
            0 => self.payload_end.unwrap_or(self.at.offset),
            p => u64::from(p),
        };
        match raw_type {
            mariadb::GTID_EVENT => {
                let gtid = mariadb::parse_gtid(event.data(), header.server_id())
                    .ok_or_else(|| self.decode_error(event_end, "short MariaDB GTID event"))?;
                let step = self.boundaries.step(&Boundary::Gtid {
                    standalone: gtid.standalone,
                });
                self.apply(step, event_end, header.timestamp())?;
                self.group.xa = gtid.prepared_xa;
                self.at.gtid.apply_mariadb(gtid.gtid);
                return Ok(None);
            }
            mariadb::GTID_LIST_EVENT => {
                let list = mariadb::parse_gtid_list(event.data())
                    .ok_or_else(|| self.decode_error(event_end, "short MariaDB GTID list event"))?;
                for gtid in list {
                    self.at.gtid.apply_mariadb(gtid);
                }
                return Ok(None);
            }
            mariadb::ANNOTATE_ROWS_EVENT | mariadb::BINLOG_CHECKPOINT_EVENT => return Ok(None),
            mariadb::XA_PREPARE_LOG_EVENT => {
                let step = self.boundaries.step(&Boundary::XaPrepare(event.data()));
                return self.apply(step, event_end, header.timestamp());
            }
            _ => {}
        }
        let Ok(event_type) = header.event_type() else {
            // An event type neither library nor router knows: it may carry rows, so
            // skipping it could lose data.
            return Err(
                self.decode_error(event_end, format!("unknown binlog event type {raw_type}"))
            );
        };
        match event_type {
            // Rotation happens between transactions: moving the position to the new file
            // keeps a quiet router from pinning the old one until it expires.
            EventType::ROTATE_EVENT
                if self.rotate(&event, header.log_pos())?
                    && !self.boundaries.in_group()
                    && self.changes.is_empty() =>
            {
                return Ok(Some(self.commit(self.at.offset, header.timestamp())));
            }
            EventType::FORMAT_DESCRIPTION_EVENT => self.seen_format_description = true,
            EventType::GTID_EVENT | EventType::GTID_TAGGED_LOG_EVENT => {
                let step = self.boundaries.step(&Boundary::MySqlGtid);
                self.apply(step, event_end, header.timestamp())?;
                // Decoded only when a GTID set is kept (see `GtidState::apply_mysql`).
                if matches!(self.at.gtid, GtidState::MySql(_)) {
                    let Some(EventData::GtidEvent(gtid)) = self.read(&event, event_end)? else {
                        return Err(self.decode_error(event_end, "MySQL GTID event did not decode"));
                    };
                    self.at.gtid.apply_mysql(&gtid);
                }
            }
            EventType::ANONYMOUS_GTID_EVENT => {
                let step = self.boundaries.step(&Boundary::MySqlGtid);
                self.apply(step, event_end, header.timestamp())?;
            }
            EventType::TRANSACTION_PAYLOAD_EVENT => {
                // mysql_async expands the payload into the events that follow, but a
                // payload that does not decompress to its stated size becomes no events
                // at all, without a word: the transaction would be skipped.
                let payload = event
                    .read_event::<TransactionPayloadEvent<'_>>()
                    .map_err(|e| {
                        self.decode_error(event_end, format!("compressed transaction: {e}"))
                    })?;
                check_payload(&payload).map_err(|e| {
                    self.decode_error(event_end, format!("compressed transaction: {e}"))
                })?;
                self.payload_end = Some(event_end);
            }
            EventType::TABLE_MAP_EVENT => self.table_map(&event, event_end)?,
            EventType::WRITE_ROWS_EVENT
            | EventType::WRITE_ROWS_EVENT_V1
            | EventType::UPDATE_ROWS_EVENT
            | EventType::UPDATE_ROWS_EVENT_V1
            | EventType::PARTIAL_UPDATE_ROWS_EVENT
            | EventType::DELETE_ROWS_EVENT
            | EventType::DELETE_ROWS_EVENT_V1 => {
                self.rows(&event, event_end)?;
                if let Some(part) = self.part(header.timestamp()) {
                    return Ok(Some(part));
                }
            }
            EventType::XID_EVENT => {
                let step = self.boundaries.step(&Boundary::Xid);
                return self.apply(step, event_end, header.timestamp());
            }
            EventType::QUERY_EVENT => {
                let Some(EventData::QueryEvent(q)) = self.read(&event, event_end)? else {
                    return Err(self.decode_error(event_end, "QUERY event did not decode"));
                };
                let sql = q.query_raw();
                let xa_start = super::boundary::classify(sql) == super::boundary::Statement::XaStart;
                let step = self.boundaries.step(&Boundary::Query(sql));
                if step == Step::StatementDml {
                    return Err(self.statement_logged(sql, &q.schema(), event_end));
                }
                let done = self.apply(step, event_end, header.timestamp());
                // MySQL opens an XA branch's group with `XA START` (MariaDB flags its GTID).
                self.group.xa |= xa_start;
                return done;
            }
            // LOAD DATA logged as a statement: the file travels in blocks, then the
            // statement that loads it. No rows: a replica re-runs it.
            EventType::BEGIN_LOAD_QUERY_EVENT | EventType::APPEND_BLOCK_EVENT => {}
            EventType::EXECUTE_LOAD_QUERY_EVENT => {
                let Some(EventData::ExecuteLoadQueryEvent(q)) = self.read(&event, event_end)? else {
                    return Err(self.decode_error(event_end, "EXECUTE_LOAD_QUERY event did not decode"));
                };
                return Err(self.statement_logged(q.query_raw(), &q.schema(), event_end));
            }
            // LOAD DATA as servers before MySQL 5.0.3 logged it.
            EventType::LOAD_EVENT
            | EventType::NEW_LOAD_EVENT
            | EventType::CREATE_FILE_EVENT
            | EventType::EXEC_LOAD_EVENT => {
                return Err(self.statement_logged(b"LOAD DATA (pre-5.0 load event)", "", event_end));
            }
            EventType::PRE_GA_WRITE_ROWS_EVENT
            | EventType::PRE_GA_UPDATE_ROWS_EVENT
            | EventType::PRE_GA_DELETE_ROWS_EVENT => {
                return Err(self.decode_error(
                    event_end,
                    "pre-GA rows events (MySQL 5.1.0-5.1.15) are not supported",
                ));
            }
            // The server itself says changes may be missing from the binlog (MySQL's
            // LOST_EVENTS): a replica stops here, and so does the router.
            EventType::INCIDENT_EVENT => {
                return Err(SourceError::Unaccountable {
                    position: format!("{}:{}", self.at.file, event_end),
                    reason: "INCIDENT event: the server reports that changes may be missing from the binlog here".into(),
                })
            }
            // Heartbeats, stop, intvar, rand, user var, previous GTIDs, rows query and
            // friends carry no rows.
            _ => {}
        }
        Ok(None)
    }

    fn read<'e>(
        &self,
        event: &'e Event,
        event_end: u64,
    ) -> Result<Option<EventData<'e>>, SourceError> {
        event
            .read_data()
            .map_err(|e| self.decode_error(event_end, e))
    }

    /// Acts on what the boundary logic made of an event.
    fn apply(
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
                self.prepared.push(PreparedXa {
                    xid,
                    changes: std::mem::take(&mut self.changes),
                    resume: self.group_start.clone(),
                });
            }
            Step::XaCommitted(ref xid) | Step::XaRolledBack(ref xid) => {
                let commit = matches!(step, Step::XaCommitted(_));
                match self.prepared.iter().position(|p| p.xid == *xid) {
                    Some(at) => {
                        let branch = self.prepared.remove(at);
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
    fn statement_logged(&self, sql: &[u8], schema: &str, event_end: u64) -> SourceError {
        let outbox = statement_tables(sql, schema)
            .into_iter()
            .find(|t| self.watched.iter().any(|p| p.matches(t)));
        let text = String::from_utf8_lossy(sql);
        SourceError::StatementLogged {
            names: match outbox {
                Some(table) => format!("; it names outbox table {table}"),
                None => String::new(),
            },
            position: format!("{}:{}", self.at.file, event_end),
            statement: text.chars().take(200).collect(),
        }
    }

    /// Ends a group at `end`. The transaction's checkpoint is `end`, unless a prepared
    /// XA branch is unresolved: then the position before the oldest such branch.
    fn commit(&mut self, end: u64, timestamp_secs: u32) -> Transaction {
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
    fn part(&mut self, timestamp_secs: u32) -> Option<Transaction> {
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

    /// Follows a rotate event; true when a real rotation moved the reader to a new file.
    fn rotate(&mut self, event: &Event, log_pos: u32) -> Result<bool, SourceError> {
        let Some(EventData::RotateEvent(rotate)) = self.read(event, u64::from(log_pos))? else {
            return Err(self.decode_error(u64::from(log_pos), "ROTATE event did not decode"));
        };
        let mut name = rotate.name_raw().to_vec();
        // The first (fake) rotate arrives before the format description, so the reader
        // does not yet know checksums are on and leaves the 4 CRC bytes in the name.
        if log_pos == 0 && !self.seen_format_description && self.checksums_on && name.len() > 4 {
            name.truncate(name.len() - 4);
        }
        let name = String::from_utf8(name)
            .map_err(|_| self.decode_error(u64::from(log_pos), "binlog file name is not UTF-8"))?;
        let file = BinlogFile::new(name).map_err(|e| self.decode_error(u64::from(log_pos), e))?;
        if file == self.at.file {
            return Ok(false);
        }
        self.at.file = file;
        self.at.offset = rotate.position().max(4);
        // A fake rotate before the first format description only names the requested
        // file; later ones (e.g. after a server restart's STOP event) are real switches.
        // Joined by GTID, the first one names the file where the server found our place:
        // nothing committed lies between, so the checkpoint may move there.
        Ok(log_pos != 0 || self.seen_format_description || self.by_gtid)
    }

    fn table_map(&mut self, event: &Event, event_end: u64) -> Result<(), SourceError> {
        let Some(EventData::TableMapEvent(tme)) = self.read(event, event_end)? else {
            return Err(self.decode_error(event_end, "TABLE_MAP event did not decode"));
        };
        if let Some(known) = self.table_ids.get(&tme.table_id()) {
            if known.raw == event.data() {
                return Ok(());
            }
        }
        let table = TableName {
            database: tme.database_name().into_owned(),
            table: tme.table_name().into_owned(),
        };
        let name = table.to_string();
        let layout = if self.watched.iter().any(|p| p.matches(&name)) {
            let layout = TableLayout::new(Arc::new(table), &tme)
                .map_err(|e| self.decode_error(event_end, format!("table map of {name}: {e}")))?;
            // A server setting, not a row's data: no per-row policy may apply to it.
            if !layout.has_column_names() {
                return Err(SourceError::SettingChanged {
                    table: name,
                    position: format!("{}:{}", self.at.file, event_end),
                    what: "its TABLE_MAP carries no column names (binlog_row_metadata is not FULL for the session or server that wrote it)".into(),
                    fix: "SET GLOBAL binlog_row_metadata=FULL and set it in my.cnf",
                });
            }
            Some(Arc::new(layout))
        } else {
            None
        };
        let raw = event.data().to_vec();
        self.table_ids
            .insert(tme.table_id(), MappedTable { raw, layout });
        Ok(())
    }

    fn rows(&mut self, event: &Event, event_end: u64) -> Result<(), SourceError> {
        let Some(EventData::RowsEvent(rows)) = self.read(event, event_end)? else {
            return Err(self.decode_error(event_end, "rows event did not decode"));
        };
        let layout = match self.table_ids.get(&rows.table_id()) {
            Some(MappedTable {
                layout: Some(layout),
                ..
            }) => layout.clone(),
            Some(_) => return Ok(()),
            None => {
                return Err(self.decode_error(
                    event_end,
                    format!(
                        "rows event for table id {} without a preceding TABLE_MAP",
                        rows.table_id()
                    ),
                ))
            }
        };
        let inserts = matches!(
            rows,
            RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_)
        );
        if inserts {
            let missing = layout.columns_not_in(&rows);
            if !missing.is_empty() {
                return Err(SourceError::SettingChanged {
                    table: layout.table.to_string(),
                    position: format!("{}:{}", self.at.file, event_end),
                    what: format!("an INSERT's row image lacks column(s) {} (binlog_row_image is MINIMAL or NOBLOB in the writer's session: columns that took their default are left out)", missing.join(", ")),
                    fix: "SET GLOBAL binlog_row_image=FULL, set it in my.cnf, and keep writers from changing it per session",
                });
            }
        }
        let size = event.data().len() as u64;
        self.group.bytes += size;
        self.group.pending_bytes += size;
        if let Some(limit) = self.max_transaction_bytes {
            if self.group.bytes > limit {
                return Err(SourceError::TransactionTooLarge {
                    position: self.group_start.to_string(),
                    limit,
                });
            }
        }
        let decoded = layout.rows(&rows).map_err(|e| SourceError::Decode {
            position: format!("{}:{}", self.at.file, event_end),
            reason: format!("row of {}: {e}", layout.table),
        })?;
        let op = match rows {
            RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_) => RowOp::Insert,
            RowsEventData::DeleteRowsEvent(_) | RowsEventData::DeleteRowsEventV1(_) => {
                RowOp::Delete
            }
            _ => RowOp::Update,
        };
        let change = |row| RowChange {
            table: layout.table.clone(),
            op,
            row,
            event_offset: event_end,
        };
        self.changes
            .extend(decoded.inserted.into_iter().map(|r| change(Some(r))));
        self.changes
            .extend((0..decoded.other).map(|_| change(None)));
        Ok(())
    }
}

/// Decompresses a MySQL transaction payload as a stream, counting (not keeping) its
/// bytes: an error, or a size other than its header's, means mysql_async produced no
/// events (or not all of them) from it.
fn check_payload(payload: &TransactionPayloadEvent<'_>) -> Result<(), String> {
    let mut reader = payload
        .decompressed()
        .map_err(|e| format!("does not decompress: {e}"))?;
    let size = std::io::copy(&mut reader, &mut std::io::sink())
        .map_err(|e| format!("does not decompress: {e}"))?;
    if size != payload.uncompressed_size() {
        return Err(format!(
            "decompresses to {size} bytes, its header says {}",
            payload.uncompressed_size()
        ));
    }
    Ok(())
}

/// `SET @variable=value` (`statement` without the value) with a value known only at run
/// time; errors name the statement, not the value.
async fn set_variable(
    conn: &mut Conn,
    statement: &'static str,
    value: impl std::fmt::Display,
) -> Result<(), SourceError> {
    conn.query_drop(format!("{statement}={value}"))
        .await
        .map_err(|source| SourceError::Query {
            query: statement,
            source,
        })
}

async fn exec(conn: &mut Conn, sql: &'static str) -> Result<(), SourceError> {
    conn.query_drop(sql)
        .await
        .map_err(|source| SourceError::Query { query: sql, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mysql_common::binlog::consts::TransactionPayloadCompressionType as Compression;

    fn payload(compressed: &[u8], stated: u64) -> TransactionPayloadEvent<'static> {
        TransactionPayloadEvent::new(
            compressed.len() as u64,
            Compression::ZSTD,
            stated,
            compressed.to_vec(),
        )
    }

    #[test]
    fn payloads_must_decompress_to_their_stated_size() {
        let events = vec![7u8; 10_000];
        let zstd = zstd::encode_all(&events[..], 3).unwrap();
        assert_eq!(check_payload(&payload(&zstd, 10_000)), Ok(()));
        let short = check_payload(&payload(&zstd, 10_001)).unwrap_err();
        assert!(
            short.contains("10000 bytes, its header says 10001"),
            "{short}"
        );
        let garbage = check_payload(&payload(b"not zstd at all", 100)).unwrap_err();
        assert!(garbage.contains("does not decompress"), "{garbage}");
        let cut = check_payload(&payload(&zstd[..zstd.len() / 2], 10_000));
        assert!(cut.is_err(), "a truncated payload passed");
    }
}

#[cfg(test)]
mod recorded {
    //! The reader fed binlog files real MySQL servers wrote (`tests/fixtures/mysql-binlogs`,
    //! see its SOURCE.md): every file gives transactions or a clear error, never a panic.

    use super::*;

    /// What reading a whole file gave: the transactions, then how it ended.
    struct Read {
        transactions: Vec<Transaction>,
        end: SourceError,
    }

    fn fixture(name: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/mysql-binlogs")
            .join(name)
    }

    /// Reads `name` watching every table; the events' checksums as the file's format
    /// description says.
    async fn read(name: &str) -> Read {
        read_from(name, "fixture.000001:4".parse().unwrap()).await
    }

    /// `read` from `start` (with a MySQL GTID set, the reader keeps it up to date).
    async fn read_from(name: &str, start: Position) -> Read {
        let events = events_of(name);
        let checksums_on = events.iter().flatten().any(|e| {
            e.fde().footer().get_checksum_alg().ok().flatten()
                == Some(mysql_common::binlog::consts::BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32)
        });
        let mut reader = BinlogReader::reading(
            EventSource::Recorded(events.into_iter()),
            start,
            &[Pattern::new("*")],
            Duration::from_secs(1),
            false,
            checksums_on,
        );
        let mut transactions = Vec::new();
        loop {
            match reader.next_transaction().await {
                Ok(t) => transactions.push(t),
                Err(end) => return Read { transactions, end },
            }
        }
    }

    /// The file's events as the server would stream them: a compressed transaction
    /// payload followed by the events inside it (as mysql_async's stream expands it).
    fn events_of(name: &str) -> Vec<std::io::Result<Event>> {
        let file = std::io::BufReader::new(std::fs::File::open(fixture(name)).unwrap());
        let version = mysql_common::binlog::consts::BinlogVersion::Version4;
        let mut file = match mysql_common::binlog::BinlogFile::new(version, file) {
            Ok(f) => f,
            Err(e) => return vec![Err(e)],
        };
        let mut events = Vec::new();
        while let Some(event) = file.next() {
            let payload = event
                .as_ref()
                .ok()
                .filter(|e| {
                    e.header().event_type_raw() == EventType::TRANSACTION_PAYLOAD_EVENT as u8
                })
                .and_then(|e| e.read_event::<TransactionPayloadEvent<'_>>().ok())
                .map(|p| p.danger_decompress());
            events.push(event);
            let mut inner = std::io::Cursor::new(payload.unwrap_or_default());
            while let Some(e) = file.reader_mut().read_decompressed(&mut inner).transpose() {
                events.push(e);
            }
        }
        events
    }

    /// A MySQL server's GTIDs as the reader keeps them: each transaction's end carries
    /// the set of everything up to it.
    #[tokio::test]
    async fn mysql_gtid_sets_follow_the_transactions() {
        let start = Position {
            gtid: GtidState::MySql(Default::default()),
            ..Position::new(BinlogFile::new("fixture.000001").unwrap(), 4).unwrap()
        };
        let r = read_from("rpl_atomic_ddl_rollback_full.000001", start).await;
        let sets: Vec<String> = r
            .transactions
            .iter()
            .map(|t| t.end.gtid.to_string())
            .collect();
        let uuid = "a0205340-db2c-11e7-babd-340286faf52d";
        assert_eq!(
            sets,
            [
                format!("{uuid}:1"),
                format!("{uuid}:1-2"),
                format!("{uuid}:1-3"),
                format!("{uuid}:1-4")
            ]
        );
    }

    /// How reading a file must come out.
    enum Expect {
        /// Read to the end: transactions, row changes, the position after the last one.
        End(usize, usize, &'static str),
        /// Stopped with an error saying this.
        Stop(&'static str),
    }

    #[tokio::test]
    async fn every_file_reads_to_its_end_or_a_clear_error() {
        use Expect::*;
        let no_names = "carries no column names";
        let statement = "a data change logged as a statement";
        let expected = [
            // Row events with full metadata, decoded.
            (
                "binlog-invisible-columns.000001",
                End(5, 3, "fixture.000001:1787"),
            ),
            ("json-opaque.binlog", End(3, 8, "fixture.000001:1635")),
            (
                "mysql-enum-string-set.000001",
                End(5, 3, "fixture.000001:3331"),
            ),
            ("mysql_type_bit.000001", End(3, 1, "fixture.000001:1001")),
            ("vector.binlog", End(10, 10, "fixture.000001:3443")),
            (
                "mariadb-bin.000001",
                End(2, 2, "fixture.000001:1074 gtid=0-1-2"),
            ),
            // DDL after MySQL GTIDs: each statement its own transaction.
            (
                "rpl_atomic_ddl_rollback_full.000001",
                End(4, 0, "fixture.000001:907"),
            ),
            (
                "rpl_atomic_ddl_rollback_view.000001",
                End(2, 0, "fixture.000001:560"),
            ),
            // MySQL's default binlog_row_metadata=MINIMAL: a stop that names the setting,
            // inside a zstd-compressed transaction too.
            ("transaction_compression.000001", Stop(no_names)),
            ("minimal_row_metadata.000001", Stop(no_names)),
            ("binlog_transaction_with_GTID_TAG.000001", Stop(no_names)),
            ("write-partial-row.binlog", Stop(no_names)),
            // Statement-logged changes, the server's own incident, and an old format.
            ("binlog_transaction_with_GTID.000001", Stop(statement)),
            ("corrupt-relay-bin.000624", Stop(statement)),
            ("bug40482-bin.000001", Stop("INCIDENT event")),
            ("ver_5_1-wl2325_r.001", Stop("cannot decode binlog event")),
            // Truncated files: nothing read, nothing passed.
            (
                "binlog_truncated_event.000001",
                End(0, 0, "fixture.000001:4"),
            ),
            (
                "binlog_truncated_prev_gtid_event.000001",
                End(0, 0, "fixture.000001:4"),
            ),
        ];
        for (name, expect) in expected {
            let r = read(name).await;
            let rows: usize = r.transactions.iter().map(|t| t.changes.len()).sum();
            let seen = format!(
                "{} transaction(s), {rows} row(s), then: {}",
                r.transactions.len(),
                r.end
            );
            match expect {
                End(transactions, changes, position) => {
                    assert!(
                        matches!(&r.end, SourceError::StreamEnded { position: p } if p == position)
                            && r.transactions.len() == transactions
                            && rows == changes,
                        "{name}: {seen}"
                    );
                    // Positions only move forward, every one a transaction's end.
                    let ends: Vec<u64> = r.transactions.iter().map(|t| t.end.offset).collect();
                    assert!(ends.windows(2).all(|w| w[0] <= w[1]), "{name}: {ends:?}");
                }
                Stop(says) => assert!(r.end.to_string().contains(says), "{name}: {seen}"),
            }
        }
        // The rest: each reads to its end or stops with an error, never a panic.
        for entry in std::fs::read_dir(fixture("")).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name != "SOURCE.md" {
                read(&name).await;
            }
        }
    }
}
