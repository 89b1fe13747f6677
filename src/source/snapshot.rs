//! Reading outbox rows from the table itself (recovery when the binlog is gone).

use futures::{Stream, StreamExt};
use mysql_async::binlog::row::BinlogRow;
use mysql_async::binlog::value::BinlogValue;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};

use super::{SourceError, TableName};

fn quote_ident(s: &str) -> String {
    format!("`{}`", s.replace('`', "``"))
}

/// Streams rows of `table` whose `column` is at or after `since_secs` (unix seconds, read
/// in the session time zone like `CURRENT_TIMESTAMP`), oldest first, shaped like binlog
/// rows so the same mapping applies.
pub async fn rows_since<'c>(
    conn: &'c mut Conn,
    table: &TableName,
    column: &str,
    since_secs: i64,
) -> Result<impl Stream<Item = Result<BinlogRow, SourceError>> + 'c, SourceError> {
    let col = quote_ident(column);
    let sql = format!(
        "SELECT * FROM {}.{} WHERE {col} >= FROM_UNIXTIME(?) ORDER BY {col}",
        quote_ident(&table.database),
        quote_ident(&table.table)
    );
    let stream = conn
        .exec_stream::<Row, _, _>(sql, (since_secs,))
        .await
        .map_err(|source| SourceError::Query {
            query: "SELECT outbox rows for recovery",
            source,
        })?;
    Ok(stream.map(|row| {
        let row = row.map_err(|source| SourceError::Query {
            query: "SELECT outbox rows for recovery",
            source,
        })?;
        let columns = row.columns();
        let values = row
            .unwrap()
            .into_iter()
            .map(|v| Some(BinlogValue::Value(v)))
            .collect();
        Ok(BinlogRow::new(values, columns))
    }))
}
