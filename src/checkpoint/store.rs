//! The checkpoint store: an embedded sled database in the configured directory.
//!
//! A write counts only after `flush`, which waits for the data to reach disk. A store
//! that cannot be opened or read is an error, never a silent fresh start.
//!
//! sled 0.34 is unmaintained since 2021 and its flush relies on `sync_file_range`
//! rather than a full `fsync`: it is proven here against `kill -9` (200 cycles in the
//! test suite, never behind an acknowledged write), not against power loss, which
//! cannot be tested on these machines. Every record is checksummed, so a torn write is
//! detected on open rather than believed; redb (fsync on commit) is the fallback behind
//! this same interface if sled is ever caught losing a flushed checkpoint.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Checkpoint, RecordError};

const KEY: &[u8] = b"checkpoint";
/// Attempts, 100 ms apart, to take the store's lock from a store this process just dropped.
const LOCK_RETRIES: usize = 20;

/// Errors of the checkpoint store.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot open checkpoint store {dir}: {source}{}", open_hint(source))]
    Open { dir: PathBuf, source: sled::Error },
    #[error("cannot read checkpoint store {dir}: {source}")]
    Read { dir: PathBuf, source: sled::Error },
    #[error("checkpoint in {dir} is unreadable: {source}; refusing to start from scratch — inspect it with `checkpoint show`, or `checkpoint set`/`reset` deliberately")]
    Corrupt { dir: PathBuf, source: RecordError },
    #[error("no checkpoint store in {dir}: a first start must be explicit, so a lost store (an unmounted volume, a changed path) cannot silently start over and skip everything since its checkpoint; first start: outbox-router -c CONFIG checkpoint init (or run --init); ran before: point checkpoint.dir at the store it used")]
    Missing { dir: PathBuf },
    #[error("cannot write checkpoint to {dir}: {source}")]
    Write { dir: PathBuf, source: sled::Error },
    #[error("the checkpoint writer failed: {reason}")]
    Writer { reason: String },
    #[error("cannot copy checkpoint store {dir} to read it: {source}")]
    Copy {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// The likely cause of a failed open, and the fix.
fn open_hint(e: &sled::Error) -> &'static str {
    match e {
        sled::Error::Io(io) if is_held(io) => "; another outbox-router process (a running router, or a command such as `checkpoint set`) holds it: stop that process first (`outbox-router status` tells whether a router runs)",
        sled::Error::Io(io) if io.kind() == std::io::ErrorKind::PermissionDenied => "; this user may not write there: give the folder to the user the router runs as, or point checkpoint.dir elsewhere",
        sled::Error::Io(io) if io.kind() == std::io::ErrorKind::StorageFull => "; the disk is full: free space (the store needs a few MB)",
        sled::Error::Corruption { .. } => "; the store's files are damaged: restore the folder from a backup, or move the checkpoint deliberately (`checkpoint reset --yes`, then `checkpoint set`)",
        _ => "",
    }
}

/// sled's error when another process holds the store's file lock.
fn is_held(e: &std::io::Error) -> bool {
    e.to_string().contains("could not acquire lock")
}

/// Copies a store's files (sled keeps a few files and a `blobs` folder).
fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// Durable storage of one checkpoint.
#[derive(Clone)]
pub struct CheckpointStore {
    db: sled::Db,
    dir: PathBuf,
}

impl CheckpointStore {
    /// True when `dir` holds a store (sled writes its `conf` file on creation).
    pub fn exists(dir: &Path) -> bool {
        dir.join("conf").is_file()
    }

    /// Opens the existing store in `dir`; a missing one is an error, never a fresh start.
    pub fn open(dir: &Path) -> Result<Self, CheckpointError> {
        if !Self::exists(dir) {
            return Err(CheckpointError::Missing {
                dir: dir.to_path_buf(),
            });
        }
        Self::create(dir)
    }

    /// The checkpoint in `dir`, read from a copy of the store: nothing is created or
    /// written there, and a running router's lock does not stand in the way (`None`
    /// when there is no store or no checkpoint).
    pub fn peek(dir: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
        if !Self::exists(dir) {
            return Ok(None);
        }
        // A copy taken while the router writes can catch a write half done; the next
        // copy sees it whole.
        match Self::read_copy(dir) {
            Err(CheckpointError::Corrupt { .. }) => Self::read_copy(dir),
            other => other,
        }
    }

    fn read_copy(dir: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
        let copy_failed = |source: std::io::Error| CheckpointError::Copy {
            dir: dir.to_path_buf(),
            source,
        };
        let scratch = tempfile::tempdir().map_err(copy_failed)?;
        copy_dir(dir, scratch.path()).map_err(copy_failed)?;
        let copy = Self::create(scratch.path())?;
        let loaded = copy.load();
        drop(copy);
        loaded.map_err(|e| match e {
            CheckpointError::Corrupt { source, .. } => CheckpointError::Corrupt {
                dir: dir.to_path_buf(),
                source,
            },
            other => other,
        })
    }

    /// Creates an empty store in `dir` unless one is there: for a pool's exactly-once
    /// source, whose store is a cache of the commit marker (its start still refuses
    /// when the topic has neither a marker nor a recorded first start).
    pub fn create_if_missing(dir: &Path) -> Result<(), CheckpointError> {
        if !Self::exists(dir) {
            drop(Self::create(dir)?);
        }
        Ok(())
    }

