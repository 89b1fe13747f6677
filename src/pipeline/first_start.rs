//! `run --init` and `checkpoint init`: a first start happens once.
//!
//! Exactly-once mode keeps its truth on Kafka (see `exactly_once_start`). In at-least-once
//! mode the store is the only record of progress: a store created again on an emptied
//! volume would start at `source.start` and skip every event since the last checkpoint.
//! With `checkpoint.name` set, the first start is recorded on the checkpoint topic too,
//! and an init that finds no store after it refuses.

use super::{record_first_start, FirstStart, PipelineError};
use crate::checkpoint::CheckpointStore;
use crate::config::Config;
use crate::sink;

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
        let recorded = record_first_start(config, store.as_ref()).await?;
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
            sink::record_first_start(kafka, topic, name).await?;
            FirstStart::Recorded
        }
    };
    Ok(Init {
        store_created: !existed,
        recorded: Some(recorded),
    })
}
