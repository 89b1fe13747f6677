//! Where a run starts: the checkpoint (exactly-once: `exactly_once_start`), else the
//! first start's position (recorded at once), whether to resume by GTID, and the checks
//! that must pass before streaming.

use tracing::{info, warn};

use super::exactly_once_start::{self, Resume};
use super::PipelineError;
use crate::checkpoint::{Checkpoint, CheckpointStore};
use crate::config::Config;
use crate::monitor::Metrics;
use crate::sink::Sink;
use crate::source::server;
use crate::source::{SnapshotMode, StartFrom};

/// Where to start: the checkpoint, else the initial snapshot or `source.start` (stored
/// at once, so a crash before the first delivery cannot move a `latest` start past
/// committed events).
pub(super) async fn start_position(
    config: &Config,
    store: &CheckpointStore,
    conn: &mut mysql_async::Conn,
    flavor: server::Flavor,
    sink: &dyn Sink,
) -> Result<Checkpoint, PipelineError> {
    let local = store.load()?;
    match sink.transactions() {
        None => {
            if let Some(cp) = local {
                return Ok(cp);
            }
        }
        Some(transactions) => match exactly_once_start::resume(config, local)? {
            Resume::Marker(cp) => return Ok(cp),
            Resume::Store { checkpoint, seq } => {
                // Committed as the marker before anything streams: a standby taking
                // over, or this instance after a crash, resumes here too.
                let committed = checkpoint.committed_as(seq);
                transactions.begin()?;
                transactions.commit(Some(committed.encode())).await?;
                store.save(&committed)?;
                return Ok(committed);
            }
            Resume::FirstStart => {}
        },
    }
    let snapshot_feature = match config.source.snapshot {
        SnapshotMode::Never => None,
        SnapshotMode::Initial => Some(server::SnapshotFeature::InitialSnapshot),
        SnapshotMode::Watermark(_) => Some(server::SnapshotFeature::WatermarkHandover),
    };
    if let Some(feature) = snapshot_feature {
        server::require_mariadb(conn, feature).await?;
    }
    if config.source.start != StartFrom::Earliest || config.source.snapshot != SnapshotMode::Never {
        let prepared = server::prepared_xa(conn).await?;
        if !prepared.is_empty() {
            return Err(PipelineError::PreparedXa {
                xids: prepared.iter().map(ToString::to_string).collect(),
            });
        }
    }
    // The server's clock just before the position is taken: every transaction after the
    // position commits later, and its file is written (rotated) later, so lag and
    // retention runway computed from it are never understated. A given or earliest
    // position has no known time (0) until its first transaction is acknowledged.
    let taken_at = server::now_ms(conn).await?;
    let (position, commit_time_ms) = match (
        crate::source::snapshot::RowFilter::for_first_start(&config.source.snapshot),
        &config.source.start,
    ) {
        (Some(rows), _) => (
            super::table::initial_snapshot(config, rows, sink).await?,
            taken_at,
        ),
        (None, StartFrom::Latest) => (server::current_position(conn, flavor).await?, taken_at),
        (None, StartFrom::Earliest) => (server::earliest_position(conn).await?, 0),
        (None, StartFrom::At(p)) => (p.clone(), 0),
    };
    let checkpoint =
        Checkpoint::new(position.clone(), commit_time_ms).on_server(server::server_id(conn).await?);
    let checkpoint = if let Some(transactions) = sink.transactions() {
        // The start as the first commit marker, before the store has it (a store without
        // a marker is refused): a standby taking over before our first transaction
        // starts here too, not at its own "latest"; and of two instances racing through
        // their first start, the one fenced by the other's `init_transactions` fails
        // this commit, so both end up at the same position.
        let first = checkpoint.committed_as(1);
        transactions.begin()?;
        transactions.commit(Some(first.encode())).await?;
        first
    } else {
        checkpoint
    };
    store.save(&checkpoint)?;
    info!(%position, start = ?config.source.start, snapshot = ?config.source.snapshot, "no checkpoint yet: starting here and recorded it");
    Ok(checkpoint)
}

/// Every exact outbox table name must exist as written (a typo would make its INSERTs
/// unrelated traffic, and the checkpoint would move past them); a pattern matching
/// nothing yet is a warning (tables created later are picked up at their first row).
pub(super) async fn check_outbox_tables(
    conn: &mut mysql_async::Conn,
    tables: &[crate::pattern::Pattern],
    metrics: &Metrics,
) -> Result<(), PipelineError> {
    let found = server::outbox_tables(conn, tables).await?;
    if !found.hidden_by_filters.is_empty() {
        return Err(PipelineError::BinlogFiltered {
            filters: found.hidden_by_filters,
        });
    }
    metrics.set_unmatched_patterns(found.unmatched_patterns.len());
    for pattern in &found.unmatched_patterns {
        warn!(%pattern, "outbox.tables pattern matches no table yet; its tables are picked up when they appear");
    }
    if found.missing.is_empty() {
        return Ok(());
    }
    let tables: Vec<String> = found
        .missing
        .iter()
        .map(|(name, like)| {
            let hint = if like.is_empty() {
                "no table of that database exists".to_string()
            } else {
                format!("tables there: {}", like.join(", "))
            };
            format!("{name} ({hint})")
        })
        .collect();
    Err(PipelineError::OutboxTablesMissing { tables })
}

/// Measures the source server's clock against this host's: binlog commit times are in
/// the server's, and lag and the exactly-once backlog test compare them with it.
pub(super) async fn measure_server_clock(
    conn: &mut mysql_async::Conn,
    metrics: &Metrics,
) -> Result<(), PipelineError> {
    let sent = crate::checkpoint::now_ms();
    let server = server::now_ms(conn).await?;
    metrics
        .server_clock()
        .measured(sent, server, crate::checkpoint::now_ms());
    Ok(())
}
