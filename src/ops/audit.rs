//! The audit trail: every replay and republish says who, when, why, what and how many,
//! in a JSON-lines file (flushed to disk before the first record goes out) and, when
//! configured, an audit topic.
//!
//! A replay writes two entries with its id: `started` before anything is sent, and its
//! outcome after; a replay that never wrote an outcome was killed part-way.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::checkpoint::CheckpointConfig;
use crate::config::OpsConfig;
use crate::outbox::EventId;
use crate::position::TableName;
use crate::route::{EventRef, Record};
use crate::sink::Sink;

/// Why the audit trail could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot write the audit file {path}: {source}; nothing was replayed")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the audit file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("audit file {path} line {line} is not an audit entry: {source}")]
    Parse {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
    #[error("cannot send the audit entry to ops.audit_topic {topic}: {source}")]
    Topic {
        topic: String,
        source: Box<crate::sink::SinkError>,
    },
}

/// One entry of the trail. The seed's `replayed_by / replayed_at / replay_reason` are
/// `by`, `at` and `reason`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// The replay's id, also the value of the replay header on every record it sent.
    pub id: String,
    /// `replay` or `republish` (reconcile's missing events).
    pub action: String,
    /// Who asked (`--by`, default the OS user).
    pub by: String,
    /// When this entry was written (RFC 3339, UTC).
    pub at: String,
    /// Why (`--reason`).
    pub reason: String,
    /// What was selected, as the command was given it.
    pub selection: serde_json::Value,
    /// `started`, `completed`, `stopped` or `failed: …`.
    pub outcome: String,
    /// Records sent and acknowledged so far.
    pub count: u64,
    /// First event id sent.
    pub first_event_id: Option<String>,
    /// Last event id sent.
    pub last_event_id: Option<String>,
    /// Topics written to.
    pub topics: Vec<String>,
    /// The claim check's objects (`s3://bucket/key`) written for the records sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<String>,
}

impl AuditEntry {
    /// The same replay at a later point: new time, outcome and counts.
    pub fn then(&self, outcome: impl Into<String>) -> Self {
        Self {
            at: now_rfc3339(),
            outcome: outcome.into(),
            ..self.clone()
        }
    }
}

/// The current time as RFC 3339 with milliseconds, UTC.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// The OS user running this process, for `--by`'s default.
pub fn os_user() -> String {
    ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "unknown".into())
}

/// Where entries go: the file, and the topic when configured.
pub struct AuditTrail<'a> {
    path: PathBuf,
    topic: Option<&'a str>,
}

impl<'a> AuditTrail<'a> {
    /// The trail `ops` names (by default beside the checkpoint store).
    pub fn new(ops: &'a OpsConfig, checkpoint: &CheckpointConfig) -> Self {
        Self {
            path: ops.audit_file(&checkpoint.dir),
            topic: ops.audit_topic.as_deref(),
        }
    }

    /// Appends `entry` to the file (synced) and sends it to the topic through `sink`.
    pub async fn write(&self, entry: &AuditEntry, sink: &dyn Sink) -> Result<(), AuditError> {
        let write_failed = |source| AuditError::Write {
            path: self.path.clone(),
            source,
        };
        let line = serde_json::to_string(entry).expect("audit entries serialize");
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(write_failed)?;
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(write_failed)?;
        writeln!(file, "{line}").map_err(write_failed)?;
        file.sync_data().map_err(write_failed)?;
        if let Some(topic) = self.topic {
            let record = Record {
                topic: topic.into(),
                key: entry.id.clone().into_bytes(),
                value: Some(line.into_bytes()),
                headers: Vec::new(),
                timestamp_ms: crate::checkpoint::now_ms(),
                partition: None,
                event: EventRef {
                    table: Arc::new(TableName {
                        database: "outbox-router".into(),
                        table: "audit".into(),
                    }),
                    position: "-".into(),
                    id: EventId(entry.id.clone().into_bytes()),
                    aggregate_type: None,
                    trace: None,
                },
                claim_check: false,
                trace: None,
            };
            let topic_failed = |source| AuditError::Topic {
                topic: topic.to_string(),
                source: Box::new(source),
            };
            sink.send(vec![record])
                .await
                .map_err(topic_failed)?
                .await
                .map_err(topic_failed)?;
        }
        Ok(())
    }

    /// Every entry in the file, oldest first (none when there is no file yet).
    pub fn read(&self) -> Result<Vec<AuditEntry>, AuditError> {
        read_file(&self.path)
    }
}

fn read_file(path: &Path) -> Result<Vec<AuditEntry>, AuditError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(AuditError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|source| AuditError::Parse {
                path: path.to_path_buf(),
                line: i + 1,
                source,
            })
        })
        .collect()
}

/// One line per replay: its last entry (the outcome), or its start when it has none.
pub fn latest_per_replay(entries: &[AuditEntry]) -> Vec<AuditEntry> {
    let mut out: Vec<AuditEntry> = Vec::new();
    for e in entries {
        match out.iter_mut().find(|o| o.id == e.id) {
            Some(o) => *o = e.clone(),
            None => out.push(e.clone()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, outcome: &str) -> AuditEntry {
        AuditEntry {
            id: id.into(),
            action: "replay".into(),
            by: "ops".into(),
            at: now_rfc3339(),
            reason: "consumer bug".into(),
            selection: serde_json::json!({"aggregate_id": "o1"}),
            outcome: outcome.into(),
            count: 0,
            first_event_id: None,
            last_event_id: None,
            topics: Vec::new(),
            objects: Vec::new(),
        }
    }

    #[test]
    fn a_replay_shows_once_with_its_outcome() {
        let all = [
            entry("a", "started"),
            entry("b", "started"),
            entry("a", "completed"),
        ];
        let latest = latest_per_replay(&all);
        let outcomes: Vec<(&str, &str)> = latest
            .iter()
            .map(|e| (e.id.as_str(), e.outcome.as_str()))
            .collect();
        assert_eq!(outcomes, [("a", "completed"), ("b", "started")]);
    }
}
