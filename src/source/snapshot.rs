//! Reading outbox rows from the table itself: the initial snapshot, recovery when the
//! binlog is gone, and the operator commands (replay, reconcile).

use futures::{Stream, StreamExt};
use mysql_async::binlog::value::BinlogValue;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};

use super::{RowImage, SourceError, TableName};
use std::sync::Arc;

/// A name as a quoted SQL identifier.
pub(crate) fn quote_ident(s: &str) -> String {
    format!("`{}`", s.replace('`', "``"))
}

/// Which rows of an outbox table to read: conditions on its columns, all of which must
/// hold (none: every row). Values travel as parameters, column names quoted.
#[derive(Debug, Clone, Default)]
pub struct RowFilter {
    conditions: Vec<String>,
    params: Vec<mysql_async::Value>,
    /// The time column a window is on: rows are best read in its order.
    time_column: Option<String>,
}

impl RowFilter {
    /// The rows a first start publishes from the table under `mode`: `None` for `never`.
    pub fn for_first_start(mode: &super::SnapshotMode) -> Option<Self> {
        match mode {
            super::SnapshotMode::Never => None,
            super::SnapshotMode::Initial => Some(Self::default()),
            super::SnapshotMode::Watermark(w) => Some(Self::default().condition(w)),
        }
    }
    /// Rows whose `column` is at or after `secs` (unix seconds, read in the session time
    /// zone like `CURRENT_TIMESTAMP`).
    pub fn since(mut self, column: &str, secs: i64) -> Self {
        self.conditions
            .push(format!("{} >= FROM_UNIXTIME(?)", quote_ident(column)));
        self.params.push(secs.into());
        self.time_column = Some(column.to_string());
        self
    }

    /// Rows whose `column` is before `secs` (unix seconds).
    pub fn until(mut self, column: &str, secs: i64) -> Self {
        self.conditions
            .push(format!("{} < FROM_UNIXTIME(?)", quote_ident(column)));
        self.params.push(secs.into());
        self.time_column = Some(column.to_string());
        self
    }

    /// Rows whose `column` is one of `values`.
    pub fn one_of(mut self, column: &str, values: &[String]) -> Self {
        let marks = vec!["?"; values.len().max(1)].join(", ");
        if values.is_empty() {
            self.conditions.push("FALSE".into());
            return self;
        }
        self.conditions
            .push(format!("{} IN ({marks})", quote_ident(column)));
        self.params
            .extend(values.iter().map(|v| mysql_async::Value::from(v.as_str())));
        self
    }

    /// Rows whose `column` is between `low` and `high`, both included.
    pub fn between(mut self, column: &str, low: &str, high: &str) -> Self {
        self.conditions
            .push(format!("{} BETWEEN ? AND ?", quote_ident(column)));
        self.params.push(low.into());
        self.params.push(high.into());
        self
    }

    /// Rows matching an SQL condition as given by the operator (a snapshot watermark
    /// such as `id > 1234567`).
    pub fn condition(mut self, sql: &str) -> Self {
        self.conditions.push(format!("({sql})"));
        self
    }

    /// The time column of a `since` / `until` window, if any.
    pub fn time_column(&self) -> Option<&str> {
        self.time_column.as_deref()
    }

    /// ` WHERE …` (or nothing) and its parameters.
    pub(crate) fn sql(&self) -> (String, Vec<mysql_async::Value>) {
        if self.conditions.is_empty() {
            return (String::new(), Vec::new());
        }
        (
            format!(" WHERE {}", self.conditions.join(" AND ")),
            self.params.clone(),
        )
    }
}

/// How many rows of `table` pass `filter` (in the connection's snapshot, when it has one):
/// the total a long table read reports its progress against.
pub async fn count(
    conn: &mut Conn,
    table: &TableName,
    filter: &RowFilter,
) -> Result<u64, SourceError> {
    use mysql_async::prelude::Queryable;
    let (condition, params) = filter.sql();
    let sql = format!(
        "SELECT COUNT(*) FROM {}.{}{condition}",
        quote_ident(&table.database),
        quote_ident(&table.table)
    );
    let n: Option<u64> =
        conn.exec_first(sql, params)
            .await
            .map_err(|source| SourceError::Query {
                query: "SELECT COUNT(*) of outbox rows",
                source,
            })?;
    Ok(n.unwrap_or(0))
}

/// Streams the rows of `table` that pass `filter`, ordered by the `order_by` columns,
/// shaped like binlog rows so the same mapping applies.
pub async fn rows<'c>(
    conn: &'c mut Conn,
    table: &TableName,
    filter: &RowFilter,
    order_by: &[String],
) -> Result<impl Stream<Item = Result<RowImage, SourceError>> + 'c, SourceError> {
    let (condition, params) = filter.sql();
    let mut sql = format!(
        "SELECT * FROM {}.{}{condition}",
        quote_ident(&table.database),
        quote_ident(&table.table)
    );
    if !order_by.is_empty() {
        let columns: Vec<String> = order_by.iter().map(|c| quote_ident(c)).collect();
        sql.push_str(&format!(" ORDER BY {}", columns.join(", ")));
    }
    let stream = conn
        .exec_stream::<Row, _, _>(sql, params)
        .await
        .map_err(|source| SourceError::Query {
            query: "SELECT outbox rows",
            source,
        })?;
    // Every row of one result has the same columns.
    let mut names: Option<Arc<[String]>> = None;
    Ok(stream.map(move |row| {
        let row = row.map_err(|source| SourceError::Query {
            query: "SELECT outbox rows",
            source,
        })?;
        let names = names
            .get_or_insert_with(|| {
                row.columns_ref()
                    .iter()
                    .map(|c| c.name_str().into_owned())
                    .collect()
            })
            .clone();
        let values = row
            .unwrap()
            .into_iter()
            .map(|v| Some(BinlogValue::Value(v)))
            .collect();
        Ok(RowImage::new(names, values))
    }))
}
