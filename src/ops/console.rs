//! The console's replay: `replay --event-id` for a source this instance runs, as the
//! console's caller (the audit trail names the credential), from its page.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::replay::{replay, ReplayOptions, Selection};
use crate::pipeline::lookup::EventLookup;

/// Replays for the console, over the sources the event lookup knows.
pub struct ConsoleReplay {
    pub sources: Arc<EventLookup>,
}

impl crate::monitor::server::Replay for ConsoleReplay {
    fn replay<'a>(
        &'a self,
        source: &'a str,
        event_ids: Vec<String>,
        by: &'a str,
        reason: &'a str,
    ) -> BoxFuture<'a, Result<serde_json::Value, String>> {
        Box::pin(async move {
            let config = self.sources.config_of(source)?;
            let config = config.as_ref().as_ref();
            let opts = ReplayOptions {
                selection: Selection {
                    event_ids,
                    ..Selection::default()
                },
                rate: None,
                reason: reason.to_string(),
                by: by.to_string(),
                action: "replay",
                dry_run: false,
            };
            let report = replay(config, &opts, &CancellationToken::new(), |_| {})
                .await
                .map_err(|e| crate::cause_chain(&anyhow::Error::from(e)))?;
            Ok(serde_json::to_value(report).unwrap_or_default())
        })
    }
}
