//! Publishing outbox rows read from the tables themselves rather than the binlog —
//! the initial snapshot, and `recover` after a purge — through the same outbox, route
//! and sink stages, with their original event ids.
//!
//! The initial snapshot (`source.snapshot = "initial"`) reads every row in a consistent
//! snapshot whose binlog position MariaDB reports exactly: streaming continues there.

use std::sync::Arc;

use futures::StreamExt;

use super::{InvalidPolicy, PipelineError};
use crate::checkpoint::now_ms;
use crate::config::Config;
use crate::monitor::Metrics;
use crate::position::Position;
use crate::sink::Sink;
use crate::source::{self, server, RowChange, RowOp, Transaction};

/// Rows published per Kafka round trip.
const CHUNK: usize = 1000;

/// Publishes the outbox tables' rows (all, or those whose `column` is at or after `since`
/// unix seconds) with their original event ids, waiting for every acknowledgement.
pub(crate) async fn republish(
    config: &Config,
    conn: &mut mysql_async::Conn,
    since: Option<(&str, i64)>,
    position: &Position,
    sink: &Sink,
) -> Result<u64, PipelineError> {
    let metrics = Metrics::default();
    let (mapper, router) = super::read::stages(config).await?;
    let policy = InvalidPolicy::of(config);
    let order_by: Vec<String> = if !config.source.snapshot_order_by.is_empty() {
        config.source.snapshot_order_by.clone()
    } else {
        since
            .map(|(c, _)| c.to_string())
            .or_else(|| config.rules().ok().and_then(|r| r.timestamp))
            .into_iter()
            .collect()
    };
    let patterns = config.table_patterns();
    let mut events = 0u64;
    for table in server::matching_tables(conn, &patterns).await? {
        let table = Arc::new(table);
        let rows = source::snapshot::rows(conn, &table, since, &order_by).await?;
        let mut chunks = rows.chunks(CHUNK);
        while let Some(chunk) = chunks.next().await {
            let changes = chunk
                .into_iter()
                .map(|row| {
                    Ok(RowChange {
                        table: table.clone(),
                        op: RowOp::Insert,
                        row: Some(row?),
                        event_offset: 0,
                    })
                })
                .collect::<Result<Vec<_>, source::SourceError>>()?;
            let txn = Transaction {
                end: position.clone(),
                commit_time_ms: now_ms(),
                changes,
                complete: true,
            };
            let mut batch = super::read::map_and_route(&mapper, &router, &metrics, txn)?;
            policy.apply(&router, &metrics, &mut batch)?;
            // Exactly-once mode: one Kafka transaction per chunk, without a marker (the
            // checkpoint moves only once every row is out), so a crash part-way sends the
            // rows again: table rows are published at least once.
            sink.begin()?;
            let sent = match sink.send(batch.records).await {
                Ok(delivery) => delivery.await,
                Err(e) => Err(e),
            };
            match sent {
                Ok(n) => events += n as u64,
                Err(e) => {
                    sink.abandon();
                    sink.abort();
                    return Err(e.into());
                }
            }
            sink.commit(None).await?;
        }
        tracing::info!(%table, events, "published outbox rows from the table");
    }
    Ok(events)
}

/// The initial snapshot: every outbox row as of one consistent snapshot, published, and
/// the binlog position that snapshot corresponds to, where streaming continues.
pub async fn initial_snapshot(config: &Config, sink: &Sink) -> Result<Position, PipelineError> {
    use mysql_async::prelude::Queryable;
    let mut conn = source::connect(&config.source).await?;
    let position = server::consistent_snapshot(&mut conn)
        .await?
        .ok_or(PipelineError::SnapshotUnsupported)?;
    let events = republish(config, &mut conn, None, &position, sink).await?;
    conn.query_drop("COMMIT")
        .await
        .map_err(|source| source::SourceError::Query {
            query: "COMMIT",
            source,
        })?;
    tracing::info!(%position, events, "initial snapshot published");
    Ok(position)
}
