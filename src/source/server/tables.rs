//! The tables the router reads on the server: those matching the outbox patterns, the
//! checks of an outbox list against them, and the binlog filters that could hide them.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};

use super::query;
use crate::source::{SourceError, TableName};

/// Every base table on the server as (database, table), sorted.
async fn base_tables(conn: &mut Conn) -> Result<Vec<(String, String)>, SourceError> {
    query(
        conn,
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' ORDER BY 1, 2",
    )
    .await
}

/// The tables on the server matching any of `patterns` (`db.table`, `*` and `?`).
pub async fn matching_tables(
    conn: &mut Conn,
    patterns: &[crate::pattern::Pattern],
) -> Result<Vec<TableName>, SourceError> {
    let all = base_tables(conn).await?;
    Ok(all
        .into_iter()
        .filter(|(d, t)| patterns.iter().any(|p| p.matches(&format!("{d}.{t}"))))
        .map(|(database, table)| TableName { database, table })
        .collect())
}

/// The outbox table list as the server sees it.
#[derive(Debug, Default)]
pub struct OutboxTables {
    /// Tables that exist and match.
    pub found: Vec<TableName>,
    /// Exact names with no such table, each with the tables that look like it (same
    /// name in another case, or other tables of that database).
    pub missing: Vec<(String, Vec<String>)>,
    /// Patterns that match no table yet.
    pub unmatched_patterns: Vec<String>,
    /// Why changes to an outbox database never reach the binlog (`binlog_do_db` /
    /// `binlog_ignore_db`), one line per database; empty when none is hidden.
    pub hidden_by_filters: Vec<String>,
}

/// Checks `patterns` against the server's tables: exact names must exist as written.
pub async fn outbox_tables(
    conn: &mut Conn,
    patterns: &[crate::pattern::Pattern],
) -> Result<OutboxTables, SourceError> {
    let all = base_tables(conn).await?;
    let names: Vec<String> = all.iter().map(|(d, t)| format!("{d}.{t}")).collect();
    let mut out = OutboxTables::default();
    for p in patterns {
        let matching: Vec<&String> = names.iter().filter(|n| p.matches(n)).collect();
        if !matching.is_empty() {
            continue;
        }
        if p.is_wildcard() {
            out.unmatched_patterns.push(p.as_str().to_string());
            continue;
        }
        let wanted = p.as_str();
        let db = wanted.split('.').next().unwrap_or_default();
        let like: Vec<String> = names
            .iter()
            .filter(|n| n.eq_ignore_ascii_case(wanted) || n.split('.').next() == Some(db))
            .take(10)
            .cloned()
            .collect();
        out.missing.push((wanted.to_string(), like));
    }
    out.found = all
        .into_iter()
        .filter(|(d, t)| patterns.iter().any(|p| p.matches(&format!("{d}.{t}"))))
        .map(|(database, table)| TableName { database, table })
        .collect();
    let mut databases: Vec<&str> = out.found.iter().map(|t| t.database.as_str()).collect();
    databases.extend(
        patterns
            .iter()
            .filter(|p| !p.is_wildcard())
            .filter_map(|p| p.as_str().split('.').next()),
    );
    databases.sort_unstable();
    databases.dedup();
    let filters = binlog_filters(conn).await?;
    out.hidden_by_filters = databases
        .iter()
        .filter_map(|d| filters.excludes(d))
        .collect();
    Ok(out)
}

/// The server's binlog filters (`binlog_do_db`, `binlog_ignore_db`) as `SHOW MASTER
/// STATUS` reports them.
pub async fn binlog_filters(conn: &mut Conn) -> Result<BinlogFilters, SourceError> {
    let rows: Vec<Row> = match conn.query("SHOW MASTER STATUS").await {
        Ok(r) => r,
        Err(_) => query(conn, "SHOW BINARY LOG STATUS").await?,
    };
    let list = |row: &Row, i: usize| -> Vec<String> {
        row.get_opt::<Option<String>, _>(i)
            .and_then(Result::ok)
            .flatten()
            .map(|t| {
                t.split(',')
                    .map(str::trim)
                    .filter(|d| !d.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(rows
        .first()
        .map(|row| BinlogFilters {
            do_db: list(row, 2),
            ignore_db: list(row, 3),
        })
        .unwrap_or_default())
}

/// Databases the server writes to its binlog, or leaves out of it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BinlogFilters {
    /// `binlog_do_db`: when not empty, only these databases are logged.
    pub do_db: Vec<String>,
    /// `binlog_ignore_db`: these databases are not logged.
    pub ignore_db: Vec<String>,
}

impl BinlogFilters {
    /// Why changes to `database` never reach the binlog, if they do not.
    pub fn excludes(&self, database: &str) -> Option<String> {
        if self.ignore_db.iter().any(|d| d == database) {
            Some(format!("binlog_ignore_db contains {database}"))
        } else if !self.do_db.is_empty() && !self.do_db.iter().any(|d| d == database) {
            Some(format!(
                "binlog_do_db is {} and does not contain {database}",
                self.do_db.join(",")
            ))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod filter_tests {
    use super::BinlogFilters;

    #[test]
    fn filters_that_hide_an_outbox_database() {
        let none = BinlogFilters::default();
        assert_eq!(none.excludes("shop"), None);
        let ignore = BinlogFilters {
            do_db: vec![],
            ignore_db: vec!["shop".into()],
        };
        assert!(ignore.excludes("shop").is_some());
        assert_eq!(ignore.excludes("billing"), None);
        let only = BinlogFilters {
            do_db: vec!["billing".into()],
            ignore_db: vec![],
        };
        assert!(only.excludes("shop").unwrap().contains("binlog_do_db"));
        assert_eq!(only.excludes("billing"), None);
    }
}
