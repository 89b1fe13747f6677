//! A file in the store's folder that `run` holds locked from its first moment and keeps
//! its state in (starting, standby, running), so `status` tells a starting router from a
//! stopped one before the endpoint answers, and with the endpoint off. The kernel drops
//! the lock with the process, kill -9 included: no stale pid file to mislead.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::RouterState;
use crate::checkpoint::now_ms;

/// Held while the process runs.
pub struct RunLock {
    file: File,
    started_ms: i64,
}

/// What the process holding a store's run lock says of itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Its process id (as it sees itself: PID 1 in a container).
    pub pid: Option<u32>,
    /// When it started (ms since epoch).
    pub started_ms: Option<i64>,
    /// What it is doing.
    pub state: RouterState,
}

impl RunLock {
    /// In the store's folder, which is writable wherever the store is — beside it may
    /// be a read-only root.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join("running.lock")
    }

    /// Takes the lock and says "starting" (NotFound: no store folder, nothing made).
    /// Another process holding it is not this lock's business (two routers on one store
    /// are refused by the store itself).
    pub fn take(dir: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .read(true)
            .open(Self::path(dir))?;
        file.try_lock().map_err(std::io::Error::from)?;
        let mut lock = Self {
            file,
            started_ms: now_ms(),
        };
        lock.record(RouterState::Starting)?;
        Ok(lock)
    }

    /// Writes what the process is doing now.
    pub fn record(&mut self, state: RouterState) -> std::io::Result<()> {
        let holder = Holder {
            pid: Some(std::process::id()),
            started_ms: Some(self.started_ms),
            state,
        };
        let text = serde_json::to_vec(&holder).map_err(std::io::Error::other)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(&text)?;
        self.file.set_len(text.len() as u64)
    }

    /// Keeps the published state in step with `states` for as long as the process runs.
    pub async fn follow(mut self, mut states: watch::Receiver<RouterState>) {
        loop {
            let state = *states.borrow_and_update();
            if let Err(e) = self.record(state) {
                tracing::debug!(error = %e, "could not write the run lock's state");
            }
            if states.changed().await.is_err() {
                // Nobody publishes any more: hold the lock until the process ends.
                return std::future::pending().await;
            }
        }
    }

    /// What the process holding the lock of the store in `dir` says, if one holds it.
    pub fn holder(dir: &Path) -> Option<Holder> {
        let mut file = File::open(Self::path(dir)).ok()?;
        match file.try_lock_shared() {
            Ok(()) | Err(TryLockError::Error(_)) => None,
            Err(TryLockError::WouldBlock) => {
                // A read may catch a write half done: the second one sees it whole.
                let read = |file: &mut File| -> Option<Holder> {
                    let mut text = String::new();
                    file.seek(SeekFrom::Start(0)).ok()?;
                    file.read_to_string(&mut text).ok()?;
                    serde_json::from_str(&text).ok()
                };
                let holder = read(&mut file).or_else(|| {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    read(&mut file)
                });
                Some(holder.unwrap_or(Holder {
                    pid: None,
                    started_ms: None,
                    state: RouterState::Starting,
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_while_alive_and_free_after() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("checkpoint");
        assert_eq!(RunLock::holder(&store), None);
        assert!(RunLock::take(&store).is_err(), "made a folder");
        std::fs::create_dir(&store).unwrap();
        let mut lock = RunLock::take(&store).expect("taken");
        let holder = RunLock::holder(&store).expect("held");
        assert_eq!(holder.pid, Some(std::process::id()));
        assert_eq!(holder.state, RouterState::Starting);
        assert!(holder.started_ms.is_some());
        assert!(RunLock::take(&store).is_err(), "taken twice");
        lock.record(RouterState::Running).unwrap();
        assert_eq!(
            RunLock::holder(&store).map(|h| h.state),
            Some(RouterState::Running)
        );
        drop(lock);
        assert_eq!(RunLock::holder(&store), None);
    }
}
