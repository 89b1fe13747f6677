//! Where exactly-once mode resumes, and when it may start afresh.
//!
//! The commit marker on Kafka is the truth and the store a cache written after it. Of
//! the two, the one with the higher commit number is the later: the store is ahead only
//! when the marker it copied was lost since. An operator's command (`checkpoint set`,
//! `recover`, `import-debezium`) writes its position through the marker for the whole
//! fleet (`super::operator`), so it is a marker like any other. No clock decides
//! anything here: clocks run ahead, step back and differ between the hosts of a
//! standby pair. With neither a marker nor a stored position, a run starts afresh only
//! when a first start was recorded on the topic and nothing says a position ever
//! existed: no deleted marker, no deleted head, and no note on the fleet's lock topic
//! that its markers lived there (or on another topic).

use tracing::{info, warn};

use crate::checkpoint::Checkpoint;
use crate::config::Config;
use crate::pipeline::PipelineError;
use crate::sink::{self, FleetRecord, MarkerHistory};

/// Where an exactly-once run begins.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Resume {
    /// At the newest commit marker.
    Marker(Checkpoint),
    /// At the store's record, committed as marker number `seq` before anything streams:
    /// a commit whose marker was lost since.
    Store { checkpoint: Checkpoint, seq: u64 },
    /// A first start was recorded and no position ever existed: at the position fixed
    /// when it was recorded, or (an older build's record, or an initial snapshot) where
    /// `source.start` says now.
    FirstStart(Option<Checkpoint>),
}

/// What the fleet knows beyond the checkpoint topic: the checkpoint topic its lock
/// topic names for this transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FleetNote {
    pub lock_topic: String,
    pub checkpoint_topic: String,
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
    /// The fleet's lock topic says its markers live on this topic, which has none now:
    /// it was deleted or emptied.
    FleetMarkersLost(FleetNote),
    /// The fleet's lock topic says its markers live on another topic.
    FleetTopicMoved(FleetNote),
    /// An operator's record an older build left in the store, never committed as a
    /// marker: it may be weeks old.
    UncommittedOperatorRecord(Box<Checkpoint>),
    /// Nothing anywhere, and no first start recorded.
    NoFirstStart,
}

/// The start position from the store's record, the newest marker, what the topic
/// says of the marker's history and what the fleet's lock topic notes.
pub(super) fn choose(
    store: Option<Checkpoint>,
    marker: Option<Checkpoint>,
    history: &MarkerHistory,
    fleet: Option<&FleetNote>,
    checkpoint_topic: &str,
) -> Result<Resume, Refusal> {
    match (store, marker) {
        // An older build's `checkpoint set` waited in the store until this instance
        // led, however far the marker had moved since: never applied late.
        (Some(s), _) if s.set_by.is_some() && s.commit_seq == 0 => {
            Err(Refusal::UncommittedOperatorRecord(Box::new(s)))
        }
        // Ahead only on the marker's own line: a store of an older line (before a lost
        // topic was recovered, before an operator's move) is stale however it counts.
        (Some(s), Some(m)) if s.commit_seq > m.commit_seq && s.lineage == m.lineage => {
            Ok(Resume::Store {
                seq: s.commit_seq + 1,
                checkpoint: s,
            })
        }
        (_, Some(m)) => Ok(Resume::Marker(m)),
        // Said as what it most likely is: the topic's name changed under the store.
        (Some(_), None) if fleet.is_some_and(|n| n.checkpoint_topic != checkpoint_topic) => {
            Err(Refusal::FleetTopicMoved(fleet.cloned().expect("checked")))
        }
        (Some(s), None) => Err(Refusal::StoreWithoutMarker(Box::new(s))),
        (None, None) => {
            if history.marker_deleted {
                Err(Refusal::MarkerDeleted)
            } else if let Some(offset) = history.head_deleted_from {
                Err(Refusal::HeadDeleted(offset))
            } else if let Some(note) = fleet {
                match note.checkpoint_topic == checkpoint_topic {
                    // Recorded with the note in one transaction: a first start.
                    true if history.first_start.is_some() => Ok(first_start(history)),
                    true => Err(Refusal::FleetMarkersLost(note.clone())),
                    false => Err(Refusal::FleetTopicMoved(note.clone())),
                }
            } else if history.first_start.is_some() {
                Ok(first_start(history))
            } else {
                Err(Refusal::NoFirstStart)
            }
        }
    }
}

