//! Binlog retention and the runway left before the checkpoint's file may be purged.
//!
//! Servers purge a binlog file once its last write is older than the retention. The
//! last write of the checkpoint's file is at or after the commit time of the checkpoint's
//! transaction, so `commit time + retention − now` never overstates the runway: alerts
//! come early, never late. The file still being written is never purged.

use mysql_async::Conn;

use crate::position::{BinlogFile, Position};
use crate::source::server::{self, BinlogFileInfo};
use crate::source::SourceError;

/// Where the retention comes from, and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// Seconds a binlog file is kept after its last write; `None`: never purged by age.
    pub secs: Option<u64>,
    /// The setting that governs it, as an operator would look it up.
    pub setting: &'static str,
    /// What is wrong with it, with the fix (a managed server that purges at once).
    pub problem: Option<String>,
}

/// Amazon RDS and Aurora (MySQL and MariaDB) keep binlogs by `binlog retention hours`
/// (`mysql.rds_show_configuration`), not by the server variables, and purge them within
/// minutes while it is NULL (their default).
const RDS_SETTING: &str = "Amazon RDS / Aurora `binlog retention hours`";
const RDS_SHOW: &str = "CALL mysql.rds_show_configuration";

/// The retention that governs this server: a managed platform's own setting where it
/// has one (RDS / Aurora), else the server's variables.
pub async fn retention(conn: &mut Conn) -> Result<Retention, SourceError> {
    let rds = match rds_retention_hours(conn).await {
        Ok(rds) => rds,
        // On RDS but not allowed to ask: the variables do not govern, say so.
        Err(
            e @ SourceError::Query {
                query: RDS_SHOW, ..
            },
        ) => {
            return Ok(Retention {
                secs: retention_secs(conn).await?,
                setting: RDS_SETTING,
                problem: Some(format!("{RDS_SETTING} cannot be read ({e}), and the server variables do not govern retention there; fix: GRANT EXECUTE ON PROCEDURE mysql.rds_show_configuration TO the router's user")),
            });
        }
        Err(e) => return Err(e),
    };
    if let Some(hours) = rds {
        return Ok(match hours {
            Some(h) => Retention {
                secs: Some(h * 3600),
                setting: RDS_SETTING,
                problem: None,
            },
            None => Retention {
                // Purged "as soon as possible": no runway at all.
                secs: Some(0),
                setting: RDS_SETTING,
                problem: Some(format!("{RDS_SETTING} is NULL, so binlogs are purged within minutes whatever binlog_expire_logs_seconds says; fix: CALL mysql.rds_set_configuration('binlog retention hours', 168) (hours: at least detection + repair time)")),
            },
        });
    }
    Ok(Retention {
        secs: retention_secs(conn).await?,
        setting: "binlog_expire_logs_seconds / expire_logs_days",
        problem: None,
    })
}

/// `Some(hours)` on RDS / Aurora (`Some(None)`: NULL); `None` elsewhere.
async fn rds_retention_hours(conn: &mut Conn) -> Result<Option<Option<u64>>, SourceError> {
    use mysql_async::prelude::Queryable;
    const FIND: &str = "SELECT COUNT(*) FROM information_schema.ROUTINES \
        WHERE ROUTINE_SCHEMA = 'mysql' AND ROUTINE_NAME = 'rds_show_configuration'";
    let present: u64 = conn
        .query_first(FIND)
        .await
        .map_err(|source| SourceError::Query {
            query: FIND,
            source,
        })?
        .unwrap_or(0);
    if present == 0 {
        return Ok(None);
    }
    let rows: Vec<mysql_async::Row> =
        conn.query(RDS_SHOW)
            .await
            .map_err(|source| SourceError::Query {
                query: RDS_SHOW,
                source,
            })?;
    let hours = rows.iter().find_map(|row| {
        let name: Option<String> = row.get_opt(0)?.ok();
        if !name?.eq_ignore_ascii_case("binlog retention hours") {
            return None;
        }
        let value: Option<String> = row.get_opt(1)?.ok().flatten();
        Some(value.and_then(|v| v.trim().parse::<u64>().ok()))
    });
    Ok(Some(hours.flatten()))
}

/// The server's binlog retention in seconds; `None` when binlogs never expire.
async fn retention_secs(conn: &mut Conn) -> Result<Option<u64>, SourceError> {
    let parse = |v: Option<String>| v.and_then(|s| s.trim().parse::<f64>().ok()).unwrap_or(0.0);
    let secs = parse(server::variable(conn, "binlog_expire_logs_seconds").await?);
    if secs > 0.0 {
        return Ok(Some(secs as u64));
    }
    // MariaDB takes fractional days; MySQL 8.0 whole days; 8.4 removed the variable.
    let days = parse(server::variable(conn, "expire_logs_days").await?);
    Ok((days > 0.0).then_some((days * 86_400.0) as u64))
}

