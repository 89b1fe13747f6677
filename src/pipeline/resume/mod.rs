//! Which position a run starts from, and why — decided here and nowhere else (the
//! source only opens what it is given: `source::start`). One entry point,
//! `start_position`, for every run and every takeover:
//!
//! - at-least-once: the local store's checkpoint, else a first start;
//! - exactly-once (`exactly_once.rs`): the fleet's truth on Kafka — the last commit
//!   marker, a store ahead of it committed as the marker first, a first start recorded
//!   by any instance (`run --init`, `first_start.rs`), or a refusal when a position may
//!   have existed and nothing the fleet can read says which;
//! - a first start (`first_position.rs`): `source.start` or the initial snapshot, stored
//!   (and, exactly-once, committed as the first marker) before anything streams;
//! - an operator's move (`checkpoint set`, `recover`: `operator.rs`), recorded where
//!   every instance reads it, so a standby applies it on taking over.
//!
//! The sled store (`checkpoint/`) is one instance's cache; the fleet's records are the
//! Kafka side of the same idea (`sink/kafka/checkpoint_topic.rs`, `fleet_records.rs`).

mod exactly_once;
mod first_position;
mod first_start;
mod operator;

pub use exactly_once::{fleet_marker, FirstStart};
pub use first_start::init;
pub use operator::{record_operator_position, OperatorMove};

use tracing::info;

use super::PipelineError;
use crate::checkpoint::{Checkpoint, CheckpointStore};
use crate::config::Config;
use crate::sink::Sink;
use crate::source::server;
use crate::source::SnapshotMode;
use exactly_once::Resume;

/// Where to start: the checkpoint, else the initial snapshot or `source.start` (stored
/// at once, so a crash before the first delivery cannot move a `latest` start past
/// committed events).
pub(in crate::pipeline) async fn start_position(
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
        Some(transactions) => match exactly_once::resume(config, local)? {
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
