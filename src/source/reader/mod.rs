//! The binlog stream, cut into committed transactions.
//!
//! A transaction ends at an XID event (InnoDB), a `COMMIT`/`ROLLBACK` query event, or is
//! a single statement (DDL) outside `BEGIN`. Rotate events keep the file name current;
//! heartbeats only prove the connection is alive. Rows are decoded for watched tables
//! only, so unrelated traffic costs little but still advances the position.

mod events;
mod group;
#[cfg(test)]
mod recorded;
mod tables;

use std::path::PathBuf;
use std::time::Duration;

use mysql_async::binlog::events::{Event, EventData, TransactionPayloadEvent};
use mysql_async::binlog::EventType;
use mysql_async::Conn;

use super::archive::{ArchiveEvents, BinlogItem};
use super::boundary::{Boundaries, Event as Boundary, Step};
use super::mariadb;
use super::server::Flavor;
use super::{BinlogFile, GtidState, Position, SourceError, Transaction};
use crate::pattern::Pattern;
use events::{EventSource, Opened};
use group::Group;
use tables::{Mapped, TableMaps};

/// A server heartbeat (`HEARTBEAT_LOG_EVENT`, the same number in MySQL and MariaDB).
const HEARTBEAT: u8 = EventType::HEARTBEAT_EVENT as u8;

/// How long the server may take to reach the start position before the first event
/// past a file's preamble or a heartbeat: its search through a binlog file of
/// `max_binlog_size` (1 GB by default) on a busy server.
const LOCATE_TIMEOUT: Duration = Duration::from_secs(300);

/// The events a server sends at a file's start, before it reaches a replica's position:
/// they say nothing about whether it has.
fn is_preamble(raw_type: u8) -> bool {
    raw_type == EventType::ROTATE_EVENT as u8
        || raw_type == EventType::FORMAT_DESCRIPTION_EVENT as u8
        || raw_type == mariadb::GTID_LIST_EVENT
        || raw_type == mariadb::BINLOG_CHECKPOINT_EVENT
        || raw_type == EventType::PREVIOUS_GTIDS_EVENT as u8
}

/// What a read of the stream brought.
#[derive(Debug)]
pub enum Read {
    /// A committed transaction (or a part of a large one).
    Transaction(Transaction),
    /// A heartbeat between transactions: the server has nothing more now.
    Idle,
}

/// Reads committed transactions from a binlog stream.
pub struct BinlogReader {
    stream: EventSource,
    /// Position of the last event read; `offset` only moves at transaction ends.
    at: Position,
    /// Table ids and the watched tables' layouts.
    tables: TableMaps,
    read_timeout: Duration,
    /// The server has reached the start position: it sent an event past a file's
    /// preamble, or a heartbeat (sent only at the end of the binlog). Until then it may
    /// be silent for long — joined by GTID, it reads its binlog file from the start up to
    /// our GTID, and sends nothing (not even heartbeats) meanwhile: a 1 GB file took
    /// longer than `read_timeout` under load, and every reconnect started the search
    /// again, so the router never streamed.
    located: bool,
    /// Joined by GTID state rather than file and offset.
    by_gtid: bool,
    /// Joined by GTID, the server named the file where it found our place: the position
    /// is that file's start only if its GTID list (the state at its start) covers ours;
    /// else the server skips what our state covers, and the first transaction it sends
    /// gives the position.
    gtid_start_unplaced: bool,
    seen_format_description: bool,
    checksums_on: bool,
    /// Where groups begin and end.
    boundaries: Boundaries,
    /// End offset of the current MySQL 8 compressed transaction payload, whose inner
    /// events carry log_pos 0.
    payload_end: Option<u64>,
    /// The group being read, prepared XA branches, limits.
    group: Group,
}

