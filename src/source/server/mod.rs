//! Questions asked of the source server: what it is, where its binlog is, whether its
//! settings let the router work. Which tables it reads, and whether their changes reach
//! the binlog: `tables.rs`.

mod mariadb_only;
mod resume;
mod tables;

pub use mariadb_only::{require_mariadb, SnapshotFeature, MARIADB_ONLY};
pub use resume::{refuse_move_past_prepared_xa, resume_by_gtid};
pub use tables::{binlog_filters, matching_tables, outbox_tables, BinlogFilters, OutboxTables};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};

use super::{BinlogFile, GtidState, Missing, Position, SourceError};
use crate::position::MariaGtidState;

/// Which server family; they differ in GTIDs and some statements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// MariaDB (domain-server-seq GTIDs).
    MariaDb,
    /// MySQL (UUID:interval GTID sets).
    MySql,
}

/// A setting or privilege that stops the router from working, with how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// What is wrong.
    pub what: String,
    /// What to do about it.
    pub fix: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (fix: {})", self.what, self.fix)
    }
}

async fn query<T: mysql_async::prelude::FromRow + Send + 'static>(
    conn: &mut Conn,
    sql: &'static str,
) -> Result<Vec<T>, SourceError> {
    conn.query(sql)
        .await
        .map_err(|source| SourceError::Query { query: sql, source })
}

/// Reads a global variable as text (None when the server does not have it).
pub async fn variable(conn: &mut Conn, name: &'static str) -> Result<Option<String>, SourceError> {
    let sql = match name {
        "log_bin" => "SELECT @@global.log_bin",
        "binlog_format" => "SELECT @@global.binlog_format",
        "binlog_row_image" => "SELECT @@global.binlog_row_image",
        "binlog_row_metadata" => "SELECT @@global.binlog_row_metadata",
        "binlog_checksum" => "SELECT @@global.binlog_checksum",
        "server_id" => "SELECT @@global.server_id",
        "log_bin_compress" => "SELECT @@global.log_bin_compress",
        "gtid_binlog_pos" => "SELECT @@global.gtid_binlog_pos",
        "version" => "SELECT VERSION()",
        "binlog_expire_logs_seconds" => "SELECT @@global.binlog_expire_logs_seconds",
        "expire_logs_days" => "SELECT @@global.expire_logs_days",
        "max_binlog_total_size" => "SELECT @@global.max_binlog_total_size",
        "basedir" => "SELECT @@global.basedir",
        "aurora_version" => "SELECT @@global.aurora_version",
        _ => return Err(SourceError::Unexpected(format!("unknown variable {name}"))),
    };
    match conn.query_first::<Option<String>, _>(sql).await {
        Ok(v) => Ok(v.flatten()),
        // 1193: unknown system variable (e.g. binlog_row_metadata on old servers).
        Err(mysql_async::Error::Server(e)) if e.code == 1193 => Ok(None),
        Err(source) => Err(SourceError::Query { query: sql, source }),
    }
}

/// The single value `sql` answers with.
async fn single<T: mysql_async::prelude::FromValue + Send + 'static>(
    conn: &mut Conn,
    sql: &'static str,
) -> Result<T, SourceError> {
    conn.query_first::<T, _>(sql)
        .await
        .map_err(|source| SourceError::Query { query: sql, source })?
        .ok_or_else(|| SourceError::Unexpected(format!("{sql} returned no row")))
}

/// The server's `@@server_id`: whose binlog a file position points into.
pub async fn server_id(conn: &mut Conn) -> Result<u32, SourceError> {
    single(conn, "SELECT @@global.server_id").await
}

/// The server's clock (ms since the epoch): binlog timestamps come from it, so lag and
/// runway compare like with like.
pub async fn now_ms(conn: &mut Conn) -> Result<i64, SourceError> {
    single(conn, "SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)").await
}

/// Tells MariaDB from MySQL by the version string.
pub async fn flavor(conn: &mut Conn) -> Result<Flavor, SourceError> {
    let version = variable(conn, "version").await?.unwrap_or_default();
    Ok(if version.to_ascii_lowercase().contains("mariadb") {
        Flavor::MariaDb
    } else {
        Flavor::MySql
    })
}

