//! The console's operator commands, for a source configured on this instance, run as
//! the console's caller (the audit trail names the credential): a replay's count and
//! the replay a leader carries out for an ask on the control topic, `parked list` /
//! `parked release` from the parked page, and the dead letters.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::parked::{list, request, Which};
use super::replay::{replay, ReplayOptions, Selection};
use super::OpsError;
use crate::config::Config;
use crate::monitor::control::ReplayAsk;
use crate::monitor::server::{DeskError, ParkedWhich, ReplayWhich};
use crate::outbox::OnInvalid;
use crate::pipeline::lookup::EventLookup;
use crate::pipeline::ReplayDone;
use crate::route::parking::Action;

/// Replay counts for the console (a dry run: nothing sent), over the sources the event
/// lookup knows.
pub struct ConsoleReplay {
    pub sources: Arc<EventLookup>,
}

impl crate::monitor::server::Replay for ConsoleReplay {
    fn count<'a>(
        &'a self,
        source: &'a str,
        which: ReplayWhich,
        by: &'a str,
    ) -> BoxFuture<'a, Result<serde_json::Value, String>> {
        Box::pin(async move {
            let config = self.sources.config_of(source)?;
            let config = config.as_ref().as_ref();
            let opts = replay_options(config, which, by, "(counted from the console)", true);
            let report = replay(config, &opts, &CancellationToken::new(), |_| {})
                .await
                .map_err(|e| crate::cause_chain(&anyhow::Error::from(e)))?;
            Ok(serde_json::to_value(report).unwrap_or_default())
        })
    }
}

/// The replays asked on the control topic, carried out by the source's leader as the
/// asker (the audit trail names the console's credential).
pub struct LeaderReplay;

impl crate::pipeline::Replayer for LeaderReplay {
    fn replay<'a>(
        &'a self,
        config: &'a Config,
        ask: &'a ReplayAsk,
    ) -> BoxFuture<'a, Result<ReplayDone, String>> {
        Box::pin(async move {
            let opts = replay_options(config, ask.which.clone(), &ask.by, &ask.reason, false);
            let report = replay(config, &opts, &CancellationToken::new(), |_| {})
                .await
                .map_err(|e| crate::cause_chain(&anyhow::Error::from(e)))?;
            let mut outcome = report.audit.outcome.clone();
            if !report.parked.is_empty() {
                outcome.push_str(&format!(
                    "; {} left out: their aggregate is parked",
                    report.parked.len()
                ));
            }
            Ok(ReplayDone {
                id: report.audit.id,
                count: report.audit.count,
                outcome,
            })
        })
    }
}

/// `outbox-router replay`'s options for rows the console named.
fn replay_options(
    config: &Config,
    which: ReplayWhich,
    by: &str,
    reason: &str,
    dry_run: bool,
) -> ReplayOptions {
    ReplayOptions {
        selection: Selection {
            event_ids: which.event_ids,
            since: which.since,
            until: which.until,
            aggregate_id: which.aggregate_id,
            event_type: which.event_type,
            timestamp_column: config
                .outbox
                .columns
                .timestamp
                .clone()
                .unwrap_or_else(|| "created_at".into()),
            ..Selection::default()
        },
        rate: None,
        reason: reason.to_string(),
        by: by.to_string(),
        action: "replay",
        dry_run,
    }
}

/// Ordered parking for the console (`parked list` and `parked release`), over the
/// sources the event lookup knows.
pub struct ConsoleParking {
    pub sources: Arc<EventLookup>,
}

/// How long a release from the console waits for the leader's outcomes.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

fn desk_error(e: OpsError) -> DeskError {
    match e {
        OpsError::ParkingOff | OpsError::NotParked { .. } | OpsError::AmbiguousAggregate { .. } => {
            DeskError::Refused(e.to_string())
        }
        other => DeskError::Failed(crate::cause_chain(&anyhow::Error::from(other))),
    }
}

impl crate::monitor::server::Parking for ConsoleParking {
    fn list<'a>(&'a self, source: &'a str) -> BoxFuture<'a, Result<serde_json::Value, DeskError>> {
        Box::pin(async move {
            let config = self.sources.config_of(source).map_err(DeskError::Refused)?;
            if config.as_ref().as_ref().outbox.on_invalid != OnInvalid::Park {
                return Err(desk_error(OpsError::ParkingOff));
            }
            let listed = tokio::task::spawn_blocking(move || list(config.as_ref().as_ref()))
                .await
                .map_err(|e| DeskError::Failed(e.to_string()))?
                .map_err(desk_error)?;
            Ok(serde_json::to_value(listed).unwrap_or_default())
        })
    }

    fn release<'a>(
        &'a self,
        source: &'a str,
        which: ParkedWhich,
        by: &'a str,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<serde_json::Value, DeskError>> {
        Box::pin(async move {
            let config = self.sources.config_of(source).map_err(DeskError::Refused)?;
            let which = Which {
                ids: which.ids,
                aggregate_type: which.aggregate_type,
                table: which.table,
            };
            let answered = request(
                config.as_ref().as_ref(),
                Action::Release,
                &which,
                reason,
                by,
                RELEASE_WAIT,
            )
            .await
            .map_err(desk_error)?;
            Ok(serde_json::to_value(answered).unwrap_or_default())
        })
    }
}

/// The dead letters of a source, for the console.
pub struct ConsoleDeadLetters {
    pub sources: Arc<EventLookup>,
}

impl crate::monitor::server::DeadLetters for ConsoleDeadLetters {
    fn window_days(&self) -> i64 {
        super::dead_letters::WINDOW_DAYS
    }

    fn recent<'a>(
        &'a self,
        source: &'a str,
    ) -> BoxFuture<'a, Result<serde_json::Value, DeskError>> {
        Box::pin(async move {
            let config = self.sources.config_of(source).map_err(DeskError::Refused)?;
            if config.as_ref().as_ref().outbox.on_invalid != OnInvalid::DeadLetter {
                return Err(DeskError::Refused(format!(
                    "{source} does not dead-letter (outbox.on_invalid is {:?}): it has no dead letters",
                    config.as_ref().as_ref().outbox.on_invalid.as_str()
                )));
            }
            let read = tokio::task::spawn_blocking(move || {
                super::dead_letters::recent(config.as_ref().as_ref())
            })
            .await
            .map_err(|e| DeskError::Failed(e.to_string()))?
            .map_err(desk_error)?;
            Ok(serde_json::to_value(read).unwrap_or_default())
        })
    }
}
