//! The stored checkpoint record: `ORC` magic, a format version, JSON body, CRC32.

use serde::{Deserialize, Serialize};

use crate::position::Position;

/// Milliseconds since the epoch, now.
pub fn now_ms() -> i64 {
    let real = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    // Tests run an instance whose wall clock is off (`return(OFFSET_MS)`): libfaketime
    // cannot be preloaded under mimalloc's malloc override.
    fail::fail_point!("clock.wall_offset_ms", |offset| {
        real + offset.and_then(|o| o.parse::<i64>().ok()).unwrap_or(0)
    });
    real
}

const MAGIC: &[u8; 3] = b"ORC";
const VERSION: u8 = 1;

/// Why a stored record could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("record is {0} bytes, too short to be a checkpoint")]
    TooShort(usize),
    #[error("record does not start with the checkpoint magic bytes")]
    BadMagic,
    #[error("record format version {0} is not supported (this build reads version {VERSION}): a newer outbox-router wrote it; run that version (or newer)")]
    UnsupportedVersion(u8),
    #[error("record checksum mismatch (stored {stored:08x}, computed {computed:08x}): the store is damaged")]
    Checksum { stored: u32, computed: u32 },
    #[error("record body is not a checkpoint: {0}")]
    Body(String),
}

/// A durable checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Resume here: the end of the last fully acknowledged transaction (or, while an XA
    /// branch is prepared, the position before its PREPARE).
    pub position: Position,
    /// When `position` is held before a prepared XA branch: everything up to here was
    /// delivered, so a resume re-reads the branch and publishes nothing else up to it.
    /// Absent in records of older builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_through: Option<Position>,
    /// `@@server_id` of the server whose binlog `position` points into: file names and
    /// offsets only mean something there. Absent in records of older builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_id: Option<u32>,
    /// Commit time of that transaction (ms since epoch), 0 when unknown.
    pub commit_time_ms: i64,
    /// When the checkpoint was written (ms since epoch): for people reading it, never
    /// to order records (clocks run ahead, step back and differ between hosts).
    pub written_at_ms: i64,
    /// Exactly-once mode: the number of the Kafka transaction whose commit marker this is
    /// (or a copy of, in the store). Each commit numbers its marker one past the record
    /// it resumed from, so of a store and a marker the higher number is the later one,
    /// whatever any clock says. 0: written by at-least-once mode or an older build.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub commit_seq: u64,
    /// Written by an operator's command, not by a run (exactly-once: committed as the
    /// fleet's marker by the command itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_by: Option<OperatorCommand>,
    /// Exactly-once mode: the line of commit markers this one continues. A new line
    /// begins at each first start and each operator's move (a checkpoint topic lost and
    /// recovered starts numbering again); a store's copy is later than a marker only on
    /// the same line — a stale store of an older line never wins over an operator's
    /// marker. Absent in records of older builds (one line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage: Option<u64>,
}

/// The commands that move a checkpoint by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OperatorCommand {
    CheckpointSet,
    Recover,
    ImportDebezium,
}

