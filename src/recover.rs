//! `recover`: when the binlog after the checkpoint was purged, re-publish from the outbox
//! table every row that may have committed after the checkpoint, with its original event
//! id, then move the checkpoint to a position read before the rows were selected.
//!
//! Rows committed before that position are in the table read (it starts after reading
//! the position); rows committed after it are streamed again from the binlog. Overlap is
//! possible and allowed (at-least-once, same event ids); a gap is not.
//!
//! The initial snapshot (`source.snapshot = "initial"`) uses the same path: every row,
//! read in a consistent snapshot whose binlog position MariaDB reports exactly.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use crate::checkpoint::{now_ms, Checkpoint, CheckpointStore};
use crate::config::Config;
use crate::monitor::Metrics;
use crate::pipeline::{mapper_and_router, InvalidPolicy, PipelineError};
use crate::sink::{KafkaSink, Sink};
use crate::source::{self, server, BinlogFile, Position, RowChange, RowOp, Transaction};

/// Rows re-published per Kafka round trip.
const CHUNK: usize = 1000;

/// What to re-publish.
#[derive(Debug, Clone)]
pub struct RecoverOptions {
    /// DATETIME/TIMESTAMP column telling when a row was written.
    pub timestamp_column: String,
    /// Seconds subtracted from the checkpoint's commit time, for clock and time zone slack.
    pub margin: Duration,
    /// The longest a transaction of the application stays open: a row's timestamp is
    /// its INSERT's time, and its COMMIT (its place in the binlog) may come this much
    /// later, so it is subtracted too.
    pub longest_transaction: Duration,
    /// Explicit lower bound (unix seconds) instead of checkpoint time − margins.
    pub since_secs: Option<i64>,
    /// Count what would be re-published; send nothing, leave the checkpoint.
    pub dry_run: bool,
    /// Move the checkpoint even when no row is found in the window.
    pub allow_empty: bool,
}

/// What recovery did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RecoverReport {
    /// Rows re-published (unix seconds) from this time on.
    pub since_secs: i64,
    /// Events re-published and acknowledged (with `dry_run`: rows that would be).
    pub events: u64,
    /// True when nothing was sent and the checkpoint was left as it was.
    pub dry_run: bool,
    /// The new checkpoint.
    pub checkpoint: String,
}

/// Re-publishes from the outbox tables and resets the checkpoint; see the module doc.
pub async fn recover(
    config: &Config,
    opts: &RecoverOptions,
) -> Result<RecoverReport, PipelineError> {
    let old = CheckpointStore::peek(&config.checkpoint.dir)?;
    let since_secs = match (opts.since_secs, &old) {
        (Some(s), _) => s,
        (None, Some(cp)) if cp.commit_time_ms > 0 => {
            cp.commit_time_ms / 1000
                - opts.margin.as_secs() as i64
                - opts.longest_transaction.as_secs() as i64
        }
        _ => {
            return Err(PipelineError::Config(
                "the checkpoint has no commit time to recover from: pass --since UNIX_SECONDS (when the router last ran, minus a margin)".into(),
            ))
        }
    };
    let mut conn = source::connect(&config.source).await?;
    let flavor = server::flavor(&mut conn).await?;
    // Read before selecting rows: every commit before it is visible to the select.
    let resume_at = server::current_position(&mut conn, flavor).await?;

    let sink = if opts.dry_run {
        Sink::Null
    } else {
        Sink::Kafka(KafkaSink::new(
            &config.kafka,
            &crate::monitor::Metrics::default(),
        )?)
    };
    let since = Some((opts.timestamp_column.as_str(), since_secs));
    let events = republish(config, &mut conn, since, &resume_at, &sink).await?;
    if events == 0 && !opts.dry_run && !opts.allow_empty {
        return Err(PipelineError::Config(format!(
            "no outbox row was written since unix time {since_secs} (column {}): moving the checkpoint to {resume_at} would pass over the purged binlog with nothing re-published.\n  Check --since / --timestamp-column (and --dry-run to see the counts); if the outbox really had no writes then, repeat with --allow-empty",
            opts.timestamp_column
        )));
    }
    if !opts.dry_run {
        CheckpointStore::create(&config.checkpoint.dir)?
            .save(&Checkpoint::new(resume_at.clone(), now_ms()))?;
    }
    Ok(RecoverReport {
        since_secs,
        events,
        dry_run: opts.dry_run,
        checkpoint: resume_at.to_string(),
    })
}

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
    let (mapper, router) = mapper_and_router(config, &metrics).await?;
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
            };
            let mut batch = router.route(mapper.map(txn)?)?;
            policy.apply(&router, &metrics, &mut batch)?;
            events += sink.send(batch.records).await?.await? as u64;
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
    let q = |query: &'static str| move |source| source::SourceError::Query { query, source };
    conn.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .await
        .map_err(q("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ"))?;
    conn.query_drop("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        .await
        .map_err(q("START TRANSACTION WITH CONSISTENT SNAPSHOT"))?;
    // MariaDB reports the binlog position exactly matching the snapshot.
    let status: Vec<(String, String)> = conn
        .query("SHOW SESSION STATUS WHERE Variable_name IN ('binlog_snapshot_file', 'binlog_snapshot_position')")
        .await
        .map_err(q("SHOW STATUS binlog_snapshot_*"))?;
    let get = |name: &str| {
        status
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let (Some(file), Some(offset)) = (get("binlog_snapshot_file"), get("binlog_snapshot_position"))
    else {
        return Err(PipelineError::Config(
            "source.snapshot = \"initial\" needs MariaDB's binlog_snapshot_file/position (not available on this server)".into(),
        ));
    };
    let position = Position::new(
        BinlogFile::new(file).map_err(|e| PipelineError::Internal(e.to_string()))?,
        offset
            .parse()
            .map_err(|_| PipelineError::Internal(format!("binlog_snapshot_position {offset:?}")))?,
    )
    .map_err(|e| PipelineError::Internal(e.to_string()))?;
    let events = republish(config, &mut conn, None, &position, sink).await?;
    conn.query_drop("COMMIT").await.map_err(q("COMMIT"))?;
    tracing::info!(%position, events, "initial snapshot published");
    Ok(position)
}