/// A first start at the position its record carries (an older build's text record
/// carries none).
fn first_start(history: &MarkerHistory) -> Resume {
    let fixed = history
        .first_start
        .as_deref()
        .and_then(|v| Checkpoint::decode(v).ok());
    Resume::FirstStart(fixed)
}

/// The newest marker, decoded.
fn decoded_marker(
    config: &Config,
    history: &MarkerHistory,
) -> Result<Option<Checkpoint>, PipelineError> {
    history
        .marker
        .as_deref()
        .map(|bytes| {
            Checkpoint::decode(bytes).map_err(|e| PipelineError::BadMarker {
                topic: config.delivery.checkpoint_topic.clone(),
                key: config.delivery.transactional_id.clone(),
                reason: e.to_string(),
            })
        })
        .transpose()
}

/// The fleet's position in exactly-once mode as every instance reads it: the newest
/// commit marker (`read_committed`). What an operator's command shows or guards; one
/// instance's store is only its copy. `None` in at-least-once mode or with no marker.
pub fn fleet_marker(config: &Config) -> Result<Option<Checkpoint>, PipelineError> {
    if !config.delivery.exactly_once() {
        return Ok(None);
    }
    let history =
        tokio::task::block_in_place(|| sink::marker_history(&config.kafka, &config.delivery))?;
    decoded_marker(config, &history)
}

/// What the fleet's lock topic notes, read only where it can decide something: no
/// marker on the checkpoint topic.
fn fleet_note(
    config: &Config,
    history: &MarkerHistory,
) -> Result<Option<FleetNote>, PipelineError> {
    let Some(lock_topic) = config.fleet_lock_topic() else {
        return Ok(None);
    };
    if history.marker.is_some() {
        return Ok(None);
    }
    let noted = tokio::task::block_in_place(|| {
        sink::fleet_checkpoint_topic(&config.kafka, lock_topic, &config.delivery.transactional_id)
    })?;
    Ok(noted.map(|checkpoint_topic| FleetNote {
        lock_topic: lock_topic.to_string(),
        checkpoint_topic,
    }))
}

/// The checkpoint topic's history of our id, and the fleet's note where it matters.
fn read_history(config: &Config) -> Result<(MarkerHistory, Option<FleetNote>), PipelineError> {
    let read =
        || tokio::task::block_in_place(|| sink::marker_history(&config.kafka, &config.delivery));
    let history = read()?;
    let note = fleet_note(config, &history)?;
    if note.is_some() && history.marker.is_none() && history.first_start.is_none() {
        // The note and the first start commit in one transaction, and the topic was
        // read before the note: another instance may have committed both in between.
        // Read after the note, the topic shows whatever committed with it.
        return Ok((read()?, note));
    }
    Ok((history, note))
}

/// The newest marker and its history, read after this run's `init_transactions` (every
/// transaction of the id is decided), and what to do with them.
pub(super) fn resume(config: &Config, store: Option<Checkpoint>) -> Result<Resume, PipelineError> {
    let started = std::time::Instant::now();
    let (history, note) = read_history(config)?;
    tracing::debug!(
        read_ms = started.elapsed().as_millis() as u64,
        "read the newest commit marker"
    );
    let marker = decoded_marker(config, &history)?;
    let topic = &config.delivery.checkpoint_topic;
    let chosen =
        choose(store, marker, &history, note.as_ref(), topic).map_err(|r| refused(config, r))?;
    match &chosen {
        Resume::Marker(m) => {
            info!(position = %m.position, commit_seq = m.commit_seq, topic, "resuming from the last committed Kafka transaction")
        }
        Resume::Store { checkpoint, .. } => {
            warn!(position = %checkpoint.position, commit_seq = checkpoint.commit_seq, topic, "the store holds a later commit than the newest marker on the topic (a marker was lost): resuming from the store and committing it as the marker first")
        }
        Resume::FirstStart(Some(at)) => {
            info!(position = %at.position, topic, "first start: at the position fixed when the first start was recorded")
        }
        Resume::FirstStart(None) => {}
    }
    note_fleet_topic_aside(config);
    Ok(chosen)
}

