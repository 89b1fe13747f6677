//! `recover`: when the binlog after the checkpoint was purged, re-publish from the outbox
//! table every row that may have committed after the checkpoint, with its original event
//! id, then move the checkpoint to a position read before the rows were selected.
//!
//! Rows committed before that position are in the table read (it starts after reading
//! the position); rows committed after it are streamed again from the binlog. Overlap is
//! possible and allowed (at-least-once, same event ids); a gap is not.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use crate::checkpoint::{now_ms, Checkpoint, CheckpointStore};
use crate::config::Config;
use crate::monitor::Metrics;
use crate::pattern::Pattern;
use crate::pipeline::{mapper_and_router, InvalidPolicy, PipelineError};
use crate::sink::{KafkaSink, Sink};
use crate::source::{self, server, RowChange, RowOp, Transaction};

/// Rows re-published per Kafka round trip.
const CHUNK: usize = 1000;

/// What to re-publish.
#[derive(Debug, Clone)]
pub struct RecoverOptions {
    /// DATETIME/TIMESTAMP column telling when a row was written.
    pub timestamp_column: String,
    /// Seconds subtracted from the checkpoint's commit time, for clock and time zone slack.
    pub margin: Duration,
    /// Explicit lower bound (unix seconds) instead of checkpoint time − margin.
    pub since_secs: Option<i64>,
}

/// What recovery did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RecoverReport {
    /// Rows re-published (unix seconds) from this time on.
    pub since_secs: i64,
    /// Events re-published and acknowledged.
    pub events: u64,
    /// The new checkpoint.
    pub checkpoint: String,
}

/// Re-publishes from the outbox tables and resets the checkpoint; see the module doc.
pub async fn recover(
    config: &Config,
    opts: &RecoverOptions,
) -> Result<RecoverReport, PipelineError> {
    let store = CheckpointStore::open(&config.checkpoint.dir)?;
    let old = store.load()?;
    let since_secs = match (opts.since_secs, &old) {
        (Some(s), _) => s,
        (None, Some(cp)) if cp.commit_time_ms > 0 => cp.commit_time_ms / 1000 - opts.margin.as_secs() as i64,
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

    let metrics = Metrics::default();
    let (mapper, router) = mapper_and_router(config, &metrics)?;
    let policy = InvalidPolicy::of(config);
    let sink = Sink::Kafka(KafkaSink::new(&config.kafka)?);
    let mut events = 0u64;
    let patterns: Vec<Pattern> = config
        .outbox
        .tables
        .iter()
        .map(|t| Pattern::new(t))
        .collect();
    for table in server::matching_tables(&mut conn, &patterns).await? {
        let table = Arc::new(table);
        let rows =
            source::snapshot::rows_since(&mut conn, &table, &opts.timestamp_column, since_secs)
                .await?;
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
                end: resume_at.clone(),
                commit_time_ms: now_ms(),
                changes,
            };
            let mut batch = router.route(mapper.map(txn)?);
            policy.apply(&router, &metrics, &mut batch)?;
            events += sink.send(batch.records).await?.await? as u64;
        }
        tracing::info!(%table, events, "re-published outbox rows");
    }
    store.save(&Checkpoint::new(resume_at.clone(), now_ms()))?;
    Ok(RecoverReport {
        since_secs,
        events,
        checkpoint: resume_at.to_string(),
    })
}
