//! Archived binlog files as a source: copies of the server's own files, or what
//! `mariadb-binlog --read-from-remote-server --raw` / `mysqlbinlog --raw` backups keep.
//! When the server has purged the binlog a checkpoint needs, the router reads that range
//! from `source.archive_dir` with the same reader (boundaries, event ids, checkpoints)
//! and hands over to the server at the oldest file it still holds.
//!
//! A file the range needs must be there whole: a missing file, one that ends inside an
//! event, or one that stops without the ROTATE / STOP event a finished file ends with is
//! an error naming it, never a skip.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use mysql_async::binlog::events::{Event, RotateEvent, TransactionPayloadEvent};
use mysql_async::binlog::EventType;
use mysql_common::binlog::consts::BinlogVersion;
use mysql_common::binlog::consts::TransactionPayloadCompressionType as Compression;
use mysql_common::binlog::EventStreamReader;

use super::{BinlogFile, Position, SourceError};
use crate::position::{GtidState, MariaGtidState};

/// The magic bytes every binlog file begins with.
const MAGIC: &[u8; 4] = b"\xfebin";
/// A binlog event header: timestamp, type, server id, size, end position, flags.
const HEADER_LEN: usize = 19;
/// No event is this large (a server's `max_allowed_packet` is at most 1 GiB).
const MAX_EVENT_BYTES: u64 = 1 << 30;

/// The binlog files of one base name found in an archive directory, in order.
#[derive(Debug)]
pub struct Archive {
    dir: PathBuf,
    files: Vec<(BinlogFile, PathBuf)>,
}

