//! Archived binlog files as a source: copies of the server's own files, or what
//! `mariadb-binlog --read-from-remote-server --raw` / `mysqlbinlog --raw` backups keep.
//! When the server has purged the binlog a checkpoint needs, the router reads that range
//! from `source.archive_dir` with the same reader (boundaries, event ids, checkpoints)
//! and hands over to the server at the oldest file it still holds.
//!
//! A file the range needs must be there whole: a missing file, one that ends inside an
//! event, or one that stops without the ROTATE / STOP event a finished file ends with is
//! an error naming it, never a skip.

//!
//! `format`: what a binlog file's bytes look like; `survey`: a whole file checked before
//! anything of it is read; `events`: the events of a range of files, read in order.

mod events;
mod format;
mod survey;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

pub use events::{ArchiveEvents, BinlogItem};

use crate::source::{BinlogFile, Position, SourceError};

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
            let found = survey::survey(path, stop)?;
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
