//! A whole archived file checked before anything of it is read: it begins with the magic
//! bytes, every event ends inside it, it ends as a finished file does, and it belongs to
//! the checkpoint's history (its server, its GTID list, the file it rotates to).

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use mysql_async::binlog::events::RotateEvent;
use mysql_common::binlog::consts::BinlogVersion;
use mysql_common::binlog::EventStreamReader;

use super::format::{
    sizes, FORMAT_DESCRIPTION, GTID_LIST, HEADER_LEN, MAGIC, MAX_EVENT_BYTES, ROTATE, STOP,
    UNFINISHED,
};
use crate::position::{GtidState, MariaGtidState};
use crate::source::{BinlogFile, Position, SourceError};

/// What walking a file's event headers found (see `survey`).
#[derive(Debug, Default)]
pub(super) struct Survey {
    /// The server id in its format description's header: the server that wrote it.
    server_id: Option<u32>,
    /// Its GTID list (MariaDB): the binlog state at its start.
    gtid_list: Option<MariaGtidState>,
    /// The file its final ROTATE names; `None` when it ends with STOP.
    rotates_to: Option<String>,
}

impl Survey {
    /// Whether `file` (at `path`), followed by `next`, belongs to the history of a
    /// checkpoint at `from` on server `server_id`.
    pub(super) fn belongs(
        &self,
        path: &Path,
        file: &BinlogFile,
        next: &BinlogFile,
        from: &Position,
        server_id: Option<u32>,
    ) -> Result<(), SourceError> {
        let foreign = |reason: String| SourceError::ArchiveForeign {
            file: path.to_path_buf(),
            reason,
        };
        if let Some(to) = &self.rotates_to {
            if to != next.name() {
                return Err(foreign(format!(
                    "it rotates to {to}, but the file after it is {next}: a mislabelled or foreign copy"
                )));
            }
        }
        if let (Some(theirs), Some(ours)) = (self.server_id, server_id) {
            if theirs != ours {
                return Err(foreign(format!(
                    "it was written by server_id {theirs}, and the checkpoint is in the binlog of server_id {ours}"
                )));
            }
        }
        if let (Some(list), GtidState::MariaDb(at)) = (&self.gtid_list, &from.gtid) {
            let (fits, relation) = if *file == from.file {
                (at.includes(list), "the checkpoint lies inside it")
            } else {
                (list.includes(at), "it follows the checkpoint's file")
            };
            if !fits {
                return Err(foreign(format!(
                    "its GTID list {list} does not fit the checkpoint's GTID state {at} ({relation}): another server's or another history's file"
                )));
            }
        }
        Ok(())
    }
}

/// Events between checks of the stop flag.
const STOP_CHECK_EVERY: u64 = 4096;

/// Walks a file's event headers, reading bodies only of the events it needs (format
/// description, GTID list, ROTATE): it begins with the magic bytes, each event ends
/// where its header says and inside the file, and the last one is the ROTATE or STOP a
/// finished file ends with. Reads the file once, front to back, at disk speed: bodies
/// are skipped inside the buffer, large ones by a seek.
pub(super) fn survey(path: &Path, stop: &AtomicBool) -> Result<Survey, SourceError> {
    let damaged = |offset: u64, reason: String| SourceError::ArchiveDamaged {
        file: path.to_path_buf(),
        offset,
        reason,
    };
    let unreadable = |source| SourceError::ArchiveRead {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(unreadable)?;
    let size = file.metadata().map_err(unreadable)?.len();
    let mut input = BufReader::with_capacity(1 << 20, file);
    let mut magic = [0u8; 4];
    if input.read_exact(&mut magic).is_err() || &magic != MAGIC {
        return Err(damaged(0, "not a binlog file (no magic bytes)".into()));
    }
    let mut decoder = EventStreamReader::new(BinlogVersion::Version4);
    let mut found = Survey::default();
    let (mut at, mut last_type, mut events) = (4u64, None, 0u64);
    while at < size {
        events += 1;
        if events % STOP_CHECK_EVERY == 0 && stop.load(Ordering::Relaxed) {
            return Err(SourceError::ArchiveCheckStopped {
                file: path.to_path_buf(),
                offset: at,
            });
        }
        let left = size - at;
        if left < HEADER_LEN as u64 {
            return Err(damaged(
                at,
                format!("cut inside an event header ({left} bytes left)"),
            ));
        }
        let mut header = [0u8; HEADER_LEN];
        input
            .read_exact(&mut header)
            .map_err(|e| damaged(at, e.to_string()))?;
        let (event_size, log_pos) = sizes(&header);
        if event_size < HEADER_LEN as u64 || event_size > MAX_EVENT_BYTES {
            return Err(damaged(
                at,
                format!("an event header states {event_size} bytes"),
            ));
        }
        if event_size > left {
            return Err(damaged(
                at,
                format!("cut inside an event of {event_size} bytes ({left} bytes left)"),
            ));
        }
        if log_pos != 0 && log_pos != at + event_size {
            return Err(damaged(
                at,
                format!(
                    "an event whose header says it ends at {log_pos} ends at {}",
                    at + event_size
                ),
            ));
        }
        let event_type = header[4];
        let body_len = event_size - HEADER_LEN as u64;
        if [FORMAT_DESCRIPTION, GTID_LIST, ROTATE].contains(&event_type) {
            let mut bytes = header.to_vec();
            bytes.resize(event_size as usize, 0);
            input
                .read_exact(&mut bytes[HEADER_LEN..])
                .map_err(|e| damaged(at, e.to_string()))?;
            let event = decoder
                .read(&bytes[..])
                .map_err(|e| damaged(at, format!("event does not decode: {e}")))?
                .ok_or_else(|| damaged(at, "empty event".into()))?;
            match event_type {
                FORMAT_DESCRIPTION => found.server_id = Some(event.header().server_id()),
                GTID_LIST => {
                    let list = crate::source::mariadb::parse_gtid_list(event.data())
                        .ok_or_else(|| damaged(at, "GTID list event does not decode".into()))?;
                    let mut state = MariaGtidState::default();
                    list.into_iter().for_each(|gtid| state.apply(gtid));
                    found.gtid_list = Some(state);
                }
                _ => {
                    let rotate = event
                        .read_event::<RotateEvent<'_>>()
                        .map_err(|e| damaged(at, format!("ROTATE event does not decode: {e}")))?;
                    found.rotates_to = Some(rotate.name().into_owned());
                }
            }
        } else {
            input
                .seek_relative(body_len as i64)
                .map_err(|e| damaged(at, e.to_string()))?;
        }
        at += event_size;
        last_type = Some(event_type);
    }
    match last_type {
        Some(ROTATE) => Ok(found),
        Some(STOP) => Ok(Survey {
            rotates_to: None,
            ..found
        }),
        _ => Err(damaged(at, UNFINISHED.into())),
    }
}
