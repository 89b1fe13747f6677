//! Where exactly-once mode resumes, and when it may start afresh.
//!
//! The commit marker on Kafka is the truth and the store a cache written after it. Of
//! the two, the one with the higher commit number is the later: the store is ahead only
//! when the marker it copied was lost since. An operator's record (`checkpoint set`,
//! `recover`, `import-debezium`) is taken over both, once. No clock decides anything
//! here: clocks run ahead, step back and differ between the hosts of a standby pair.
//! With neither a marker nor a stored position, a run starts afresh only when a first
//! start was recorded on the topic and nothing there says a marker ever existed.

use tracing::{info, warn};

use super::PipelineError;
use crate::checkpoint::Checkpoint;
use crate::config::Config;
use crate::sink::{self, MarkerHistory};

/// Where an exactly-once run begins.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Resume {
    /// At the newest commit marker.
    Marker(Checkpoint),
    /// At the store's record, committed as marker number `seq` before anything streams:
    /// an operator's move, or a commit whose marker was lost since.
    Store { checkpoint: Checkpoint, seq: u64 },
    /// At `source.start`: a first start was recorded and no position ever existed.
    FirstStart,
}

/// Why no start position can be chosen.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The store holds a position the topic has no marker for.
    StoreWithoutMarker(Box<Checkpoint>),
    /// The marker's key was deleted (a tombstone).
    MarkerDeleted,
    /// Records were deleted from the topic's head.
    HeadDeleted(i64),
    /// Nothing anywhere, and no first start recorded.
    NoFirstStart,
}

/// The start position from the store's record, the newest marker and what the topic
/// says of the marker's history.
pub(super) fn choose(
    store: Option<Checkpoint>,
    marker: Option<Checkpoint>,
    history: &MarkerHistory,
) -> Result<Resume, Refusal> {
    match (store, marker) {
        (Some(s), marker) if s.set_by.is_some() => Ok(Resume::Store {
            seq: s.commit_seq.max(marker.map_or(0, |m| m.commit_seq)) + 1,
            checkpoint: s,
        }),
        (Some(s), Some(m)) if s.commit_seq > m.commit_seq => Ok(Resume::Store {
            seq: s.commit_seq + 1,
            checkpoint: s,
        }),
        (_, Some(m)) => Ok(Resume::Marker(m)),
        (Some(s), None) => Err(Refusal::StoreWithoutMarker(Box::new(s))),
        (None, None) => {
            if history.marker_deleted {
                Err(Refusal::MarkerDeleted)
            } else if let Some(offset) = history.head_deleted_from {
                Err(Refusal::HeadDeleted(offset))
            } else if history.first_start_recorded {
                Ok(Resume::FirstStart)
            } else {
                Err(Refusal::NoFirstStart)
            }
        }
    }
}

/// The newest marker and its history, read after this run's `init_transactions` (every
/// transaction of the id is decided), and what to do with them.
pub(super) fn resume(config: &Config, store: Option<Checkpoint>) -> Result<Resume, PipelineError> {
    let started = std::time::Instant::now();
    let history =
        tokio::task::block_in_place(|| sink::marker_history(&config.kafka, &config.delivery))?;
    tracing::debug!(
        read_ms = started.elapsed().as_millis() as u64,
        "read the newest commit marker"
    );
    let marker = history
        .marker
        .as_deref()
        .map(|bytes| {
            Checkpoint::decode(bytes).map_err(|e| PipelineError::BadMarker {
                topic: config.delivery.checkpoint_topic.clone(),
                key: config.delivery.transactional_id.clone(),
                reason: e.to_string(),
            })
        })
        .transpose()?;
    let chosen = choose(store, marker, &history).map_err(|r| refused(config, r))?;
    let topic = &config.delivery.checkpoint_topic;
    match &chosen {
        Resume::Marker(m) => {
            info!(position = %m.position, commit_seq = m.commit_seq, topic, "resuming from the last committed Kafka transaction")
        }
        Resume::Store { checkpoint, .. } => match checkpoint.set_by {
            Some(command) => {
                warn!(position = %checkpoint.position, %command, topic, "resuming where `{command}` put the checkpoint, over the commit marker; committing it as the marker first")
            }
            None => {
                warn!(position = %checkpoint.position, commit_seq = checkpoint.commit_seq, topic, "the store holds a later commit than the newest marker on the topic (a marker was lost): resuming from the store and committing it as the marker first")
            }
        },
        Resume::FirstStart => {}
    }
    Ok(chosen)
}

/// Whether `run --init` / `checkpoint init` recorded a first start.
#[derive(Debug, PartialEq, Eq)]
pub enum FirstStart {
    /// Recorded now.
    Recorded,
    /// Recorded before, by this or another instance; no run committed yet.
    AlreadyRecorded,
    /// A commit marker exists: runs resume there.
    HasMarker,
    /// The store holds a position: runs resume there.
    HasStore,
}

