//! An operator's position (`checkpoint set`, `recover`, `import-debezium`): in
//! exactly-once mode a fact of the fleet, committed through the commit marker at once —
//! fencing whichever instance leads — or not at all. A record that waited on one
//! instance's volume until it next led would be applied after the marker had moved on
//! (every event since delivered twice).

use tracing::{info, warn};

use crate::checkpoint::{Checkpoint, CheckpointStore};
use crate::config::Config;
use crate::pipeline::PipelineError;
use crate::sink::{self, FencingWriter, FleetRecord};

/// What an operator's position did.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "recorded")]
pub enum OperatorMove {
    /// At-least-once: stored in this instance's store (its only record of progress).
    Stored,
    /// Exactly-once: committed as marker `seq` on `topic` for the whole fleet.
    Committed {
        seq: u64,
        topic: String,
        /// The instance that led when the command ran (fenced by it), if any.
        fenced_leader: Option<String>,
        /// Why the leader could not be asked, when it could not.
        leader_unknown: Option<String>,
    },
}

impl std::fmt::Display for OperatorMove {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OperatorMove::Stored => write!(
                f,
                "stored in this router's checkpoint store; the next run starts there"
            ),
            OperatorMove::Committed {
                seq,
                topic,
                fenced_leader,
                leader_unknown,
            } => {
                write!(
                    f,
                    "committed for the whole fleet as commit marker #{seq} on {topic}; "
                )?;
                match (fenced_leader, leader_unknown) {
                    (Some(leader), _) => write!(f, "instance {leader} led and is fenced by this: it stops, and whichever instance leads next resumes here"),
                    (None, Some(why)) => write!(f, "the leader could not be asked ({why}); any instance that led is fenced by this, and whichever leads next resumes here"),
                    (None, None) => write!(f, "no instance leads now; whichever leads next resumes here"),
                }
            }
        }
    }
}

/// Records `checkpoint` (made by an operator's command): stored, in at-least-once mode;
/// committed as the next commit marker and then stored, in exactly-once mode.
pub async fn record_operator_position(
    config: &Config,
    checkpoint: Checkpoint,
) -> Result<OperatorMove, PipelineError> {
    let store = CheckpointStore::create(&config.checkpoint.dir)?;
    if !config.delivery.exactly_once() {
        store.save(&checkpoint)?;
        return Ok(OperatorMove::Stored);
    }
    let (kafka, delivery) = (&config.kafka, &config.delivery);
    // Asked before the fence: after it the leader is on its way out.
    let (fenced_leader, leader_unknown) = match config.fleet_lock() {
        None => (None, None),
        Some(lock) => match tokio::task::block_in_place(|| {
            crate::ha::leader_of(kafka, &lock.group, &lock.topic)
        }) {
            Ok(leader) => (leader, None),
            Err(why) => (None, Some(why)),
        },
    };
    sink::ensure_checkpoint_topic(kafka, delivery)?;
    let writer = FencingWriter::fence(kafka, &delivery.transactional_id)?;
    // Every transaction of the id is decided now: the newest marker is final until ours.
    let history = tokio::task::block_in_place(|| sink::marker_history(kafka, delivery))?;
    let marker_seq = match history.marker.as_deref() {
        None => 0,
        Some(bytes) => {
            Checkpoint::decode(bytes)
                .map_err(|e| PipelineError::BadMarker {
                    topic: delivery.checkpoint_topic.clone(),
                    key: delivery.transactional_id.clone(),
                    reason: e.to_string(),
                })?
                .commit_seq
        }
    };
    let stored_seq = store.load()?.map_or(0, |s| s.commit_seq);
    // Past the newest marker, this store, and a carried marker's own number; a new line,
    // so no instance's stale store (of the line before) can win over it.
    let seq = marker_seq.max(stored_seq).max(checkpoint.commit_seq) + 1;
    let command = checkpoint.set_by;
    let mut committed = checkpoint.committed_as(seq).new_lineage();
    committed.set_by = command;
    let mut records = vec![FleetRecord {
        topic: delivery.checkpoint_topic.clone(),
        key: delivery.transactional_id.clone(),
        value: committed.encode(),
    }];
    records.extend(super::exactly_once::fleet_note_record(config)?);
    writer.commit(&records).await?;
    store.save(&committed)?;
    let topic = delivery.checkpoint_topic.clone();
    match &fenced_leader {
        Some(leader) => {
            warn!(position = %committed.position, seq, %topic, %leader, "an operator's position, committed as the fleet's commit marker: the leader is fenced")
        }
        None => {
            info!(position = %committed.position, seq, %topic, "an operator's position, committed as the fleet's commit marker")
        }
    }
    Ok(OperatorMove::Committed {
        seq,
        topic,
        fenced_leader,
        leader_unknown,
    })
}
