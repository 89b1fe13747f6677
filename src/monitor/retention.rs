//! Binlog retention and the runway left before the checkpoint's file may be purged.
//!
//! Servers purge a binlog file once its last write is older than the retention. The
//! last write of the checkpoint's file is at or after the commit time of the checkpoint's
//! transaction, so `commit time + retention − now` never overstates the runway: alerts
//! come early, never late. The file still being written is never purged.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::position::{BinlogFile, Position};
use crate::source::server::{self, BinlogFileInfo};
use crate::source::SourceError;

/// How long the server keeps a binlog file after its last write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// Never purged by age.
    Forever,
    /// Purged this many seconds after its last write.
    Secs(u64),
    /// The governing setting cannot be read: no runway is promised, none made up.
    Unknown,
}

impl Kept {
    /// Seconds, when known and bounded.
    pub fn secs(self) -> Option<u64> {
        match self {
            Kept::Secs(s) => Some(s),
            Kept::Forever | Kept::Unknown => None,
        }
    }
}

/// Where the retention comes from, and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    pub kept: Kept,
    /// The setting that governs it, as an operator would look it up.
    pub setting: &'static str,
    /// What is wrong with it, with the fix (a managed server that purges at once, or
    /// whose setting this user may not read).
    pub problem: Option<String>,
}

/// Amazon RDS and Aurora (MySQL and MariaDB) keep binlogs by `binlog retention hours`
/// (`mysql.rds_show_configuration`), not by the server variables, and purge them within
/// minutes while it is NULL (their default).
const RDS_SETTING: &str = "Amazon RDS / Aurora `binlog retention hours`";
const RDS_SHOW: &str = "CALL mysql.rds_show_configuration";
const VARIABLES_SETTING: &str = "binlog_expire_logs_seconds / expire_logs_days";

/// The retention that governs this server: a managed platform's own setting where it
/// has one (RDS / Aurora), else the server's variables.
pub async fn retention(conn: &mut Conn) -> Result<Retention, SourceError> {
    if !on_rds(conn).await? {
        return Ok(Retention {
            kept: retention_secs(conn)
                .await?
                .map_or(Kept::Forever, Kept::Secs),
            setting: VARIABLES_SETTING,
            problem: None,
        });
    }
    let rows: Vec<mysql_async::Row> = match conn.query(RDS_SHOW).await {
        Ok(rows) => rows,
        // On RDS but not allowed to ask: the variables do not govern, and nothing else
        // tells; unknown, with the grant that makes it known.
        Err(e) => {
            return Ok(Retention {
                kept: Kept::Unknown,
                setting: RDS_SETTING,
                problem: Some(format!("unknown: {RDS_SETTING} cannot be read by this user ({RDS_SHOW}: {e}), and the server variables do not govern retention on RDS / Aurora; fix: GRANT EXECUTE ON PROCEDURE mysql.rds_show_configuration TO the router's user")),
            });
        }
    };
    let hours = rows.iter().find_map(|row| {
        let name: Option<String> = row.get_opt(0)?.ok();
        if !name?.eq_ignore_ascii_case("binlog retention hours") {
            return None;
        }
        let value: Option<String> = row.get_opt(1)?.ok().flatten();
        Some(value.and_then(|v| v.trim().parse::<u64>().ok()))
    });
    Ok(match hours.flatten() {
        Some(h) => Retention {
            kept: Kept::Secs(h * 3600),
            setting: RDS_SETTING,
            problem: None,
        },
        None => Retention {
            // Purged "as soon as possible": no runway at all.
            kept: Kept::Secs(0),
            setting: RDS_SETTING,
            problem: Some(format!("{RDS_SETTING} is NULL, so binlogs are purged within minutes whatever binlog_expire_logs_seconds says; fix: CALL mysql.rds_set_configuration('binlog retention hours', 168) (hours: at least detection + repair time)")),
        },
    })
}

/// RDS / Aurora, told by what every user can read: RDS installs the server under
/// `/rdsdbbin/` (its `basedir`), Aurora MySQL has `aurora_version` (AWS documents
/// `SELECT @@aurora_version`). `information_schema.ROUTINES` would hide RDS's procedures
/// from a user without EXECUTE on them; it only adds a third sign.
async fn on_rds(conn: &mut Conn) -> Result<bool, SourceError> {
    let basedir = server::variable(conn, "basedir").await?;
    let aurora = server::variable(conn, "aurora_version").await?;
    if is_rds(basedir.as_deref(), aurora.as_deref(), false) {
        return Ok(true);
    }
    const FIND: &str = "SELECT COUNT(*) FROM information_schema.ROUTINES \
        WHERE ROUTINE_SCHEMA = 'mysql' AND ROUTINE_NAME = 'rds_show_configuration'";
    let procedure: u64 = conn
        .query_first(FIND)
        .await
        .map_err(|source| SourceError::Query {
            query: FIND,
            source,
        })?
        .unwrap_or(0);
    Ok(is_rds(basedir.as_deref(), aurora.as_deref(), procedure > 0))
}

/// The rule of `on_rds`, on the values it read.
fn is_rds(basedir: Option<&str>, aurora_version: Option<&str>, procedure_visible: bool) -> bool {
    basedir.is_some_and(|d| d.contains("/rdsdbbin/"))
        || aurora_version.is_some_and(|v| !v.trim().is_empty())
        || procedure_visible
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
    /// The retention cannot be read, or the checkpoint's commit time is not known (a
    /// first start at a given or the earliest position, before its first transaction is
    /// acknowledged): no bound can be promised, and none is made up.
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
    kept: Kept,
    now_ms: i64,
) -> Runway {
    if !files.iter().any(|f| f.file == checkpoint.file) {
        return Runway::Purged;
    }
    let retention = match kept {
        Kept::Forever => return Runway::Unbounded,
        Kept::Unknown => return Runway::Unknown,
        Kept::Secs(s) => s,
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
            Kept::Secs(3 * day),
            now,
        );
        assert_eq!(r, Runway::Seconds(12 * 3600));
        assert_eq!(
            runway(&cp, 0, &files(), &current, Kept::Forever, now),
            Runway::Unbounded
        );
        // A retention that cannot be read promises nothing, even with a commit time.
        assert_eq!(
            runway(&cp, now - 1000, &files(), &current, Kept::Unknown, now),
            Runway::Unknown
        );
        // A first start's checkpoint without a commit time: unknown, never "overdue".
        assert_eq!(
            runway(&cp, 0, &files(), &current, Kept::Secs(3 * day), now),
            Runway::Unknown
        );
        let gone: Position = "mysql-bin.000000:4".parse().unwrap();
        assert_eq!(
            runway(&gone, 0, &files(), &current, Kept::Secs(day), now),
            Runway::Purged
        );
        let in_current: Position = "mysql-bin.000003:4".parse().unwrap();
        assert_eq!(
            runway(&in_current, 0, &files(), &current, Kept::Secs(day), now),
            Runway::Seconds(day as i64)
        );
    }

    #[test]
    fn rds_and_aurora_told_by_what_every_user_reads() {
        assert!(is_rds(Some("/rdsdbbin/mysql-8.0.35.R2/"), None, false));
        assert!(is_rds(
            Some("/rdsdbbin/oscar-8.0.mysql_aurora.3.05.2/"),
            None,
            false
        ));
        assert!(is_rds(Some("/usr/"), Some("3.05.2"), false));
        assert!(is_rds(Some("/usr/"), None, true));
        assert!(!is_rds(Some("/usr/"), None, false));
        assert!(!is_rds(None, Some(""), false));
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