impl std::fmt::Display for OperatorCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::CheckpointSet => "checkpoint set",
            Self::Recover => "recover",
            Self::ImportDebezium => "import-debezium",
        })
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Checkpoint {
    /// A checkpoint at `position`, written now.
    pub fn new(position: Position, commit_time_ms: i64) -> Self {
        Self {
            position,
            delivered_through: None,
            server_id: None,
            commit_time_ms,
            written_at_ms: now_ms(),
            lineage: None,
            commit_seq: 0,
            set_by: None,
        }
    }

    /// The same checkpoint, moved there by `command`.
    pub fn set_by(self, command: OperatorCommand) -> Self {
        Self {
            set_by: Some(command),
            ..self
        }
    }

    /// The same checkpoint as the marker of Kafka transaction number `seq`, written now.
    pub fn committed_as(self, seq: u64) -> Self {
        Self {
            commit_seq: seq,
            set_by: None,
            written_at_ms: now_ms(),
            ..self
        }
    }

    /// The same checkpoint, a position in the binlog of server `server_id`.
    /// This record beginning a new line of markers (a first start, an operator's move).
    pub fn new_lineage(self) -> Self {
        Self {
            lineage: Some(uuid::Uuid::new_v4().as_u64_pair().0),
            ..self
        }
    }

    pub fn on_server(self, server_id: u32) -> Self {
        Self {
            server_id: Some(server_id),
            ..self
        }
    }

    /// Whether everything committed up to `other` (a position on server `server_id`) is
    /// delivered: by GTID where both positions carry one, else by file and offset, which
    /// is only an answer on the server that wrote the file (`None` otherwise, or for
    /// differently named binlogs).
    pub fn includes(&self, other: &Position, server_id: u32) -> Option<bool> {
        if self.foreign_file_position(other, server_id).is_some() {
            return None;
        }
        self.position.includes(other)
    }

    /// The checkpoint's server, when comparing it with `other` (a position on server
    /// `server_id`) would have to go by file and offset across servers.
    pub fn foreign_file_position(&self, other: &Position, server_id: u32) -> Option<u32> {
        self.server_id
            .filter(|mine| *mine != server_id && !self.position.compares_by_gtid(other))
    }

    /// The same checkpoint, delivered up to `through` beyond its position.
    pub fn delivered_through(self, through: Option<Position>) -> Self {
        Self {
            delivered_through: through,
            ..self
        }
    }

    /// Encodes as magic, version, JSON body, CRC32 of everything before it.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        serde_json::to_writer(&mut out, self).expect("a checkpoint always serialises");
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and verifies a stored record.
    pub fn decode(bytes: &[u8]) -> Result<Self, RecordError> {
        if bytes.len() < MAGIC.len() + 1 + 4 {
            return Err(RecordError::TooShort(bytes.len()));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
        let computed = crc32fast::hash(body);
        if &body[..3] != MAGIC {
            return Err(RecordError::BadMagic);
        }
        if body[3] != VERSION {
            return Err(RecordError::UnsupportedVersion(body[3]));
        }
        if stored != computed {
            return Err(RecordError::Checksum { stored, computed });
        }
        serde_json::from_slice(&body[4..]).map_err(|e| RecordError::Body(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_newer_record_says_which_build_reads_it() {
        let mut bytes = sample().encode();
        bytes[3] = VERSION + 1;
        let e = Checkpoint::decode(&bytes).unwrap_err().to_string();
        assert!(e.contains("a newer outbox-router wrote it"), "{e}");
    }

    fn sample() -> Checkpoint {
        Checkpoint {
            position: "mysql-bin.000007:1234 gtid=0-1-99".parse().unwrap(),
            delivered_through: Some("mysql-bin.000007:5678 gtid=0-1-104".parse().unwrap()),
            server_id: Some(1),
            commit_time_ms: 1_700_000_000_000,
            written_at_ms: 1_700_000_000_500,
            commit_seq: 42,
            set_by: None,
            lineage: Some(7),
        }
    }

    #[test]
    fn round_trip() {
        assert_eq!(Checkpoint::decode(&sample().encode()).unwrap(), sample());
        let plain = Checkpoint::new("mysql-bin.000007:1234".parse().unwrap(), 1);
        assert_eq!(Checkpoint::decode(&plain.encode()).unwrap(), plain);
        // A record of an older build (no delivered_through) still reads.
        let old = br#"{"position":{"file":"mysql-bin.000007","offset":1234,"gtid":""},"commit_time_ms":1,"written_at_ms":2}"#;
        let mut bytes = b"ORC\x01".to_vec();
        bytes.extend_from_slice(old);
        let crc = crc32fast::hash(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        let decoded = Checkpoint::decode(&bytes).unwrap();
        assert_eq!(decoded.delivered_through, None);
        assert_eq!(decoded.server_id, None);
        assert_eq!((decoded.commit_seq, decoded.set_by), (0, None));
        let set = plain.set_by(OperatorCommand::Recover);
        assert_eq!(Checkpoint::decode(&set.encode()).unwrap(), set);
    }

    #[test]
    fn file_positions_compare_only_on_their_server() {
        let cp = Checkpoint::new("mysql-bin.000009:4".parse().unwrap(), 0).on_server(1);
        let before: Position = "mysql-bin.000007:1234".parse().unwrap();
        assert_eq!(cp.includes(&before, 1), Some(true));
        assert_eq!(
            cp.includes(&before, 2),
            None,
            "another server's mysql-bin.000007"
        );
        // Written by an older build: compared by file, as before.
        let old = Checkpoint {
            server_id: None,
            ..cp.clone()
        };
        assert_eq!(old.includes(&before, 2), Some(true));
        // GTIDs name transactions, not files: valid across servers.
        let gtid =
            Checkpoint::new("mysql-bin.000001:4 gtid=0-1-10".parse().unwrap(), 0).on_server(1);
        let snapshot: Position = "mysql-bin.000042:4 gtid=0-1-9".parse().unwrap();
        assert_eq!(gtid.includes(&snapshot, 2), Some(true));
        let later: Position = "mysql-bin.000042:4 gtid=0-1-11".parse().unwrap();
        assert_eq!(gtid.includes(&later, 2), Some(false));
    }

    #[test]
    fn every_flipped_bit_is_detected() {
        let good = sample().encode();
        for i in 0..good.len() * 8 {
            let mut bad = good.clone();
            bad[i / 8] ^= 1 << (i % 8);
            assert!(
                Checkpoint::decode(&bad).is_err(),
                "bit {i} flip went unnoticed"
            );
        }
        assert!(Checkpoint::decode(&good[..good.len() - 1]).is_err());
    }
}
