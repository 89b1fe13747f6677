//! The table reads `reconcile` makes besides its snapshot: row times, the durable
//! checkpoint it waits for, the listed ids, and whether strangers are in any outbox row.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;

use super::window::{id_hash, IdHash};
use super::{ReconcileReport, LISTED_IDS};
use crate::checkpoint::{Checkpoint, CheckpointStore};
use crate::config::Config;
use crate::ops::OpsError;
use crate::pipeline::table::{read_as_records, TableRows};
use crate::position::Position;
use crate::source::snapshot::RowFilter;
use crate::source::{self, server};

/// When each row of the window was written (ms since the epoch, by the timestamp
/// column), read in the same snapshot; empty when the tables have no such column.
pub(super) async fn row_times(
    config: &Config,
    conn: &mut mysql_async::Conn,
    filter: &RowFilter,
    column: &str,
) -> Result<HashMap<IdHash, i64>, OpsError> {
    use crate::source::snapshot::quote_ident;
    let mut times = HashMap::new();
    let (condition, params) = filter.sql();
    for table in server::matching_tables(conn, &config.table_patterns()).await? {
        let sql = format!(
            "SELECT {id}, CAST(UNIX_TIMESTAMP({ts}) * 1000 AS SIGNED) FROM {db}.{t}{condition}",
            id = quote_ident(&config.outbox.columns.event_id),
            ts = quote_ident(column),
            db = quote_ident(&table.database),
            t = quote_ident(&table.table),
        );
        let failed = |source| source::SourceError::Query {
            query: "SELECT outbox row times",
            source,
        };
        // Streamed: a million rows never sit in a result buffer.
        let read = match conn.exec_iter(sql, params.clone()).await {
            Ok(mut result) => {
                result
                    .for_each(|row| {
                        if let Ok((id, Some(t))) =
                            mysql_async::from_row_opt::<(Vec<u8>, Option<i64>)>(row)
                        {
                            times.insert(id_hash(&id), t);
                        }
                    })
                    .await
            }
            Err(e) => Err(e),
        };
        match read {
            Ok(()) => {}
            // 1054: no such column — the table has no time to judge by.
            Err(mysql_async::Error::Server(e)) if e.code == 1054 => {}
            Err(source) => return Err(failed(source).into()),
        }
    }
    Ok(times)
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Missing,
    Misrouted,
    Duplicated,
}

/// The durable checkpoint, once at or past `snapshot` or after `wait`.
pub(super) async fn wait_for_checkpoint(
    config: &Config,
    snapshot: &Position,
    server_id: u32,
    wait: Duration,
) -> Result<Checkpoint, OpsError> {
    let dir = &config.checkpoint.dir;
    let started = Instant::now();
    loop {
        let checkpoint = CheckpointStore::peek(dir)?.ok_or_else(|| OpsError::NoCheckpoint {
            dir: dir.display().to_string(),
        })?;
        crate::ops::same_server(&checkpoint, snapshot, server_id)?;
        let past = checkpoint.includes(snapshot, server_id) == Some(true);
        if past || started.elapsed() >= wait {
            return Ok(checkpoint);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Fills the report's id lists by reading the window's rows again.
pub(super) async fn name_ids(
    config: &Config,
    filter: &RowFilter,
    snapshot: &Position,
    kinds: &HashMap<IdHash, Kind>,
    report: &mut ReconcileReport,
) -> Result<(), OpsError> {
    let mut conn = source::connect(&config.source).await?;
    let mut rows = TableRows::new(filter.clone(), snapshot);
    read_as_records(config, &mut conn, &mut rows, |r| {
        let list = match kinds.get(&id_hash(&r.event.id.0)) {
            Some(Kind::Missing) => &mut report.missing_ids,
            Some(Kind::Misrouted) => &mut report.misrouted_ids,
            Some(Kind::Duplicated) => &mut report.duplicated_ids,
            None => return,
        };
        if list.len() < LISTED_IDS {
            list.push(r.event.id.to_string());
        }
    })
    .await
    .map_err(|e| OpsError::Pipeline(Box::new(e)))?;
    Ok(())
}

/// Of records whose id is not in the window, those whose id is in no outbox row at all
/// (a row written just before the window commits in it: that one is not a stranger).
pub(super) async fn not_in_table(
    config: &Config,
    strangers: &[(u32, Vec<u8>)],
) -> Result<Vec<(u32, Vec<u8>)>, OpsError> {
    if strangers.is_empty() {
        return Ok(Vec::new());
    }
    let mut conn = source::connect(&config.source).await?;
    let column = &config.outbox.columns.event_id;
    let tables = server::matching_tables(&mut conn, &config.table_patterns()).await?;
    let quote = |s: &str| format!("`{}`", s.replace('`', "``"));
    let mut known = std::collections::HashSet::new();
    for chunk in strangers.chunks(1000) {
        let ids: Vec<mysql_async::Value> = chunk.iter().map(|(_, id)| id.clone().into()).collect();
        for table in &tables {
            let sql = format!(
                "SELECT {c} FROM {d}.{t} WHERE {c} IN ({marks})",
                c = quote(column),
                d = quote(&table.database),
                t = quote(&table.table),
                marks = vec!["?"; ids.len()].join(", ")
            );
            let found: Vec<Vec<u8>> =
                conn.exec(sql, ids.clone())
                    .await
                    .map_err(|source| source::SourceError::Query {
                        query: "SELECT event ids not in the window",
                        source,
                    })?;
            known.extend(found);
        }
    }
    Ok(strangers
        .iter()
        .filter(|(_, id)| !known.contains(id))
        .cloned()
        .collect())
}