/// The server's current end of binlog, with its GTID state (MariaDB's per-domain GTIDs,
/// or MySQL's executed GTID set).
pub async fn current_position(conn: &mut Conn, flavor: Flavor) -> Result<Position, SourceError> {
    // GTID first: a commit in between leaves the GTID state behind the file position,
    // never ahead of it, so nothing is claimed that was not read.
    let maria_gtid = match flavor {
        Flavor::MariaDb => Some(
            variable(conn, "gtid_binlog_pos")
                .await?
                .map(|g| g.parse::<GtidState>())
                .transpose()
                .map_err(|e| SourceError::Unexpected(format!("gtid_binlog_pos: {e}")))?
                .unwrap_or_default(),
        ),
        Flavor::MySql => None,
    };
    // MySQL 8.4 removed SHOW MASTER STATUS; MariaDB and older MySQL lack the new name.
    let rows: Vec<Row> = match conn.query("SHOW MASTER STATUS").await {
        Ok(r) => r,
        Err(_) => query(conn, "SHOW BINARY LOG STATUS").await?,
    };
    let row = rows.into_iter().next().ok_or_else(|| {
        SourceError::Unexpected("SHOW MASTER STATUS returned nothing: is log_bin on?".into())
    })?;
    let file: String = row
        .get(0)
        .ok_or_else(|| SourceError::Unexpected("no File column".into()))?;
    let offset: u64 = row
        .get(1)
        .ok_or_else(|| SourceError::Unexpected("no Position column".into()))?;
    let mut pos = Position::new(
        BinlogFile::new(file).map_err(|e| SourceError::Unexpected(e.to_string()))?,
        offset,
    )
    .map_err(|e| SourceError::Unexpected(e.to_string()))?;
    pos.gtid = match maria_gtid {
        Some(gtid) => gtid,
        // MySQL reports the executed GTID set in the same row as the file position,
        // so the two agree exactly; empty when gtid_mode is OFF.
        None => match row.get_opt::<Option<String>, _>(4) {
            Some(Ok(Some(text))) if !text.trim().is_empty() => GtidState::MySql(
                text.parse()
                    .map_err(|e| SourceError::Unexpected(format!("Executed_Gtid_Set: {e}")))?,
            ),
            _ => GtidState::None,
        },
    };
    Ok(pos)
}

/// One file from `SHOW BINARY LOGS`.
#[derive(Debug, Clone)]
pub struct BinlogFileInfo {
    /// File name.
    pub file: BinlogFile,
    /// Size in bytes.
    pub size: u64,
}

/// The binlog files the server still has, oldest first.
pub async fn binary_logs(conn: &mut Conn) -> Result<Vec<BinlogFileInfo>, SourceError> {
    let rows: Vec<Row> = query(conn, "SHOW BINARY LOGS").await?;
    rows.into_iter()
        .map(|row| {
            let name: String = row.get(0).unwrap_or_default();
            let size: u64 = row.get(1).unwrap_or_default();
            let file = BinlogFile::new(name).map_err(|e| SourceError::Unexpected(e.to_string()))?;
            Ok(BinlogFileInfo { file, size })
        })
        .collect()
}

/// The oldest position the server can still stream from.
pub async fn earliest_position(conn: &mut Conn) -> Result<Position, SourceError> {
    let first = binary_logs(conn).await?.into_iter().next().ok_or_else(|| {
        SourceError::Unexpected("SHOW BINARY LOGS is empty: is log_bin on?".into())
    })?;
    Position::new(first.file, 4).map_err(|e| SourceError::Unexpected(e.to_string()))
}

/// Checks the binlog settings the router depends on; empty when all is well.
pub async fn settings_problems(conn: &mut Conn) -> Result<Vec<Problem>, SourceError> {
    let mut problems = Vec::new();
    let mut expect = |name: &str, actual: Option<String>, want: &[&str], fix: &str| {
        let ok = actual
            .as_deref()
            .is_some_and(|a| want.iter().any(|w| a.eq_ignore_ascii_case(w)));
        if !ok {
            problems.push(Problem {
                what: format!(
                    "{name} is {}, the router needs {}",
                    actual.as_deref().unwrap_or("not available"),
                    want[0]
                ),
                fix: fix.to_string(),
            });
        }
    };
    expect(
        "log_bin",
        variable(conn, "log_bin").await?,
        &["1", "ON"],
        "start the server with log-bin (e.g. log-bin=mysql-bin in the [mysqld]/[mariadbd] section of my.cnf) and restart it",
    );
    expect(
        "binlog_format",
        variable(conn, "binlog_format").await?,
        &["ROW"],
        "set binlog_format=ROW in my.cnf, or SET GLOBAL binlog_format=ROW (applies to new sessions)",
    );
    expect(
        "binlog_row_image",
        variable(conn, "binlog_row_image").await?,
        &["FULL"],
        "set binlog_row_image=FULL in my.cnf, or SET GLOBAL binlog_row_image=FULL",
    );
    expect(
        "binlog_row_metadata",
        variable(conn, "binlog_row_metadata").await?,
        &["FULL"],
        "set binlog_row_metadata=FULL in my.cnf, or SET GLOBAL binlog_row_metadata=FULL (column names then travel with every row; MySQL >= 8.0.1, MariaDB >= 10.5)",
    );
    Ok(problems)
}

/// Fails with `SourceError::Purged` when the server no longer has `position`'s file.
pub async fn ensure_available(conn: &mut Conn, position: &Position) -> Result<(), SourceError> {
    let logs = binary_logs(conn).await?;
    match logs.iter().find(|l| l.file == position.file) {
        Some(l) if position.offset > l.size => Err(SourceError::ForeignPosition {
            position: position.to_string(),
            file: l.file.to_string(),
            size: l.size,
        }),
        Some(_) => Ok(()),
        None => Err(SourceError::Purged {
            needed: Box::new(position.clone()),
            missing: Missing::File {
                oldest: oldest_name(&logs),
            },
        }),
    }
}

