//! The checks that must pass before a run streams: the outbox tables exist and the
//! binlog is not filtered, and the server's clock against this host's.

use tracing::warn;

use super::PipelineError;
use crate::monitor::Metrics;
use crate::source::server;

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