impl BinlogReader {
    /// Registers as a replica with `server_id` and requests the binlog from `start`: by
    /// its GTID state when `by_gtid` (MariaDB connect state or MySQL GTID set), else by
    /// file and offset.
    pub async fn start(
        conn: Conn,
        flavor: Flavor,
        server_id: u32,
        start: Position,
        by_gtid: bool,
        watched: &[Pattern],
        heartbeat: Duration,
    ) -> Result<Self, SourceError> {
        let opened =
            EventSource::server(conn, flavor, server_id, &start, by_gtid, heartbeat).await?;
        Ok(Self::reading(opened, start, watched, heartbeat))
    }

    /// Reads archived `events` from `start` and stops at their end (no server after
    /// them): tests and the fuzz target.
    pub(in crate::source) fn from_events(
        events: ArchiveEvents,
        start: Position,
        watched: &[Pattern],
    ) -> Self {
        let opened = EventSource::archived(events);
        Self::reading(opened, start, watched, Duration::from_secs(1))
    }

    /// Reads `files` (archived, see `source::archive`) from `start`, then streams from
    /// the server at the start of `server_from`, the oldest file it holds, by file
    /// position, as a replica with `server_id`.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::source) async fn from_archive(
        conn: Conn,
        flavor: Flavor,
        server_id: u32,
        start: Position,
        files: Vec<(BinlogFile, PathBuf)>,
        server_from: BinlogFile,
        watched: &[Pattern],
        heartbeat: Duration,
    ) -> Result<Self, SourceError> {
        let opened = EventSource::archive_then_server(
            conn,
            flavor,
            server_id,
            &start,
            files,
            server_from,
            heartbeat,
        )
        .await?;
        Ok(Self::reading(opened, start, watched, heartbeat))
    }

    /// A reader of the opened source from `start`.
    fn reading(opened: Opened, start: Position, watched: &[Pattern], heartbeat: Duration) -> Self {
        let Opened {
            events: stream,
            checksums_on,
            by_gtid,
        } = opened;
        Self {
            stream,
            group: Group::new(start.clone()),
            at: start,
            tables: TableMaps::new(watched),
            read_timeout: heartbeat
                .saturating_mul(3)
                .saturating_add(Duration::from_secs(1)),
            located: false,
            by_gtid,
            gtid_start_unplaced: false,
            seen_format_description: false,
            checksums_on,
            boundaries: Boundaries::default(),
            payload_end: None,
        }
    }

    /// Publishes nothing that ends at or before `through` (a checkpoint's
    /// `delivered_through`: the resume position was held before a prepared XA branch,
    /// and what follows it up to here was delivered); XA branches are still collected.
    pub fn with_delivered_through(mut self, through: Option<Position>) -> Self {
        self.group.delivered_through = through;
        self
    }

    /// Stops at a transaction with more outbox row bytes than `limit`, holding each one
    /// whole up to it (unset: transactions stream in parts).
    pub fn with_max_transaction_bytes(mut self, limit: Option<u64>) -> Self {
        self.group.max_transaction_bytes = limit;
        self
    }

    /// Stops when prepared XA branches (with the one being read) hold more outbox row
    /// bytes than `limit`: their rows are held until `XA COMMIT`, never streamed.
    pub fn with_max_xa_held_bytes(mut self, limit: u64) -> Self {
        self.group.max_xa_held_bytes = limit;
        self
    }

    /// The position of the last completed transaction read.
    pub fn position(&self) -> &Position {
        &self.at
    }

    /// Waits for the next committed transaction.
    pub async fn next_transaction(&mut self) -> Result<Transaction, SourceError> {
        loop {
            if let Read::Transaction(txn) = self.next_read().await? {
                return Ok(txn);
            }
        }
    }

    /// Waits for the next committed transaction, or a server heartbeat between
    /// transactions: a quiet server's word that nothing is pending, when work that must
    /// happen between transactions (an operator's request) can be done.
    pub async fn next_read(&mut self) -> Result<Read, SourceError> {
        loop {
            let item = match self.next_item().await? {
                None => {
                    return Err(SourceError::StreamEnded {
                        position: self.at.to_string(),
                    })
                }
                Some(item) => item?,
            };
            let done = match item {
                BinlogItem::Event(event) => {
                    let heartbeat = event.header().event_type_raw() == HEARTBEAT;
                    self.located |= heartbeat || !is_preamble(event.header().event_type_raw());
                    match self.handle(event)? {
                        None if heartbeat && self.between_transactions() => return Ok(Read::Idle),
                        done => done,
                    }
                }
                BinlogItem::NewFile(file) => {
                    self.new_file(file)?;
                    None
                }
                BinlogItem::ServerStream => {
                    self.seen_format_description = false;
                    self.located = false;
                    None
                }
            };
            if let Some(txn) = done {
                return Ok(Read::Transaction(txn));
            }
        }
    }

    /// The stream's next item, within `read_timeout` once the server has reached our
    /// position; until then within `LOCATE_TIMEOUT`, said once in the log when it takes
    /// longer than a read may. The one read is polled throughout, never dropped and
    /// started again.
    async fn next_item(&mut self) -> Result<Option<Result<BinlogItem, SourceError>>, SourceError> {
        let started = tokio::time::Instant::now();
        let next = self.stream.next(&self.at);
        tokio::pin!(next);
        let mut said = false;
        loop {
            tokio::select! {
                item = &mut next => return Ok(item),
                () = tokio::time::sleep(self.read_timeout) => {}
            }
            let waited = started.elapsed();
            if self.located {
                return Err(SourceError::ReadTimeout {
                    position: self.at.to_string(),
                    secs: waited.as_secs(),
                });
            }
            if waited >= LOCATE_TIMEOUT {
                return Err(SourceError::NotLocated {
                    position: self.at.to_string(),
                    secs: waited.as_secs(),
                });
            }
            if !std::mem::replace(&mut said, true) {
                tracing::info!(position = %self.at, by_gtid = self.by_gtid, waited_secs = waited.as_secs(), wait_up_to_secs = LOCATE_TIMEOUT.as_secs(), "the server is still looking for the start position in its binlog (joined by GTID it reads the file from the start up to it); waiting");
            }
        }
    }

    /// No transaction is open and nothing of one is held.
    fn between_transactions(&self) -> bool {
        !self.boundaries.in_group() && self.group.changes.is_empty()
    }

    /// An archived file begins: files end between transactions, so the position moves
    /// to its start as at a rotation (a file that ended with STOP named no successor).
    fn new_file(&mut self, file: BinlogFile) -> Result<(), SourceError> {
        if self.boundaries.in_group() || !self.group.changes.is_empty() {
            return Err(SourceError::Unaccountable {
                position: self.at.to_string(),
                reason: format!(
                    "archived binlog file {} ends inside a transaction",
                    self.at.file
                ),
            });
        }
        if file != self.at.file {
            self.at.file = file;
            self.at.offset = 4;
        }
        Ok(())
    }

    fn decode_error(&self, event_end: u64, reason: impl ToString) -> SourceError {
        SourceError::Decode {
            position: format!("{}:{}", self.at.file, event_end),
            reason: reason.to_string(),
        }
    }

    /// Handles one event; returns a transaction when this event completed one.
    fn handle(&mut self, event: Event) -> Result<Option<Transaction>, SourceError> {
        // Rows of a table that is not watched are never decoded, so its compressed rows
        // events need not be inflated either: zlib work for rows thrown away.
        if let Some(id) = mariadb::compressed_rows_table_id(&event) {
            if matches!(self.tables.get(id), Mapped::Unwatched) {
                return Ok(self.part(event.header().timestamp()));
            }
        }
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
                self.group.size.xa = gtid.prepared_xa;
                self.at.gtid.apply_mariadb(gtid.gtid);
                return Ok(None);
            }
            mariadb::GTID_LIST_EVENT => {
                let list = mariadb::parse_gtid_list(event.data())
                    .ok_or_else(|| self.decode_error(event_end, "short MariaDB GTID list event"))?;
                let at_file_start = std::mem::take(&mut self.gtid_start_unplaced)
                    && self.at.gtid.is_covered_by_mariadb_list(&list);
                for gtid in list {
                    self.at.gtid.apply_mariadb(gtid);
                }
                // Joined by GTID at the start of this file: nothing in it precedes our
                // place, so a quiet router's checkpoint may move here (off the old file).
                if at_file_start && !self.boundaries.in_group() && self.group.changes.is_empty() {
                    return Ok(Some(self.commit(event_end, header.timestamp())));
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
                    && self.group.changes.is_empty() =>
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
                crate::source::payload::check(&payload).map_err(|e| {
                    self.decode_error(event_end, format!("compressed transaction: {e}"))
                })?;
                self.payload_end = Some(event_end);
            }
            EventType::TABLE_MAP_EVENT => {
                let Some(EventData::TableMapEvent(tme)) = self.read(&event, event_end)? else {
                    return Err(self.decode_error(event_end, "TABLE_MAP event did not decode"));
                };
                let file = &self.at.file;
                self.tables
                    .map(&tme, event.data(), || format!("{file}:{event_end}"))?;
            }
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
                let xa_start = super::statement::classify(sql) == super::statement::Statement::XaStart;
                let step = self.boundaries.step(&Boundary::Query(sql));
                if step == Step::StatementDml {
                    return Err(self.statement_logged(sql, &q.schema(), event_end));
                }
                let done = self.apply(step, event_end, header.timestamp());
                // MySQL opens an XA branch's group with `XA START` (MariaDB flags its GTID).
                self.group.size.xa |= xa_start;
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

    /// What the boundary logic made of an event, done to the group.
    fn apply(
        &mut self,
        step: Step,
        event_end: u64,
        timestamp_secs: u32,
    ) -> Result<Option<Transaction>, SourceError> {
        let done = self
            .group
            .apply(step, &mut self.at, event_end, timestamp_secs)?;
        if done.is_some() {
            self.between_groups();
        }
        Ok(done)
    }

    /// Ends the group at `end` (see `Group::commit`).
    fn commit(&mut self, end: u64, timestamp_secs: u32) -> Transaction {
        let done = self.group.commit(&mut self.at, end, timestamp_secs);
        self.between_groups();
        done
    }

    fn between_groups(&mut self) {
        self.payload_end = None;
        self.tables.bound();
    }

    /// A part of a large group, once enough of it is read.
    fn part(&mut self, timestamp_secs: u32) -> Option<Transaction> {
        self.group.part(self.boundaries.in_group(), timestamp_secs)
    }

    fn statement_logged(&self, sql: &[u8], schema: &str, event_end: u64) -> SourceError {
        let position = format!("{}:{}", self.at.file, event_end);
        group::statement_logged(sql, schema, self.tables.watched(), position)
    }

    /// A rows event: its rows as row changes of the group, when its table is watched.
    fn rows(&mut self, event: &Event, event_end: u64) -> Result<(), SourceError> {
        let Some(EventData::RowsEvent(rows)) = self.read(event, event_end)? else {
            return Err(self.decode_error(event_end, "rows event did not decode"));
        };
        let layout = match self.tables.get(rows.table_id()) {
            Mapped::Watched(layout) => layout,
            Mapped::Unwatched => return Ok(()),
            Mapped::Unknown => {
                return Err(self.decode_error(
                    event_end,
                    format!(
                        "rows event for table id {} without a preceding TABLE_MAP",
                        rows.table_id()
                    ),
                ))
            }
        };
        let file = &self.at.file;
        let position = || format!("{file}:{event_end}");
        tables::check_full_image(&layout, &rows, position)?;
        self.group.admit(event.data().len() as u64)?;
        tables::push_changes(&layout, &rows, event_end, position, &mut self.group.changes)
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
        // Joined by GTID, the first one names the file where the server found our place
        // and its start, which is our place only when nothing in the file precedes it:
        // the file's GTID list says (`gtid_list`). Checkpointing `FILE:4` here once made
        // a later resume by position re-publish what the file held before our place.
        if log_pos == 0 && !self.seen_format_description && self.by_gtid {
            self.gtid_start_unplaced = true;
        }
        Ok(log_pos != 0 || self.seen_format_description)
    }
}
