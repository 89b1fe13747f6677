//! The in-process watcher: every few seconds, measure lag, bytes behind and retention
//! runway against the server, publish them, and log when thresholds are crossed.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::MonitorConfig;
use super::{status, Metrics, Verdict};
use crate::source::{self, SourceConfig};

/// How soon the first observation is tried again while the start is not yet known.
const FIRST_OBSERVATION_RETRY: Duration = Duration::from_millis(250);

/// How often a bad verdict is logged again while it lasts.
const REPEAT: Duration = Duration::from_secs(60);

/// Runs until `shutdown`.
pub async fn watch(
    source_config: &SourceConfig,
    config: &MonitorConfig,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let thresholds = config.thresholds(None, None);
    let mut tick = tokio::time::interval(Duration::from_secs(config.interval_secs.max(1)));
    let mut conn = None;
    let mut last: Option<(Verdict, Instant)> = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if conn.is_none() {
            match source::connect(source_config).await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    warn!(error = %e, "monitor cannot reach the source server");
                    continue;
                }
            }
        }
        // Until the pipeline has found or recorded its start there is nothing to judge;
        // it is asked again soon, so the first observation follows the start closely.
        let Some(checkpoint) = metrics.checkpoint() else {
            tick.reset_after(FIRST_OBSERVATION_RETRY);
            continue;
        };
        let checkpoint = Some(checkpoint);
        // Holding nothing, the router has delivered all it read: caught up at the reader
        // is caught up, even before the checkpoint writer has stored it.
        let reader = metrics
            .progress()
            .oldest_commit_ms()
            .is_none()
            .then(|| metrics.reader_position())
            .flatten();
        let observed = status::observe(
            conn.as_mut().expect("connected above"),
            checkpoint.as_ref(),
            true,
            reader.as_ref(),
        )
        .await;
        let mut st = match observed {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "monitor query failed; reconnecting next time");
                conn = None;
                continue;
            }
        };
        // What the router holds is the truth about lag: the oldest transaction it read
        // and Kafka has not yet acknowledged, whatever the checkpoint's age.
        if let Some(lag) = metrics.held_lag_ms() {
            st.lag_ms = Some(lag);
        }
        st.live = Some(metrics.live());
        st.judge(&thresholds);
        metrics.set_status(&st);
        let changed = last.is_none_or(|(v, at)| {
            v != st.verdict || (st.verdict != Verdict::Ok && at.elapsed() >= REPEAT)
        });
        if changed {
            let reasons = st.reasons.join("; ");
            match st.verdict {
                Verdict::Ok if last.is_some() => {
                    info!(runway_secs = ?st.runway_secs, lag_ms = ?st.lag_ms, "status back to ok")
                }
                Verdict::Ok => {}
                Verdict::Warning => {
                    warn!(runway_secs = ?st.runway_secs, lag_ms = ?st.lag_ms, bytes_behind = ?st.bytes_behind, %reasons, "status warning")
                }
                Verdict::Critical => {
                    error!(runway_secs = ?st.runway_secs, lag_ms = ?st.lag_ms, bytes_behind = ?st.bytes_behind, %reasons, "status critical")
                }
            }
            last = Some((st.verdict, Instant::now()));
        }
    }
}