impl Archive {
    /// The files in `dir` named like `like` (same base name, numeric suffix); other
    /// files (an index, another server's files) are left alone.
    pub fn open(dir: &Path, like: &BinlogFile) -> Result<Self, SourceError> {
        let unreadable = |source| SourceError::ArchiveRead {
            path: dir.to_path_buf(),
            source,
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(unreadable)? {
            let entry = entry.map_err(unreadable)?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            match BinlogFile::new(name) {
                Ok(file) if file.base() == like.base() => files.push((file, entry.path())),
                _ => {}
            }
        }
        files.sort_by_key(|(f, _)| f.index());
        Ok(Self {
            dir: dir.to_path_buf(),
            files,
        })
    }

    /// The first and last file held, and the files missing between them.
    pub fn span(&self) -> Option<(&BinlogFile, &BinlogFile, Vec<BinlogFile>)> {
        let (first, _) = self.files.first()?;
        let (last, _) = self.files.last()?;
        let missing = (first.index()..last.index())
            .filter(|i| !self.files.iter().any(|(f, _)| f.index() == *i))
            .map(|i| first.with_index(i))
            .collect();
        Some((first, last, missing))
    }

    /// True when the archive holds `file`.
    pub fn holds(&self, file: &BinlogFile) -> bool {
        self.files.iter().any(|(f, _)| f == file)
    }

    /// The files from the checkpoint's file up to, not including, `until` (the server's
    /// oldest), every one of them present, whole and part of the checkpoint's history
    /// (see `survey`): else an error naming the first missing, damaged or foreign one.
    /// Checked before anything is read, so a bad archive delivers nothing and moves no
    /// checkpoint. `stop` abandons the check (a shutdown) within one event.
    pub fn range(
        &self,
        from: &Position,
        server_id: Option<u32>,
        until: &BinlogFile,
        stop: &AtomicBool,
    ) -> Result<Vec<(BinlogFile, PathBuf)>, SourceError> {
        let first = &from.file;
        let needed = format!("{first} up to {until} (not included)");
        if first.base() != until.base() || until.index() <= first.index() {
            return Err(SourceError::ArchiveIncomplete {
                dir: self.dir.clone(),
                missing: format!("a file sequence from {first} to {until}"),
                needed,
            });
        }
        let mut out: Vec<(BinlogFile, PathBuf)> = Vec::new();
        for index in first.index()..until.index() {
            let Some((file, path)) = self.files.iter().find(|(f, _)| f.index() == index) else {
                return Err(SourceError::ArchiveIncomplete {
                    dir: self.dir.clone(),
                    missing: first.with_index(index).to_string(),
                    needed,
                });
            };
            let found = survey(path, stop)?;
            let next = if index + 1 == until.index() {
                until.clone()
            } else {
                first.with_index(index + 1)
            };
            found.belongs(path, file, &next, from, server_id)?;
            out.push((file.clone(), path.clone()));
        }
        Ok(out)
    }
}

/// What walking a file's event headers found (see `survey`).
#[derive(Debug, Default)]
struct Survey {
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
    fn belongs(
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
fn survey(path: &Path, stop: &AtomicBool) -> Result<Survey, SourceError> {
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
                    let list = super::mariadb::parse_gtid_list(event.data())
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

const FORMAT_DESCRIPTION: u8 = EventType::FORMAT_DESCRIPTION_EVENT as u8;
const ROTATE: u8 = EventType::ROTATE_EVENT as u8;
const STOP: u8 = EventType::STOP_EVENT as u8;
/// MariaDB's GTID_LIST_EVENT, which mysql_common names no type for.
const GTID_LIST: u8 = 163;

/// Why a file that ends without ROTATE or STOP cannot be trusted to be whole.
const UNFINISHED: &str = "it ends without the ROTATE or STOP event a finished binlog file ends with: cut short, or copied while the server still wrote it";

/// An event header's size and end position.
fn sizes(header: &[u8; HEADER_LEN]) -> (u64, u64) {
    let word = |at: usize| {
        u64::from(u32::from_le_bytes(
            header[at..at + 4].try_into().expect("4 bytes"),
        ))
    };
    (word(9), word(13))
}

/// What the reader's event source yields: events, where a new archived file begins (the
/// reader moves its position there as a server's rotation would), and the start of the
/// server's stream after the archive.
pub enum BinlogItem {
    /// The next event, as the server streams it.
    Event(Event),
    /// The events that follow are from this archived file, from its start.
    NewFile(BinlogFile),
    /// The server's stream begins (after the archive): its first, fake ROTATE comes
    /// before its format description, as at any connection.
    ServerStream,
}

/// The events of archived files in order, from a position in the first.
pub struct ArchiveEvents {
    files: VecDeque<(BinlogFile, PathBuf)>,
    /// Events at or before this offset of the first file are skipped (the checkpoint).
    start: Position,
    /// Finished files must end with ROTATE or STOP (a range handed over to the server);
    /// off for a single recorded file read to its end.
    require_finished: bool,
    /// The server's file after the last archived one, which its ROTATE must name.
    then: Option<BinlogFile>,
    current: Option<OpenFile>,
    /// A file's final ROTATE, handed on only once the file named is known to follow:
    /// the reader moves its position (and may checkpoint) at a ROTATE, and a position
    /// in a file that is not read next skips what lies between.
    held_rotate: Option<Event>,
    /// The event read after a held ROTATE that turned out not to be its file's last.
    after_held: Option<Event>,
}

impl ArchiveEvents {
    /// Reads `files` from `start` (which is in the first of them).
    pub fn new(files: Vec<(BinlogFile, PathBuf)>, start: Position, require_finished: bool) -> Self {
        Self {
            files: files.into(),
            start,
            require_finished,
            then: None,
            current: None,
            held_rotate: None,
            after_held: None,
        }
    }

    /// The server streams on from `file` after the last archived file, whose ROTATE
    /// must name it.
    pub fn followed_by(self, file: BinlogFile) -> Self {
        Self {
            then: Some(file),
            ..self
        }
    }

    /// The next item; `None` once every file is read to its end.
    pub fn next(&mut self) -> Option<Result<BinlogItem, SourceError>> {
        loop {
            if let Some(event) = self.after_held.take() {
                return Some(Ok(BinlogItem::Event(event)));
            }
            if self.current.is_none() {
                let (name, path) = self.files.pop_front()?;
                let first = name == self.start.file;
                let skip_to = if first { self.start.offset } else { 4 };
                let file = match OpenFile::open(name.clone(), path, skip_to) {
                    Ok(f) => f,
                    Err(e) => return Some(Err(e)),
                };
                self.current = Some(file);
                if !first {
                    return Some(Ok(BinlogItem::NewFile(name)));
                }
            }
            let file = self.current.as_mut().expect("opened above");
            match file.next() {
                Ok(Some(event)) => {
                    let is_rotate = event.header().event_type_raw() == ROTATE;
                    match (self.held_rotate.take(), is_rotate) {
                        (None, false) => return Some(Ok(BinlogItem::Event(event))),
                        (None, true) => self.held_rotate = Some(event),
                        // A ROTATE that was not its file's last event names nothing to
                        // check: handed on before what followed it.
                        (Some(held), true) => {
                            self.held_rotate = Some(event);
                            return Some(Ok(BinlogItem::Event(held)));
                        }
                        (Some(held), false) => {
                            self.after_held = Some(event);
                            return Some(Ok(BinlogItem::Event(held)));
                        }
                    }
                }
                Ok(None) => {
                    let file = self.current.take().expect("opened above");
                    let next = self.files.front().map(|(name, _)| name);
                    let last = next.is_none();
                    let next = next.or(self.then.as_ref());
                    let must_finish = self.require_finished || !last;
                    if let Err(e) = file.finished(must_finish, next) {
                        self.held_rotate = None;
                        return Some(Err(e));
                    }
                    if let Some(rotate) = self.held_rotate.take() {
                        return Some(Ok(BinlogItem::Event(rotate)));
                    }
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// The events of a MySQL compressed transaction payload, decompressed as they are read.
struct PayloadEvents {
    input: Box<dyn BufRead + Send>,
    /// Where the payload event starts, for errors.
    start: u64,
}

/// One archived file being read.
struct OpenFile {
    name: BinlogFile,
    path: PathBuf,
    input: BufReader<File>,
    size: u64,
    /// Offset of the next event.
    at: u64,
    /// Events ending at or before it are not handed on (format descriptions are).
    skip_to: u64,
    /// Format description and checksums, as the file declares them.
    decoder: EventStreamReader,
    /// Events of a MySQL compressed transaction payload, handed on after it.
    inner: Option<PayloadEvents>,
    /// The type of the last event read, and the file a ROTATE named.
    last_type: Option<u8>,
    rotates_to: Option<String>,
}

impl OpenFile {
    fn open(name: BinlogFile, path: PathBuf, skip_to: u64) -> Result<Self, SourceError> {
        let unreadable = |source| SourceError::ArchiveRead {
            path: path.clone(),
            source,
        };
        let file = File::open(&path).map_err(unreadable)?;
        let size = file.metadata().map_err(unreadable)?.len();
        let mut input = BufReader::with_capacity(1 << 20, file);
        let mut magic = [0u8; 4];
        let has_magic = input.read_exact(&mut magic).is_ok() && &magic == MAGIC;
        let opened = Self {
            name,
            path,
            input,
            size,
            at: 4,
            skip_to,
            decoder: EventStreamReader::new(BinlogVersion::Version4),
            inner: None,
            last_type: None,
            rotates_to: None,
        };
        if !has_magic {
            return Err(opened.damaged(0, "not a binlog file (no magic bytes)"));
        }
        if skip_to > size {
            return Err(opened.damaged(
                size,
                format!("the position {skip_to} to read from lies beyond its end"),
            ));
        }
        Ok(opened)
    }

    fn damaged(&self, offset: u64, reason: impl Into<String>) -> SourceError {
        SourceError::ArchiveDamaged {
            file: self.path.clone(),
            offset,
            reason: reason.into(),
        }
    }

    /// The next event to hand on; `None` at the end of the file.
    fn next(&mut self) -> Result<Option<Event>, SourceError> {
        loop {
            if let Some(payload) = self.inner.as_mut() {
                let start = payload.start;
                match self.decoder.read_decompressed(&mut payload.input) {
                    Ok(Some(event)) => return Ok(Some(event)),
                    Ok(None) => self.inner = None,
                    Err(e) => {
                        return Err(self.damaged(start, format!("compressed transaction: {e}")))
                    }
                }
                continue;
            }
            let Some(event) = self.read_event()? else {
                return Ok(None);
            };
            let end = self.at;
            let event_type = event.header().event_type_raw();
            if event_type == EventType::FORMAT_DESCRIPTION_EVENT as u8 {
                return Ok(Some(event));
            }
            if end <= self.skip_to {
                continue;
            }
            let start = end - u64::from(event.header().event_size());
            if start < self.skip_to {
                return Err(self.damaged(
                    start,
                    format!(
                        "the position {}:{} to read from is inside an event (it ends at {end}): not a position of this file",
                        self.name, self.skip_to
                    ),
                ));
            }
            if event_type == EventType::TRANSACTION_PAYLOAD_EVENT as u8 {
                self.expand_payload(&event, start)?;
            }
            return Ok(Some(event));
        }
    }

    /// Reads one whole event (never past the file's end: a cut event is named, not
    /// decoded), checking that its header's end position is where it ends.
    fn read_event(&mut self) -> Result<Option<Event>, SourceError> {
        if self.at == self.size {
            return Ok(None);
        }
        let offset = self.at;
        let left = self.size - offset;
        if left < HEADER_LEN as u64 {
            return Err(self.damaged(
                offset,
                format!("cut inside an event header ({left} bytes left)"),
            ));
        }
        let mut header = [0u8; HEADER_LEN];
        self.input
            .read_exact(&mut header)
            .map_err(|e| self.damaged(offset, e.to_string()))?;
        let size = u64::from(u32::from_le_bytes(
            header[9..13].try_into().expect("4 bytes"),
        ));
        let log_pos = u64::from(u32::from_le_bytes(
            header[13..17].try_into().expect("4 bytes"),
        ));
        if size < HEADER_LEN as u64 || size > MAX_EVENT_BYTES {
            return Err(self.damaged(offset, format!("an event header states {size} bytes")));
        }
        if size > left {
            return Err(self.damaged(
                offset,
                format!("cut inside an event of {size} bytes ({left} bytes left)"),
            ));
        }
        let mut bytes = header.to_vec();
        bytes.resize(size as usize, 0);
        self.input
            .read_exact(&mut bytes[HEADER_LEN..])
            .map_err(|e| self.damaged(offset, e.to_string()))?;
        self.at = offset + size;
        if log_pos != 0 && log_pos != self.at {
            return Err(self.damaged(
                offset,
                format!(
                    "an event whose header says it ends at {log_pos} ends at {}",
                    self.at
                ),
            ));
        }
        let event = self
            .decoder
            .read(&bytes[..])
            .map_err(|e| self.damaged(offset, format!("event does not decode: {e}")))?
            .ok_or_else(|| self.damaged(offset, "empty event"))?;
        let event_type = event.header().event_type_raw();
        self.last_type = Some(event_type);
        if event_type == EventType::ROTATE_EVENT as u8 {
            let rotate = event
                .read_event::<RotateEvent<'_>>()
                .map_err(|e| self.damaged(offset, format!("ROTATE event does not decode: {e}")))?;
            self.rotates_to = Some(rotate.name().into_owned());
        }
        Ok(Some(event))
    }

    /// Hands on the events of a MySQL compressed transaction payload (as mysql_async's
    /// stream expands it) one at a time, decompressed as they are read, after checking
    /// it decompresses to its stated size (also as a stream): a payload holds a whole
    /// transaction, and is never inflated whole here.
    fn expand_payload(&mut self, event: &Event, start: u64) -> Result<(), SourceError> {
        let payload = event
            .read_event::<TransactionPayloadEvent<'_>>()
            .map_err(|e| self.damaged(start, format!("compressed transaction: {e}")))?;
        super::payload::check(&payload)
            .map_err(|e| self.damaged(start, format!("compressed transaction: {e}")))?;
        let compressed = std::io::Cursor::new(payload.payload_raw().to_vec());
        let input: Box<dyn BufRead + Send> = match payload.algorithm() {
            Compression::NONE => Box::new(compressed),
            _ => Box::new(BufReader::new(
                zstd::stream::read::Decoder::new(compressed)
                    .map_err(|e| self.damaged(start, format!("compressed transaction: {e}")))?,
            )),
        };
        self.inner = Some(PayloadEvents { input, start });
        Ok(())
    }

    /// At the end of the file: a finished file ends with ROTATE (to the next file, when
    /// there is one) or STOP.
    fn finished(self, must_finish: bool, next: Option<&BinlogFile>) -> Result<(), SourceError> {
        match (self.last_type, &self.rotates_to, next) {
            (Some(ROTATE), Some(to), Some(next)) if to != next.name() => Err(self.damaged(
                self.at,
                format!("it rotates to {to}, but the file read after it is {next}"),
            )),
            (Some(ROTATE | STOP), _, _) => Ok(()),
            _ if !must_finish => Ok(()),
            _ => Err(self.damaged(self.at, UNFINISHED)),
        }
    }
}
