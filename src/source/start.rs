//! How a binlog stream is opened at a resume point (which point is `pipeline::resume`'s
//! decision): on the server whose binlog the point is in, by GTID state or by file
//! position, with archived files first when the server purged the point's file. One
//! entry point: a resume point in, a reader out.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mysql_async::Conn;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::server::{self, Flavor};
use super::{Archive, BinlogFile, BinlogReader, Position, SourceConfig, SourceError};
use crate::pattern::Pattern;

/// Where to resume, in the source's terms.
pub struct ResumeAt<'a> {
    pub position: &'a Position,
    /// The server whose binlog `position` points into, when known.
    pub server_id: Option<u32>,
    /// Delivered up to here though `position` is held before a prepared XA branch.
    pub delivered_through: Option<Position>,
}

/// An opened binlog stream.
pub struct Stream {
    pub reader: BinlogReader,
    /// The server's own id: every position read from here on is in its binlog.
    pub server_id: u32,
    /// Joined by GTID state rather than file and offset.
    pub by_gtid: bool,
}

/// Opens the binlog stream of `conn`'s server at `at`, reading `watched` tables' rows
/// under `config`'s limits; `None` when `shutdown` came while archived files were
/// checked (nothing was read).
pub async fn open_stream(
    config: &SourceConfig,
    mut conn: Conn,
    flavor: Flavor,
    at: ResumeAt<'_>,
    watched: &[Pattern],
    shutdown: &CancellationToken,
) -> Result<Option<Stream>, SourceError> {
    let server_id = server::server_id(&mut conn).await?;
    let archived = tokio::select! {
        archived = archived_range(config, &mut conn, &at, server_id) => archived?,
        _ = shutdown.cancelled() => {
            info!(position = %at.position, "stopped while checking the binlog archive; nothing was read");
            return Ok(None);
        }
    };
    let by_gtid = match archived {
        // Archived files are read by file position, and the server after them too.
        Some(_) => false,
        None => server::resume_by_gtid(config, &mut conn, flavor, at.position)
            .await
            // Another server's file name is not "purged" here: it was never here.
            .or_else(|e| refuse_other_servers_file(&at, server_id).and(Err(e)))?,
    };
    if !by_gtid {
        refuse_other_servers_file(&at, server_id)?;
    }
    let start = at.position.clone();
    let reader = match archived {
        Some(range) => {
            BinlogReader::from_archive(
                conn,
                flavor,
                config.server_id,
                start,
                range.files,
                range.server_from,
                watched,
                config.heartbeat(),
            )
            .await?
        }
        None => {
            BinlogReader::start(
                conn,
                flavor,
                config.server_id,
                start,
                by_gtid,
                watched,
                config.heartbeat(),
            )
            .await?
        }
    }
    .with_max_transaction_bytes(config.max_transaction_bytes)
    .with_max_xa_held_bytes(config.max_xa_held_bytes as u64)
    .with_delivered_through(at.delivered_through);
    Ok(Some(Stream {
        reader,
        server_id,
        by_gtid,
    }))
}

/// Archived binlog files to read before the server's stream, and where the server takes
/// over.
struct ArchivedRange {
    /// From the resume point's file up to the server's oldest, each present.
    files: Vec<(BinlogFile, PathBuf)>,
    /// The oldest file the server holds: streaming continues at its start.
    server_from: BinlogFile,
}

/// When the server purged the resume point's binlog file and `source.archive_dir` holds
/// it: the files to read from there. `None` when the server still has the file, no
/// archive is configured, or the resume point is in another server's binlog (a
/// failover: GTIDs find the place there).
async fn archived_range(
    config: &SourceConfig,
    conn: &mut Conn,
    at: &ResumeAt<'_>,
    server_id: u32,
) -> Result<Option<ArchivedRange>, SourceError> {
    let Some(dir) = &config.archive_dir else {
        return Ok(None);
    };
    if at.server_id.is_some_and(|theirs| theirs != server_id) {
        return Ok(None);
    }
    let needed = &at.position.file;
    let logs = server::binary_logs(conn).await?;
    let Some(oldest) = logs.first() else {
        return Ok(None);
    };
    if logs.iter().any(|l| &l.file == needed) || oldest.file.base() != needed.base() {
        return Ok(None);
    }
    let archive = Archive::open(dir, needed)?;
    // A resume point from before server ids were recorded: only files the archive has
    // make it this server's history.
    if at.server_id.is_none() && !archive.holds(needed) {
        return Ok(None);
    }
    info!(checkpoint = %at.position, archive = %dir.display(), server_from = %oldest.file, "the server purged the checkpoint's binlog: checking the archived files before reading any");
    // Off the runtime's threads (a range of large files takes a while even at disk
    // speed), and abandoned when this future is dropped: a shutdown does not wait for it.
    let stop = StopOnDrop::default();
    let check = {
        let (stop, from, until) = (stop.0.clone(), at.position.clone(), oldest.file.clone());
        let ours = at.server_id;
        tokio::task::spawn_blocking(move || archive.range(&from, ours, &until, &stop))
    };
    let files = check
        .await
        .map_err(|e| SourceError::Unexpected(format!("the archive check failed: {e}")))??;
    info!(checkpoint = %at.position, archive = %dir.display(), files = files.len(), server_from = %oldest.file, "the server purged the checkpoint's binlog: reading it from the archive");
    Ok(Some(ArchivedRange {
        files,
        server_from: oldest.file.clone(),
    }))
}

/// Set when dropped: tells a blocking task its result is no longer wanted.
#[derive(Default)]
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A resume by file position is only one on the server whose binlog the position
/// points into (a failover to a server without GTIDs renames nothing, but every offset
/// means something else there).
fn refuse_other_servers_file(at: &ResumeAt<'_>, server_id: u32) -> Result<(), SourceError> {
    match at.server_id {
        Some(theirs) if theirs != server_id => Err(SourceError::CheckpointOfOtherServer {
            checkpoint: at.position.to_string(),
            checkpoint_server: theirs,
            server: server_id,
        }),
        _ => Ok(()),
    }
}
