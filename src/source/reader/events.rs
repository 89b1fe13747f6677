//! Where the reader's events come from: the server's replication stream, requested as a
//! replica from a position, or archived binlog files (`source::archive`) and then the
//! server from the oldest file it holds.

use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn};

use crate::source::archive::{ArchiveEvents, BinlogItem};
use crate::source::server::Flavor;
use crate::source::{BinlogFile, GtidState, Position, SourceError};

/// Where events come from.
pub(super) enum EventSource {
    /// The server's replication stream.
    Server(BinlogStream),
    /// Archived binlog files, then (when given) the server from the oldest file it holds.
    Archive {
        events: Box<ArchiveEvents>,
        then: Option<Handover>,
    },
}

/// The server's stream after an archive: requested on a prepared replica connection at
/// the start of the oldest file the server holds.
pub(super) struct Handover {
    conn: Conn,
    server_id: u32,
    file: BinlogFile,
    /// To prepare a new connection when the first one did not survive the archive read.
    flavor: Flavor,
    heartbeat: Duration,
}

impl EventSource {
    /// The next item; `at` names the position in errors.
    pub(super) async fn next(&mut self, at: &Position) -> Option<Result<BinlogItem, SourceError>> {
        match self {
            EventSource::Server(stream) => Some(
                stream
                    .next()
                    .await?
                    .map(BinlogItem::Event)
                    .map_err(|e| SourceError::stream(at, e)),
            ),
            EventSource::Archive { events, then } => {
                if let Some(item) = events.next() {
                    return Some(item);
                }
                let Handover {
                    mut conn,
                    server_id,
                    file,
                    flavor,
                    heartbeat,
                } = then.take()?;
                let from = Position {
                    file: file.clone(),
                    offset: 4,
                    gtid: at.gtid.clone(),
                };
                tracing::info!(archive_read_to = %at, server_from = %from, "archived binlog read: the server streams on from the oldest file it holds");
                // Tests hold the handover here (`sleep(MS)`) to outlast the connection.
                fail::fail_point!("archive.before_handover");
                // The connection sat idle for the whole archive read: past the server's
                // wait_timeout it is gone, which is no reason to fail.
                if conn.ping().await.is_err() {
                    tracing::info!(server_from = %from, "the replica connection idle during the archive read was closed: connecting again");
                    conn = match reconnect(&conn, flavor, heartbeat).await {
                        Ok(c) => c,
                        Err(e) => return Some(Err(e)),
                    };
                }
                let request = BinlogStreamRequest::new(server_id)
                    .with_filename(file.name().as_bytes())
                    .with_pos(4);
                match conn.get_binlog_stream(request).await {
                    Ok(stream) => {
                        *self = EventSource::Server(stream);
                        Some(Ok(BinlogItem::ServerStream))
                    }
                    Err(e) => Some(Err(SourceError::stream(&from, e))),
                }
            }
        }
    }
}

/// An event source just opened, with what the reader needs to know of it.
pub(super) struct Opened {
    pub(super) events: EventSource,
    /// The server's events carry checksums.
    pub(super) checksums_on: bool,
    /// Requested by GTID state rather than file and offset.
    pub(super) by_gtid: bool,
}

impl EventSource {
    /// Registers as a replica with `server_id` and requests the binlog from `start`: by
    /// its GTID state when `by_gtid` (MariaDB connect state or MySQL GTID set), else by
    /// file and offset.
    pub(super) async fn server(
        mut conn: Conn,
        flavor: Flavor,
        server_id: u32,
        start: &Position,
        by_gtid: bool,
        heartbeat: Duration,
    ) -> Result<Opened, SourceError> {
        let checksums_on = prepare(&mut conn, flavor, heartbeat).await?;
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
            .map_err(|e| SourceError::stream(start, e))?;
        Ok(Opened {
            events: EventSource::Server(stream),
            checksums_on,
            by_gtid,
        })
    }

    /// Archived `events` alone: their end is the end (tests and the fuzz target).
    pub(super) fn archived(events: ArchiveEvents) -> Opened {
        Opened {
            events: EventSource::Archive {
                events: Box::new(events),
                then: None,
            },
            checksums_on: false,
            by_gtid: false,
        }
    }

    /// `files` (archived, see `source::archive`) from `start`, then the server's stream
    /// from the start of `server_from`, the oldest file it holds, by file position, as
    /// a replica with `server_id`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn archive_then_server(
        mut conn: Conn,
        flavor: Flavor,
        server_id: u32,
        start: &Position,
        files: Vec<(BinlogFile, PathBuf)>,
        server_from: BinlogFile,
        heartbeat: Duration,
    ) -> Result<Opened, SourceError> {
        let checksums_on = prepare(&mut conn, flavor, heartbeat).await?;
        let events = Box::new(
            ArchiveEvents::new(files, start.clone(), true).followed_by(server_from.clone()),
        );
        let then = Some(Handover {
            conn,
            server_id,
            file: server_from,
            flavor,
            heartbeat,
        });
        Ok(Opened {
            events: EventSource::Archive { events, then },
            checksums_on,
            by_gtid: false,
        })
    }
}

/// A new connection with `old`'s options, readied as a replica.
async fn reconnect(old: &Conn, flavor: Flavor, heartbeat: Duration) -> Result<Conn, SourceError> {
    let mut conn = Conn::new(old.opts().clone())
        .await
        .map_err(|source| SourceError::Query {
            query: "connect again after the archive read",
            source,
        })?;
    prepare(&mut conn, flavor, heartbeat).await?;
    Ok(conn)
}

/// Readies `conn` to be a replica: MariaDB's GTID events, heartbeats. Returns whether
/// the server's events carry checksums.
async fn prepare(
    conn: &mut Conn,
    flavor: Flavor,
    heartbeat: Duration,
) -> Result<bool, SourceError> {
    let checksum = crate::source::server::variable(conn, "binlog_checksum").await?;
    if flavor == Flavor::MariaDb {
        // Without it the server rewrites GTID events as `BEGIN` queries.
        exec(conn, "SET @mariadb_slave_capability=4").await?;
    }
    let period_ns = heartbeat.as_nanos().min(u64::MAX as u128) as u64;
    set_variable(conn, "SET @master_heartbeat_period", period_ns).await?;
    Ok(!checksum.unwrap_or_default().eq_ignore_ascii_case("NONE"))
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
