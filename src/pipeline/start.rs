//! Where a run starts: the checkpoint (exactly-once: `exactly_once_start`), else the
//! first start's position (recorded at once), whether to resume by GTID, and the checks
//! that must pass before streaming.

use tracing::{info, warn};

use super::exactly_once_start::{self, Resume};
use super::first_position;
use super::PipelineError;
use crate::checkpoint::{Checkpoint, CheckpointStore};
use crate::config::Config;
use crate::monitor::Metrics;
use crate::sink::Sink;
use crate::source::server;
use crate::source::SnapshotMode;

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
    let recorded = match sink.transactions() {
        None => match local {
            Some(cp) => return Ok(cp),
            None => None,
        },
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
            Resume::FirstStart(recorded) => recorded,
        },
    };
    let checkpoint = match recorded {
        // Fixed when the first start was recorded, whichever instance recorded it:
        // nothing committed since is skipped, however late this instance leads.
        Some(recorded) => recorded,
        None => {
            match crate::source::snapshot::RowFilter::for_first_start(&config.source.snapshot) {
                Some(rows) => {
                    let feature = match config.source.snapshot {
                        SnapshotMode::Watermark(_) => server::SnapshotFeature::WatermarkHandover,
                        _ => server::SnapshotFeature::InitialSnapshot,
                    };
                    server::require_mariadb(conn, feature).await?;
                    first_position::refuse_prepared_xa(conn).await?;
                    let taken_at = server::now_ms(conn).await?;
                    let position = super::table::initial_snapshot(config, rows, sink).await?;
                    Checkpoint::new(position, taken_at).on_server(server::server_id(conn).await?)
                }
                None => first_position::first_start_here(config, conn, flavor)
                    .await?
                    .expect("no snapshot: the position is fixed here"),
            }
        }
    };
    let checkpoint = if let Some(transactions) = sink.transactions() {
        // The start as the first commit marker, before the store has it (a store without
        // a marker is refused): a standby taking over before our first transaction
        // starts here too, not at its own "latest"; and of two instances racing through
        // their first start, the one fenced by the other's `init_transactions` fails
        // this commit, so both end up at the same position.
        // A first start begins a line of markers (a recorded one carries its own).
        let first = match checkpoint.lineage {
            Some(_) => checkpoint.committed_as(1),
            None => checkpoint.committed_as(1).new_lineage(),
        };
        transactions.begin()?;
        transactions.commit(Some(first.encode())).await?;
        first
    } else {
        checkpoint
    };
    store.save(&checkpoint)?;
    info!(position = %checkpoint.position, start = ?config.source.start, snapshot = ?config.source.snapshot, "no checkpoint yet: starting here and recorded it");
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
