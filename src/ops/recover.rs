//! `recover`: when the binlog after the checkpoint was purged, re-publish from the outbox
//! table every row that may have committed after the checkpoint, with its original event
//! id, then move the checkpoint to a position read before the rows were selected.
//!
//! Rows committed before that position are in the table read (it starts after reading
//! the position); rows committed after it are streamed again from the binlog. Overlap is
//! possible and allowed (at-least-once, same event ids); a gap is not.
//!
//! Publishing the rows is `pipeline::table`, which the initial snapshot uses too.

use std::time::Duration;

use crate::checkpoint::{now_ms, Checkpoint, CheckpointStore, OperatorCommand};
use crate::config::Config;
use crate::pipeline::table::{republish, table_sink, ParkedRows, TableRows};
use crate::pipeline::PipelineError;
use crate::source::snapshot::RowFilter;
use crate::source::{self, server};

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
    /// Move it even while XA branches are prepared (their rows are invisible to the
    /// table read; the router then stops at their XA COMMIT).
    pub ignore_prepared_xa: bool,
}

/// What recovery did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RecoverReport {
    /// Rows re-published (unix seconds) from this time on.
    pub since_secs: i64,
    /// Events re-published and acknowledged (with `dry_run`: rows that would be),
    /// `held` included.
    pub events: u64,
    /// Of them, events of parked aggregates, sent to the parking topic behind their
    /// aggregate's parked events (`on_invalid = "park"`).
    pub held: u64,
    /// True when nothing was sent and the checkpoint was left as it was.
    pub dry_run: bool,
    /// The new checkpoint.
    pub checkpoint: String,
    /// What recording it did (exactly-once: the fleet's commit marker); `None` in a dry
    /// run.
    pub fleet: Option<crate::pipeline::OperatorMove>,
}

/// Re-publishes from the outbox tables and resets the checkpoint; see the module doc.
pub async fn recover(
    config: &Config,
    opts: &RecoverOptions,
) -> Result<RecoverReport, PipelineError> {
    // The fleet's position in exactly-once mode; a standby's store is what it last knew.
    let old = match crate::pipeline::fleet_marker(config)? {
        Some(marker) => Some(marker),
        None => CheckpointStore::peek(&config.checkpoint.dir)?,
    };
    let since_secs = match (opts.since_secs, &old) {
        (Some(s), _) => s,
        (None, Some(cp)) if cp.commit_time_ms > 0 => {
            cp.commit_time_ms / 1000
                - opts.margin.as_secs() as i64
                - opts.longest_transaction.as_secs() as i64
        }
        _ => return Err(PipelineError::RecoverWithoutTime),
    };
    let mut conn = source::connect(&config.source).await?;
    // A prepared branch's rows are invisible to the SELECT and before the new position.
    crate::source::server::refuse_move_past_prepared_xa(
        &mut conn,
        "recover",
        opts.ignore_prepared_xa,
    )
    .await?;
    let flavor = server::flavor(&mut conn).await?;
    // Read before selecting rows: every commit before it is visible to the select.
    let resume_at = server::current_position(&mut conn, flavor).await?;
    let server_id = server::server_id(&mut conn).await?;

    // Re-published rows go out at least once (same event ids); the checkpoint it writes
    // is newer than the last commit marker, so exactly-once mode resumes there.
    let sink = table_sink(config, opts.dry_run)?;
    let filter = RowFilter::default().since(&opts.timestamp_column, since_secs);
    let mut rows = TableRows::new(filter, &resume_at);
    // A parked aggregate's rows wait behind its parked events, as the stream would
    // have held them: sent to their topics now, they would overtake the release.
    rows.parked = ParkedRows::read(config, ParkedRows::hold).await?;
    let events = republish(config, &mut conn, &mut rows, sink.as_ref(), |_| {}).await?;
    let held = match rows.parked {
        ParkedRows::Hold { held, .. } => held,
        _ => 0,
    };
    if events == 0 && !opts.dry_run && !opts.allow_empty {
        return Err(PipelineError::RecoverFoundNothing {
            since: since_secs,
            column: opts.timestamp_column.clone(),
            resume_at: resume_at.to_string(),
        });
    }
    let fleet = match opts.dry_run {
        true => None,
        false => Some(
            crate::pipeline::record_operator_position(
                config,
                Checkpoint::new(resume_at.clone(), now_ms())
                    .on_server(server_id)
                    .set_by(OperatorCommand::Recover),
            )
            .await?,
        ),
    };
    Ok(RecoverReport {
        fleet,
        since_secs,
        events,
        held,
        dry_run: opts.dry_run,
        checkpoint: resume_at.to_string(),
    })
}
