//! Reading outbox rows from the table itself (recovery when the binlog is gone).

use futures::{Stream, StreamExt};
use mysql_async::binlog::value::BinlogValue;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Row};

use super::{RowImage, SourceError, TableName};
use std::sync::Arc;

fn quote_ident(s: &str) -> String {
    format!("`{}`", s.replace('`', "``"))
}

/// Streams rows of `table` — all, or those whose `since.0` column is at or after `since.1`
/// (unix seconds, read in the session time zone like `CURRENT_TIMESTAMP`) — ordered by
/// the `order_by` columns, shaped like binlog rows so the same mapping applies.
pub async fn rows<'c>(
    conn: &'c mut Conn,
    table: &TableName,
    since: Option<(&str, i64)>,
    order_by: &[String],
) -> Result<impl Stream<Item = Result<RowImage, SourceError>> + 'c, SourceError> {
    let mut sql = format!(
        "SELECT * FROM {}.{}",
        quote_ident(&table.database),
        quote_ident(&table.table)
    );
    let mut params: Vec<mysql_async::Value> = Vec::new();
    if let Some((column, secs)) = since {
        sql.push_str(&format!(
            " WHERE {} >= FROM_UNIXTIME(?)",
            quote_ident(column)
        ));
        params.push(secs.into());
    }
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
