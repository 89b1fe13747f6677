//! Where the reader's events come from: the server's replication stream, requested as a
//! replica from a position, or (in unit tests) binlog files real servers wrote.

use std::time::Duration;

use futures::StreamExt;
use mysql_async::binlog::events::Event;
use mysql_async::prelude::Queryable;
use mysql_async::{BinlogStream, BinlogStreamRequest, Conn};

use super::BinlogReader;
use crate::pattern::Pattern;
use crate::source::server::Flavor;
use crate::source::{GtidState, Position, SourceError};

/// Where events come from.
pub(super) enum EventSource {
    /// The server's replication stream.
    Server(BinlogStream),
    /// Events read from a binlog file (unit tests: real servers' bytes).
    #[cfg(test)]
    Recorded(std::vec::IntoIter<std::io::Result<Event>>),
}

impl EventSource {
    pub(super) async fn next(&mut self) -> Option<Result<Event, mysql_async::Error>> {
        match self {
            EventSource::Server(stream) => stream.next().await,
            #[cfg(test)]
            EventSource::Recorded(events) => events.next().map(|e| e.map_err(Into::into)),
        }
    }
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
        let checksum = crate::source::server::variable(&mut conn, "binlog_checksum").await?;
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