/// MariaDB 11.4+ `max_binlog_total_size`: the oldest files are purged once all binlogs
/// together exceed it. `None` when unset or unknown.
pub async fn size_limit(conn: &mut Conn) -> Result<Option<u64>, SourceError> {
    let limit = server::variable(conn, "max_binlog_total_size").await?;
    Ok(limit
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|l| *l > 0))
}

/// Bytes the server may still write before the size limit purges the checkpoint's file:
/// the limit minus everything from that file to the end.
pub fn size_headroom(checkpoint: &Position, files: &[BinlogFileInfo], limit: u64) -> Option<i64> {
    let start = files.iter().position(|f| f.file == checkpoint.file)?;
    let kept: u64 = files[start..].iter().map(|f| f.size).sum();
    Some(limit as i64 - kept as i64)
}

/// How long until the checkpoint's binlog file may be purged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runway {
    /// The file is already gone.
    Purged,
    /// Nothing expires (no retention set).
    Unbounded,
    /// The checkpoint's commit time is not known (a first start at a given or the
    /// earliest position, before its first transaction is acknowledged): no bound can be
    /// promised, and none is made up.
    Unknown,
    /// Seconds left (negative: overdue, the purge can happen any time).
    Seconds(i64),
}

/// Computes the runway from the server's file list, current file and retention;
/// `checkpoint_commit_ms` is 0 when unknown.
pub fn runway(
    checkpoint: &Position,
    checkpoint_commit_ms: i64,
    files: &[BinlogFileInfo],
    current: &BinlogFile,
    retention_secs: Option<u64>,
    now_ms: i64,
) -> Runway {
    if !files.iter().any(|f| f.file == checkpoint.file) {
        return Runway::Purged;
    }
    let Some(retention) = retention_secs else {
        return Runway::Unbounded;
    };
    if &checkpoint.file == current {
        // Full retention starts only when the file is rotated away.
        return Runway::Seconds(retention as i64);
    }
    if checkpoint_commit_ms <= 0 {
        return Runway::Unknown;
    }
    Runway::Seconds((checkpoint_commit_ms + retention as i64 * 1000 - now_ms) / 1000)
}

/// Binlog bytes from `from` to the server's current position.
pub fn bytes_behind(from: &Position, files: &[BinlogFileInfo], current: &Position) -> Option<u64> {
    if from.file == current.file {
        return Some(current.offset.saturating_sub(from.offset));
    }
    let start = files.iter().position(|f| f.file == from.file)?;
    let end = files.iter().position(|f| f.file == current.file)?;
    if start > end {
        return None;
    }
    let mut total = files[start].size.saturating_sub(from.offset);
    total += files[start + 1..end].iter().map(|f| f.size).sum::<u64>();
    Some(total + current.offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<BinlogFileInfo> {
        (1..=3)
            .map(|i| BinlogFileInfo {
                file: BinlogFile::new(format!("mysql-bin.00000{i}")).unwrap(),
                size: 1000,
            })
            .collect()
    }

    #[test]
    fn runway_from_commit_time() {
        let cp: Position = "mysql-bin.000002:500".parse().unwrap();
        let current = BinlogFile::new("mysql-bin.000003").unwrap();
        let day = 86_400;
        // Checkpoint committed 60 h ago, 72 h retention: 12 h left.
        let now = 1_000_000_000_000;
        let r = runway(
            &cp,
            now - 60 * 3600 * 1000,
            &files(),
            &current,
            Some(3 * day),
            now,
        );
        assert_eq!(r, Runway::Seconds(12 * 3600));
        assert_eq!(
            runway(&cp, 0, &files(), &current, None, now),
            Runway::Unbounded
        );
        // A first start's checkpoint without a commit time: unknown, never "overdue".
        assert_eq!(
            runway(&cp, 0, &files(), &current, Some(3 * day), now),
            Runway::Unknown
        );
        let gone: Position = "mysql-bin.000000:4".parse().unwrap();
        assert_eq!(
            runway(&gone, 0, &files(), &current, Some(day), now),
            Runway::Purged
        );
        let in_current: Position = "mysql-bin.000003:4".parse().unwrap();
        assert_eq!(
            runway(&in_current, 0, &files(), &current, Some(day), now),
            Runway::Seconds(day as i64)
        );
    }

    #[test]
    fn size_headroom_counts_from_the_checkpoint_file() {
        let cp: Position = "mysql-bin.000002:500".parse().unwrap();
        assert_eq!(size_headroom(&cp, &files(), 5000), Some(3000));
        assert_eq!(size_headroom(&cp, &files(), 1500), Some(-500));
    }

    #[test]
    fn bytes_behind_across_files() {
        let cp: Position = "mysql-bin.000001:400".parse().unwrap();
        let cur: Position = "mysql-bin.000003:250".parse().unwrap();
        assert_eq!(bytes_behind(&cp, &files(), &cur), Some(600 + 1000 + 250));
        let same: Position = "mysql-bin.000003:100".parse().unwrap();
        assert_eq!(bytes_behind(&same, &files(), &cur), Some(150));
    }
}
