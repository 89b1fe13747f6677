//! A stop asked while a command's work is under way: honoured within a bound, whatever
//! the work is waiting for (a broker's answer can take a minute).

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::warn;

/// `work`'s outcome; or, after a stop was asked, at most `bound` more of it (a stop
/// during `--init` is honoured within `pipeline.shutdown_timeout_secs`, whatever the
/// brokers do): `None` when it was given up. A first start given up is none: its record
/// commits whole or not at all, and the store it may have created is a cache.
pub async fn until_stopped<T>(
    work: tokio::task::JoinHandle<T>,
    shutdown: &CancellationToken,
    bound: Duration,
) -> Option<Result<T, tokio::task::JoinError>> {
    tokio::pin!(work);
    tokio::select! {
        done = &mut work => return Some(done),
        _ = shutdown.cancelled() => {}
    }
    match tokio::time::timeout(bound, &mut work).await {
        Ok(done) => Some(done),
        Err(_) => {
            warn!(
                waited_secs = bound.as_secs(),
                "stopped during the first start's checks: given up (nothing half-recorded)"
            );
            work.abort();
            None
        }
    }
}