/// A leader notes on the fleet's lock topic where its markers live, for fleets recorded
/// before the note existed; off the start's path (a takeover waits for none of it).
fn note_fleet_topic_aside(config: &Config) {
    let Some(lock_topic) = config.fleet_lock_topic().map(str::to_string) else {
        return;
    };
    let (kafka, delivery) = (config.kafka.clone(), config.delivery.clone());
    tokio::spawn(async move {
        let noted = sink::note_fleet_checkpoint_topic(
            &kafka,
            &lock_topic,
            &delivery.transactional_id,
            &delivery.checkpoint_topic,
        )
        .await;
        if let Err(e) = noted {
            warn!(lock_topic, error = %e, "cannot note on the lock topic which checkpoint topic holds the markers; an instance that never led cannot tell a lost checkpoint topic from a first start until it is noted");
        }
    });
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

/// What the checkpoint topic and the fleet say of a first start now: decided, to be
/// recorded (`None`), or refused.
pub(super) fn first_start_state(
    config: &Config,
    store: Option<&Checkpoint>,
) -> Result<Option<FirstStart>, PipelineError> {
    let (history, note) = read_history(config)?;
    if history.marker.is_some() {
        return Ok(Some(FirstStart::HasMarker));
    }
    let topic = &config.delivery.checkpoint_topic;
    match choose(store.cloned(), None, &history, note.as_ref(), topic) {
        Ok(Resume::FirstStart(_)) => Ok(Some(FirstStart::AlreadyRecorded)),
        Ok(Resume::Store { .. }) => Ok(Some(FirstStart::HasStore)),
        Ok(Resume::Marker(_)) => unreachable!("no marker was given"),
        Err(Refusal::NoFirstStart) => Ok(None),
        Err(refusal) => Err(refused(config, refusal)),
    }
}

/// The lock topic's note that the fleet's markers live on `delivery.checkpoint_topic`
/// (the lock topic created if missing), for a transaction of the fleet's own; `None`
/// for a single router.
pub(super) fn fleet_note_record(config: &Config) -> Result<Option<FleetRecord>, PipelineError> {
    let Some(lock_topic) = config.fleet_lock_topic() else {
        return Ok(None);
    };
    crate::kafka::TopicCreator::new(&config.kafka)
        .map_err(sink::SinkError::from)?
        .ensure_compacted(lock_topic, "lock")
        .map_err(sink::SinkError::from)?;
    let delivery = &config.delivery;
    Ok(Some(FleetRecord {
        topic: lock_topic.to_string(),
        key: sink::fleet_key(&delivery.transactional_id),
        value: delivery.checkpoint_topic.clone().into_bytes(),
    }))
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
        Refusal::FleetMarkersLost(note) => PipelineError::MarkerLost {
            topic,
            transactional_id,
            how: format!("the fleet's lock topic {} notes that its markers live on this topic, so the topic was deleted or emptied since (an instance that never led cannot tell where the fleet was)", note.lock_topic),
        },
        Refusal::FleetTopicMoved(note) => PipelineError::CheckpointTopicMoved {
            topic,
            transactional_id,
            lock_topic: note.lock_topic,
            noted: note.checkpoint_topic,
        },
        Refusal::UncommittedOperatorRecord(s) => PipelineError::UncommittedOperatorRecord {
            dir: config.checkpoint.dir.display().to_string(),
            position: s.position.to_string(),
            command: s.set_by.map(|c| c.to_string()).unwrap_or_default(),
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

    const TOPIC: &str = "cp";

    fn at(offset: u64, seq: u64) -> Checkpoint {
        Checkpoint::new(format!("mysql-bin.000001:{offset}").parse().unwrap(), 0).committed_as(seq)
    }

    fn nothing() -> MarkerHistory {
        MarkerHistory::default()
    }

    fn pick(
        store: Option<Checkpoint>,
        marker: Option<Checkpoint>,
        history: &MarkerHistory,
    ) -> Result<Resume, Refusal> {
        choose(store, marker, history, None, TOPIC)
    }

    #[test]
    fn the_higher_commit_number_wins_whatever_the_clocks_wrote() {
        // A store written by a host whose clock runs a day ahead, a commit behind.
        let mut stale = at(100, 7);
        stale.written_at_ms += 86_400_000;
        let marker = at(900, 8);
        assert_eq!(
            pick(Some(stale), Some(marker.clone()), &nothing()),
            Ok(Resume::Marker(marker.clone()))
        );
        // The same commit in both: the marker.
        let mut copy = marker.clone();
        copy.written_at_ms -= 5;
        assert_eq!(
            pick(Some(copy), Some(marker.clone()), &nothing()),
            Ok(Resume::Marker(marker.clone()))
        );
        // A store ahead (its marker lost since): the store, committed one past it.
        let ahead = at(1200, 9);
        assert_eq!(
            pick(Some(ahead.clone()), Some(marker), &nothing()),
            Ok(Resume::Store {
                checkpoint: ahead,
                seq: 10
            })
        );
    }

    #[test]
    fn an_operators_record_is_a_marker_and_never_applied_after_the_marker_moved_on() {
        // Written through the marker as #9; the leader committed #10 and #11 since.
        let set = Checkpoint::new("mysql-bin.000001:50".parse().unwrap(), 0)
            .committed_as(9)
            .set_by(OperatorCommand::CheckpointSet);
        let moved_on = at(900, 11);
        assert_eq!(
            pick(Some(set.clone()), Some(moved_on.clone()), &nothing()),
            Ok(Resume::Marker(moved_on))
        );
        // A checkpoint topic lost and recovered by an operator: marker #1 of a new line
        // wins over an instance's store of the old line, however high it counted.
        let old_line = at(900, 57).new_lineage();
        let recovered = at(400, 1).new_lineage();
        assert_eq!(
            pick(Some(old_line), Some(recovered.clone()), &nothing()),
            Ok(Resume::Marker(recovered))
        );
        // An older build's record, never committed as a marker: refused, not applied.
        let legacy = Checkpoint::new("mysql-bin.000001:50".parse().unwrap(), 0)
            .set_by(OperatorCommand::CheckpointSet);
        assert_eq!(
            pick(Some(legacy.clone()), Some(at(900, 8)), &nothing()),
            Err(Refusal::UncommittedOperatorRecord(Box::new(legacy)))
        );
    }

    #[test]
    fn a_position_that_may_have_existed_refuses_a_first_start() {
        let fixed = at(100, 0);
        let recorded = MarkerHistory {
            first_start: Some(fixed.encode()),
            ..nothing()
        };
        assert_eq!(
            pick(None, None, &recorded),
            Ok(Resume::FirstStart(Some(fixed)))
        );
        let older_build = MarkerHistory {
            first_start: Some(b"first start recorded at unix ms 1".to_vec()),
            ..nothing()
        };
        assert_eq!(pick(None, None, &older_build), Ok(Resume::FirstStart(None)));
        assert_eq!(pick(None, None, &nothing()), Err(Refusal::NoFirstStart));
        let store = at(100, 3);
        assert_eq!(
            pick(Some(store.clone()), None, &recorded),
            Err(Refusal::StoreWithoutMarker(Box::new(store)))
        );
        let deleted = MarkerHistory {
            marker_deleted: true,
            ..recorded
        };
        assert_eq!(pick(None, None, &deleted), Err(Refusal::MarkerDeleted));
        let truncated = MarkerHistory {
            head_deleted_from: Some(40),
            first_start: Some(Vec::new()),
            ..nothing()
        };
        assert_eq!(pick(None, None, &truncated), Err(Refusal::HeadDeleted(40)));
    }

    #[test]
    fn the_fleets_note_refuses_a_first_start_on_a_lost_or_renamed_topic() {
        let here = FleetNote {
            lock_topic: "lock".into(),
            checkpoint_topic: TOPIC.into(),
        };
        // The note and no record on its topic: the topic was deleted or emptied.
        assert_eq!(
            choose(None, None, &nothing(), Some(&here), TOPIC),
            Err(Refusal::FleetMarkersLost(here.clone()))
        );
        // The note and the first start, written together: a first start.
        let five = at(5, 0);
        let recorded = MarkerHistory {
            first_start: Some(five.encode()),
            ..nothing()
        };
        assert_eq!(
            choose(None, None, &recorded, Some(&here), TOPIC),
            Ok(Resume::FirstStart(Some(five)))
        );
        // The note names another topic: renamed, whatever this one holds.
        let elsewhere = FleetNote {
            checkpoint_topic: "old".into(),
            ..here
        };
        assert_eq!(
            choose(None, None, &recorded, Some(&elsewhere), TOPIC),
            Err(Refusal::FleetTopicMoved(elsewhere.clone()))
        );
        // A marker decides whatever the note says (a moved topic, carried over).
        let marker = at(7, 3);
        assert_eq!(
            choose(
                None,
                Some(marker.clone()),
                &nothing(),
                Some(&elsewhere),
                TOPIC
            ),
            Ok(Resume::Marker(marker))
        );
    }
}
