//! Writes the checkpoint of the newest acknowledged prefix in the background.

use std::time::Duration;

use super::{Checkpoint, CheckpointError, CheckpointStore};

/// A checkpoint writer task (or its blocking write) panicked or was cancelled.
fn writer_failed(e: tokio::task::JoinError) -> CheckpointError {
    CheckpointError::Writer {
        reason: e.to_string(),
    }
}

/// Stores the newest acknowledged checkpoint at most once per interval, on a blocking
/// thread: sled's flush waits for the disk, and the acker must keep sending meanwhile
/// (checkpoint writes inside the acker put 20 ms stalls into the latency tail).
pub struct CheckpointWriter {
    tx: tokio::sync::watch::Sender<Option<Checkpoint>>,
    task: tokio::task::JoinHandle<Result<(), CheckpointError>>,
}

impl CheckpointWriter {
    /// Starts the writer task; `written` is told of each checkpoint once it is on disk.
    pub fn start(
        store: CheckpointStore,
        interval: Duration,
        written: impl Fn(&Checkpoint) + Send + 'static,
    ) -> Self {
        let (tx, mut rx) = tokio::sync::watch::channel::<Option<Checkpoint>>(None);
        let task = tokio::spawn(async move {
            loop {
                // Err once the acker is done; the newest value is still saved below.
                let closed = rx.changed().await.is_err();
                let newest = rx.borrow_and_update().clone();
                if let Some(cp) = newest {
                    let s = store.clone();
                    let saved = cp.clone();
                    tokio::task::spawn_blocking(move || s.save(&saved))
                        .await
                        .map_err(writer_failed)??;
                    written(&cp);
                }
                if closed {
                    return Ok(());
                }
                tokio::time::sleep(interval).await;
            }
        });
        Self { tx, task }
    }

    /// Hands over a newer checkpoint; only the newest one waiting is written.
    pub fn hand_over(&self, checkpoint: Checkpoint) {
        self.tx.send_replace(Some(checkpoint));
    }

    /// True when the writer ended early (a failed write).
    pub fn has_stopped(&self) -> bool {
        self.task.is_finished()
    }

    /// Writes what was published last and waits for it to be on disk.
    pub async fn finish(self) -> Result<(), CheckpointError> {
        drop(self.tx);
        self.task.await.map_err(writer_failed)?
    }
}