    /// Opens the store in `dir`, creating it when missing: only for explicit operator
    /// acts (`checkpoint init`, `run --init`, `checkpoint set`, `recover`) and scratch
    /// stores.
    pub fn create(dir: &Path) -> Result<Self, CheckpointError> {
        let open = || {
            sled::Config::new()
                .path(dir)
                .mode(sled::Mode::LowSpace)
                .open()
        };
        let mut result = open();
        // A store dropped in this process releases its file lock when sled's flusher
        // thread ends, a moment later; another process holding it is still an error.
        for _ in 0..LOCK_RETRIES {
            match &result {
                Err(sled::Error::Io(e)) if is_held(e) => {
                    std::thread::sleep(Duration::from_millis(100));
                    result = open();
                }
                _ => break,
            }
        }
        let db = result.map_err(|source| CheckpointError::Open {
            dir: dir.to_path_buf(),
            source,
        })?;
        Ok(Self {
            db,
            dir: dir.to_path_buf(),
        })
    }

    /// A store in a new scratch directory holding a copy of `dir`'s checkpoint (if any),
    /// for dry runs; `dir` is read, never created or written. Returns the scratch
    /// directory, for the caller to remove.
    pub fn scratch_copy_of(dir: &Path) -> Result<(Self, PathBuf), CheckpointError> {
        let current = Self::peek(dir)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let scratch = std::env::temp_dir().join(format!(
            "outbox-router-dry-run-{}-{nanos}",
            std::process::id()
        ));
        let store = Self::create(&scratch)?;
        if let Some(cp) = current {
            store.save(&cp)?;
        }
        Ok((store, scratch))
    }

    /// The stored checkpoint, or `None` when none was ever written.
    pub fn load(&self) -> Result<Option<Checkpoint>, CheckpointError> {
        let raw = self.db.get(KEY).map_err(|source| CheckpointError::Read {
            dir: self.dir.clone(),
            source,
        })?;
        raw.map(|bytes| {
            Checkpoint::decode(&bytes).map_err(|source| CheckpointError::Corrupt {
                dir: self.dir.clone(),
                source,
            })
        })
        .transpose()
    }

    /// Stores a checkpoint and waits until it is on disk.
    pub fn save(&self, checkpoint: &Checkpoint) -> Result<(), CheckpointError> {
        let write = |source| CheckpointError::Write {
            dir: self.dir.clone(),
            source,
        };
        self.db.insert(KEY, checkpoint.encode()).map_err(write)?;
        crash_point!("checkpoint.before_flush");
        self.db.flush().map_err(write)?;
        Ok(())
    }

    /// Removes the checkpoint: the next start uses `source.start`.
    pub fn reset(&self) -> Result<(), CheckpointError> {
        let write = |source| CheckpointError::Write {
            dir: self.dir.clone(),
            source,
        };
        self.db.remove(KEY).map_err(write)?;
        self.db.flush().map_err(write)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each cause of a failed open says its own fix, never another's.
    #[test]
    fn a_failed_open_names_its_cause() {
        let dir = tempfile::tempdir().unwrap();
        let _held = CheckpointStore::create(dir.path()).unwrap();
        let held = std::thread::scope(|s| {
            // The lock is per open file: a second open fails as another process's would.
            s.spawn(|| {
                CheckpointStore::create(dir.path())
                    .err()
                    .unwrap()
                    .to_string()
            })
            .join()
            .unwrap()
        });
        assert!(
            held.contains("another outbox-router process")
                && held.contains("stop that process first"),
            "{held}"
        );
        let text = |source: sled::Error| {
            CheckpointError::Open {
                dir: "/var/lib/outbox-router".into(),
                source,
            }
            .to_string()
        };
        let denied = text(sled::Error::Io(std::io::Error::from(
            std::io::ErrorKind::PermissionDenied,
        )));
        assert!(
            denied.contains("this user may not write there") && !denied.contains("another"),
            "{denied}"
        );
        let full = text(sled::Error::Io(std::io::Error::from(
            std::io::ErrorKind::StorageFull,
        )));
        assert!(full.contains("the disk is full"), "{full}");
        let other = text(sled::Error::Io(std::io::Error::other("odd")));
        assert!(other.ends_with("odd"), "{other}");
    }

    #[test]
    fn save_load_reset() {
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint {
            delivered_through: None,
            server_id: Some(1),
            position: "mysql-bin.000001:500".parse().unwrap(),
            commit_time_ms: 1,
            written_at_ms: 2,
            commit_seq: 0,
            set_by: None,
            lineage: None,
        };
        assert!(matches!(
            CheckpointStore::open(dir.path()),
            Err(CheckpointError::Missing { .. })
        ));
        {
            let s = CheckpointStore::create(dir.path()).unwrap();
            assert_eq!(s.load().unwrap(), None);
            s.save(&cp).unwrap();
        }
        let s = CheckpointStore::open(dir.path()).unwrap();
        assert_eq!(s.load().unwrap(), Some(cp));
        s.reset().unwrap();
        assert_eq!(s.load().unwrap(), None);
    }

    #[test]
    fn peek_reads_a_store_in_use_and_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let nowhere = dir.path().join("wrong");
        assert_eq!(CheckpointStore::peek(&nowhere).unwrap(), None);
        assert!(!nowhere.exists(), "peek created {}", nowhere.display());
        let live = CheckpointStore::create(dir.path()).unwrap();
        let cp = Checkpoint {
            delivered_through: None,
            server_id: Some(1),
            position: "mysql-bin.000001:500".parse().unwrap(),
            commit_time_ms: 1,
            written_at_ms: 2,
            commit_seq: 0,
            set_by: None,
            lineage: None,
        };
        live.save(&cp).unwrap();
        // `live` still holds the lock, as a running router does.
        assert_eq!(CheckpointStore::peek(dir.path()).unwrap(), Some(cp));
    }

    #[test]
    fn corrupt_record_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let s = CheckpointStore::create(dir.path()).unwrap();
        s.db.insert(KEY, b"garbage-bytes".to_vec()).unwrap();
        assert!(matches!(s.load(), Err(CheckpointError::Corrupt { .. })));
    }
}
