//! `run --init` and `checkpoint init`: a first start happens once, and this is the one
//! place that records it.
//!
//! Exactly-once mode keeps its truth on Kafka (see `exactly_once.rs`): the first
//! start is recorded for the fleet, its position fixed as it is recorded. In at-least-once
//! mode the store is the only record of progress: a store created again on an emptied
//! volume would start at `source.start` and skip every event since the last checkpoint.
//! With `checkpoint.name` set, the first start is recorded on the checkpoint topic too,
//! and an init that finds no store after it refuses.

use tracing::{info, warn};

use super::exactly_once::{first_start_state, fleet_note_record, FirstStart};
use crate::checkpoint::{Checkpoint, CheckpointStore};
use crate::config::Config;
use crate::pipeline::PipelineError;
use crate::sink::{self, FencingWriter, FleetRecord};

/// What an init did.
#[derive(Debug)]
pub struct Init {
    /// A new, empty store was created.
    pub store_created: bool,
    /// What the checkpoint topic says: `None` in at-least-once mode without
    /// `checkpoint.name` (the store is the only record).
    pub recorded: Option<FirstStart>,
}

/// Creates a missing store where a first start is allowed, and records the first start
/// on Kafka where the mode or `checkpoint.name` asks for it.
pub async fn init(config: &Config) -> Result<Init, PipelineError> {
    let dir = &config.checkpoint.dir;
    let existed = CheckpointStore::exists(dir);
    if config.delivery.exactly_once() {
        if !existed {
            CheckpointStore::create(dir)?;
        }
        let store = CheckpointStore::peek(dir)?;
        let recorded = record_for_the_fleet(config, store.as_ref()).await?;
        return Ok(Init {
            store_created: !existed,
            recorded: Some(recorded),
        });
    }
    let Some(name) = config.checkpoint.name.as_deref() else {
        if !existed {
            CheckpointStore::create(dir)?;
        }
        return Ok(Init {
            store_created: !existed,
            recorded: None,
        });
    };
    let (kafka, delivery) = (&config.kafka, &config.delivery);
    let topic = &delivery.checkpoint_topic;
    sink::ensure_checkpoint_topic(kafka, delivery)?;
    let record = tokio::task::block_in_place(|| sink::first_start_of(kafka, topic, name))?;
    if !existed {
        let how = match (&record.recorded, record.head_deleted_from) {
            (Some(text), _) => Some(text.clone()),
            (None, Some(offset)) => Some(format!(
                "records below offset {offset} were deleted from the topic, and the record may have been among them"
            )),
            (None, None) => None,
        };
        if let Some(how) = how {
            return Err(PipelineError::StoreLost {
                dir: dir.display().to_string(),
                topic: topic.clone(),
                name: name.to_string(),
                how,
            });
        }
        CheckpointStore::create(dir)?;
    }
    // An existing store without the record: a router that ran before `checkpoint.name`
    // was set is protected from now on.
    let recorded = match record.recorded {
        Some(_) if existed => FirstStart::HasStore,
        Some(_) => unreachable!("refused above"),
        None => {
            sink::send_first_start_record(kafka, topic, name).await?;
            FirstStart::Recorded
        }
    };
    Ok(Init {
        store_created: !existed,
        recorded: Some(recorded),
    })
}

/// How often a first start's record is tried when other writers of the fleet's id fence
/// it (instances of a fleet started together).
const FIRST_START_ATTEMPTS: u64 = 5;

/// Records exactly-once mode's first start on the checkpoint topic where no position
/// exists anywhere: no marker, no stored position, no trace of a deleted marker, no note
/// of the fleet's. The position is fixed now (`latest`: the binlog's end at this
/// moment) and travels in the record, so whichever instance leads first starts there.
/// Written as the fleet's transactional producer, with the lock topic's note in the same
/// transaction: of two instances recording at once, one commits and the other finds its
/// record. Where a position may have existed it refuses, as the start would.
async fn record_for_the_fleet(
    config: &Config,
    store: Option<&Checkpoint>,
) -> Result<FirstStart, PipelineError> {
    let (kafka, delivery) = (&config.kafka, &config.delivery);
    sink::ensure_checkpoint_topic(kafka, delivery)?;
    if let Some(decided) = first_start_state(config, store)? {
        return Ok(decided);
    }
    let fixed = {
        let mut conn = crate::source::connect(&config.source).await?;
        let flavor = crate::source::server::flavor(&mut conn).await?;
        super::first_position::first_start_here(config, &mut conn, flavor)
            .await?
            .map(Checkpoint::new_lineage)
    };
    let mut records = vec![FleetRecord {
        topic: delivery.checkpoint_topic.clone(),
        key: sink::first_start_key(&delivery.transactional_id),
        value: match &fixed {
            Some(at) => at.encode(),
            None => format!(
                "first start recorded at unix ms {}; the initial snapshot fixes the position",
                crate::checkpoint::now_ms()
            )
            .into_bytes(),
        },
    }];
    records.extend(fleet_note_record(config)?);
    // Of instances recording at once, each fences the one before: a writer fenced (or
    // failed) looks again with a new one, and finds the other's record or writes its own.
    let mut attempt = 1;
    loop {
        let written = async {
            let writer = FencingWriter::fence(kafka, &delivery.transactional_id)?;
            // Every transaction of the id is decided now: another instance may have
            // recorded since the first look.
            if let Some(decided) = first_start_state(config, store)? {
                return Ok(Some(decided));
            }
            writer.commit(&records).await?;
            Ok::<_, PipelineError>(None)
        };
        match written.await {
            Ok(Some(decided)) => return Ok(decided),
            Ok(None) => break,
            Err(e @ PipelineError::Sink(_)) if attempt < FIRST_START_ATTEMPTS => {
                warn!(attempt, error = %e, "recording the first start: another writer of the fleet's id came between; looking again");
                tokio::time::sleep(std::time::Duration::from_millis(100 * attempt)).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
    if let Some(at) = &fixed {
        info!(position = %at.position, "the first start's position, fixed as it was recorded");
    }
    Ok(FirstStart::Recorded)
}