/// Records exactly-once mode's first start on the checkpoint topic where no position
/// exists anywhere: no marker, no stored position, no trace of a deleted marker. Where a
/// position may have existed it refuses, as the start would.
pub async fn record_first_start(
    config: &Config,
    store: Option<&Checkpoint>,
) -> Result<FirstStart, PipelineError> {
    let (kafka, delivery) = (&config.kafka, &config.delivery);
    sink::ensure_checkpoint_topic(kafka, delivery)?;
    let history = tokio::task::block_in_place(|| sink::marker_history(kafka, delivery))?;
    if history.marker.is_some() {
        return Ok(FirstStart::HasMarker);
    }
    match choose(store.cloned(), None, &history) {
        Ok(Resume::FirstStart) => return Ok(FirstStart::AlreadyRecorded),
        Ok(Resume::Store { .. }) => return Ok(FirstStart::HasStore),
        Ok(Resume::Marker(_)) => unreachable!("no marker was given"),
        Err(Refusal::NoFirstStart) => {}
        Err(refusal) => return Err(refused(config, refusal)),
    }
    sink::record_first_start(
        kafka,
        &delivery.checkpoint_topic,
        &delivery.transactional_id,
    )
    .await?;
    Ok(FirstStart::Recorded)
}

fn refused(config: &Config, refusal: Refusal) -> PipelineError {
    let topic = config.delivery.checkpoint_topic.clone();
    let transactional_id = config.delivery.transactional_id.clone();
    match refusal {
        Refusal::StoreWithoutMarker(s) => PipelineError::StoreWithoutMarker {
            topic,
            transactional_id,
            dir: config.checkpoint.dir.display().to_string(),
            position: s.position.to_string(),
        },
        Refusal::MarkerDeleted => PipelineError::MarkerLost {
            topic,
            transactional_id,
            how: "its newest record under that key is a tombstone (the marker was deleted)"
                .into(),
        },
        Refusal::HeadDeleted(offset) => PipelineError::MarkerLost {
            topic,
            transactional_id,
            how: format!("records below offset {offset} were deleted from the topic, and a marker may have been among them"),
        },
        Refusal::NoFirstStart => PipelineError::NoCommitMarker {
            topic,
            transactional_id,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::OperatorCommand;

    fn at(offset: u64, seq: u64) -> Checkpoint {
        Checkpoint::new(format!("mysql-bin.000001:{offset}").parse().unwrap(), 0).committed_as(seq)
    }

    fn nothing() -> MarkerHistory {
        MarkerHistory::default()
    }

    #[test]
    fn the_higher_commit_number_wins_whatever_the_clocks_wrote() {
        // A store written by a host whose clock runs a day ahead, a commit behind.
        let mut stale = at(100, 7);
        stale.written_at_ms += 86_400_000;
        let marker = at(900, 8);
        assert_eq!(
            choose(Some(stale), Some(marker.clone()), &nothing()),
            Ok(Resume::Marker(marker.clone()))
        );
        // The same commit in both: the marker.
        let mut copy = marker.clone();
        copy.written_at_ms -= 5;
        assert_eq!(
            choose(Some(copy), Some(marker.clone()), &nothing()),
            Ok(Resume::Marker(marker.clone()))
        );
        // A store ahead (its marker lost since): the store, committed one past it.
        let ahead = at(1200, 9);
        assert_eq!(
            choose(Some(ahead.clone()), Some(marker), &nothing()),
            Ok(Resume::Store {
                checkpoint: ahead,
                seq: 10
            })
        );
    }

    #[test]
    fn an_operators_record_is_taken_once_numbered_past_the_marker() {
        let set = Checkpoint::new("mysql-bin.000001:50".parse().unwrap(), 0)
            .set_by(OperatorCommand::CheckpointSet);
        assert_eq!(
            choose(Some(set.clone()), Some(at(900, 8)), &nothing()),
            Ok(Resume::Store {
                checkpoint: set.clone(),
                seq: 9
            })
        );
        assert_eq!(
            choose(Some(set.clone()), None, &nothing()),
            Ok(Resume::Store {
                checkpoint: set,
                seq: 1
            })
        );
    }

    #[test]
    fn a_position_that_may_have_existed_refuses_a_first_start() {
        let recorded = MarkerHistory {
            first_start_recorded: true,
            ..nothing()
        };
        assert_eq!(choose(None, None, &recorded), Ok(Resume::FirstStart));
        assert_eq!(choose(None, None, &nothing()), Err(Refusal::NoFirstStart));
        let store = at(100, 3);
        assert_eq!(
            choose(Some(store.clone()), None, &recorded),
            Err(Refusal::StoreWithoutMarker(Box::new(store)))
        );
        let deleted = MarkerHistory {
            marker_deleted: true,
            ..recorded
        };
        assert_eq!(choose(None, None, &deleted), Err(Refusal::MarkerDeleted));
        let truncated = MarkerHistory {
            head_deleted_from: Some(40),
            first_start_recorded: true,
            ..nothing()
        };
        assert_eq!(
            choose(None, None, &truncated),
            Err(Refusal::HeadDeleted(40))
        );
    }
}
