//! Where a first start begins, fixed at one moment on the source's server: shared by
//! `run --init` / `checkpoint init`, which record it with the first start, and by a first
//! run that finds no recorded position (at-least-once, an older build's record).

use crate::checkpoint::Checkpoint;
use crate::config::Config;
use crate::pipeline::PipelineError;
use crate::source::server;
use crate::source::{SnapshotMode, StartFrom};

/// Where a first start begins, fixed now on `conn`'s server: the binlog's end for
/// `latest`, its oldest file for `earliest`, or the given position; `None` when an
/// initial snapshot decides it as the first run starts. `run --init` / `checkpoint
/// init` record it with the first start, so that every instance of a fleet begins at
/// the same place, however much later one of them leads.
pub(super) async fn first_start_here(
    config: &Config,
    conn: &mut mysql_async::Conn,
    flavor: server::Flavor,
) -> Result<Option<Checkpoint>, PipelineError> {
    if config.source.snapshot != SnapshotMode::Never {
        return Ok(None);
    }
    if config.source.start != StartFrom::Earliest {
        refuse_prepared_xa(conn).await?;
    }
    // The server's clock just before the position is taken: every transaction after the
    // position commits later, and its file is written (rotated) later, so lag and
    // retention runway computed from it are never understated. A given or earliest
    // position has no known time (0) until its first transaction is acknowledged.
    let taken_at = server::now_ms(conn).await?;
    let (position, commit_time_ms) = match &config.source.start {
        StartFrom::Latest => (server::current_position(conn, flavor).await?, taken_at),
        StartFrom::Earliest => (server::earliest_position(conn).await?, 0),
        StartFrom::At(p) => (p.clone(), 0),
    };
    let server_id = server::server_id(conn).await?;
    Ok(Some(
        Checkpoint::new(position, commit_time_ms).on_server(server_id),
    ))
}

/// A start past a prepared XA branch would skip its rows when it commits.
pub(super) async fn refuse_prepared_xa(conn: &mut mysql_async::Conn) -> Result<(), PipelineError> {
    let prepared = server::prepared_xa(conn).await?;
    if !prepared.is_empty() {
        return Err(PipelineError::PreparedXa {
            xids: prepared.iter().map(ToString::to_string).collect(),
        });
    }
    Ok(())
}