fn oldest_name(logs: &[BinlogFileInfo]) -> String {
    logs.first()
        .map(|l| l.file.to_string())
        .unwrap_or_else(|| "none".into())
}

/// What of `needed` is gone, asked after the stream was refused as purged: its file,
/// or (the file still there, resuming by GTID) the GTID range before the oldest binlog.
pub async fn what_is_purged(conn: &mut Conn, needed: &Position) -> Result<Missing, SourceError> {
    let logs = binary_logs(conn).await?;
    let oldest = oldest_name(&logs);
    let file_present = logs.iter().any(|l| l.file == needed.file);
    if !file_present || needed.gtid.is_empty() {
        return Ok(Missing::File { oldest });
    }
    let oldest_starts_at = gtid_state_at_start(conn, &oldest).await;
    Ok(Missing::GtidRange {
        oldest,
        oldest_starts_at,
    })
}

/// The GTID state where `file` starts: MariaDB's `BINLOG_GTID_POS`; on MySQL, where
/// the oldest binlog starts after `gtid_purged`, that set.
async fn gtid_state_at_start(conn: &mut Conn, file: &str) -> Option<String> {
    let mariadb: Result<Option<Option<String>>, _> = conn
        .exec_first("SELECT BINLOG_GTID_POS(?, 4)", (file,))
        .await;
    if let Ok(Some(Some(state))) = mariadb {
        return Some(state);
    }
    let mysql: Result<Option<String>, _> = conn.query_first("SELECT @@GLOBAL.gtid_purged").await;
    mysql
        .ok()
        .flatten()
        .filter(|s| !s.is_empty())
        .map(|s| s.replace('\n', ""))
}

/// Opens a REPEATABLE READ transaction WITH CONSISTENT SNAPSHOT on `conn` and returns
/// the binlog position exactly matching it: every transaction visible in the snapshot
/// ends at or before it, none after it does. `None` when the server does not report one
/// (MySQL: no `binlog_snapshot_*` status). The caller ends the transaction.
pub async fn consistent_snapshot(conn: &mut Conn) -> Result<Option<Position>, SourceError> {
    let q = |query: &'static str| move |source| SourceError::Query { query, source };
    conn.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .await
        .map_err(q("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"))?;
    conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        .await
        .map_err(q("START TRANSACTION WITH CONSISTENT SNAPSHOT"))?;
    let status: Vec<(String, String)> = query(
        conn,
        "SHOW SESSION STATUS WHERE Variable_name IN ('binlog_snapshot_file', 'binlog_snapshot_position')",
    )
    .await?;
    let get = |name: &str| {
        status
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let (Some(file), Some(offset)) = (get("binlog_snapshot_file"), get("binlog_snapshot_position"))
    else {
        return Ok(None);
    };
    // The server's own answer: if it does not parse, it answered unexpectedly.
    let unexpected = |what: String| SourceError::Unexpected(format!("binlog_snapshot_{what}"));
    let position = Position::new(
        BinlogFile::new(file).map_err(|e| unexpected(format!("file: {e}")))?,
        offset
            .parse()
            .map_err(|_| unexpected(format!("position {offset:?}")))?,
    )
    .map_err(|e| unexpected(format!("position: {e}")))?;
    Ok(Some(position))
}

/// The GTID state at a position of this server's binlog (MariaDB's `BINLOG_GTID_POS`), so
/// that positions compare by GTID across servers; `None` where the server cannot say.
pub async fn with_gtid_at(conn: &mut Conn, position: Position) -> Position {
    let asked: Result<Option<Option<String>>, _> = conn
        .exec_first(
            "SELECT BINLOG_GTID_POS(?, ?)",
            (position.file.name(), position.offset),
        )
        .await;
    match asked
        .ok()
        .flatten()
        .flatten()
        .map(|g| g.parse::<MariaGtidState>())
    {
        Some(Ok(state)) if !state.is_empty() => Position {
            gtid: GtidState::MariaDb(state),
            ..position
        },
        _ => position,
    }
}

/// Prepared XA branches on the server (`XA RECOVER`), by id: a start or a checkpoint
/// moved to the current position would never see their rows, which are logged at
/// PREPARE.
pub async fn prepared_xa(conn: &mut Conn) -> Result<Vec<super::Xid>, SourceError> {
    let rows: Vec<(i64, usize, usize, Vec<u8>)> = query(conn, "XA RECOVER").await?;
    Ok(rows
        .into_iter()
        .map(|(format_id, gtrid_len, bqual_len, data)| {
            let gtrid = data.get(..gtrid_len).unwrap_or(&data);
            let bqual = data
                .get(gtrid_len..gtrid_len.saturating_add(bqual_len))
                .unwrap_or_default();
            super::Xid::new(format_id, gtrid, bqual)
        })
        .collect())
}
