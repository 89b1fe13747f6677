//! The events of a range of archived files, read in order as the server would stream
//! them: a file's final ROTATE handed on only once the file it names is known to follow,
//! MySQL's compressed transactions expanded as they are read.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;

use mysql_async::binlog::events::{Event, RotateEvent, TransactionPayloadEvent};
use mysql_async::binlog::EventType;
use mysql_common::binlog::consts::BinlogVersion;
use mysql_common::binlog::consts::TransactionPayloadCompressionType as Compression;
use mysql_common::binlog::EventStreamReader;

use super::format::{HEADER_LEN, MAGIC, MAX_EVENT_BYTES, ROTATE, STOP, UNFINISHED};
use crate::source::{BinlogFile, Position, SourceError};

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
        crate::source::payload::check(&payload)
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
