//! `replay`: publish chosen outbox rows again, on purpose — same event id, key, topic and
//! payload as the first delivery, plus a header carrying the replay's id — throttled and
//! audited. It reads the tables, not the binlog, and never touches the router's
//! checkpoint, so it runs beside a streaming router.

use std::collections::BTreeSet;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::audit::{AuditEntry, AuditTrail};
use super::OpsError;
use crate::config::Config;
use crate::pipeline::table::{republish, table_sink, ParkedRows, TableRows};
use crate::pipeline::PipelineError;
use crate::route::Record;
use crate::source::snapshot::RowFilter;
use crate::source::{self, server};

/// Which outbox rows: every given condition must hold.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Selection {
    /// These event ids.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub event_ids: Vec<String>,
    /// Rows of this aggregate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aggregate_id: Option<String>,
    /// Rows of this event type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// Event ids from `.0` to `.1`, both included (compared as the column's type).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id_range: Option<(String, String)>,
    /// Written at or after this unix time (timestamp column).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<i64>,
    /// Written before this unix time (timestamp column).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<i64>,
    /// An SQL condition, such as the snapshot watermark `id > 1234567`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// The DATETIME/TIMESTAMP column `since` and `until` are on.
    #[serde(skip)]
    pub timestamp_column: String,
}

impl Selection {
    /// True when no condition was given.
    pub fn is_empty(&self) -> bool {
        self.event_ids.is_empty()
            && self.aggregate_id.is_none()
            && self.event_type.is_none()
            && self.id_range.is_none()
            && self.since.is_none()
            && self.until.is_none()
            && self.condition.is_none()
    }

    /// The rows it selects, on the configured outbox columns.
    pub fn filter(&self, config: &Config) -> RowFilter {
        let columns = &config.outbox.columns;
        let mut f = RowFilter::default();
        if !self.event_ids.is_empty() {
            f = f.one_of(&columns.event_id, &self.event_ids);
        }
        if let Some(a) = &self.aggregate_id {
            f = f.one_of(&columns.aggregate_id, std::slice::from_ref(a));
        }
        if let Some(t) = &self.event_type {
            f = f.one_of(&columns.event_type, std::slice::from_ref(t));
        }
        if let Some((low, high)) = &self.id_range {
            f = f.between(&columns.event_id, low, high);
        }
        if let Some(s) = self.since {
            f = f.since(&self.timestamp_column, s);
        }
        if let Some(u) = self.until {
            f = f.until(&self.timestamp_column, u);
        }
        if let Some(c) = &self.condition {
            f = f.condition(c);
        }
        f
    }
}

/// How to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// What.
    pub selection: Selection,
    /// Records per second at most.
    pub rate: Option<f64>,
    /// Why (required: it goes into the audit trail).
    pub reason: String,
    /// Who.
    pub by: String,
    /// `replay`, or `republish` when reconcile sends what is missing.
    pub action: &'static str,
    /// List what would go; send nothing, audit nothing.
    pub dry_run: bool,
}

/// What a replay did.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// Its audit entry (the outcome); for a dry run, what would have been audited.
    pub audit: AuditEntry,
    /// True when nothing was sent.
    pub dry_run: bool,
    /// Selected events left out because their aggregate is parked (`on_invalid =
    /// "park"`): replayed now they would overtake the release.
    pub parked: Vec<String>,
}

/// Replays the selection; `listed` sees every record (a dry run prints them).
pub async fn replay(
    config: &Config,
    opts: &ReplayOptions,
    stop: &CancellationToken,
    mut listed: impl FnMut(&Record),
) -> Result<ReplayReport, OpsError> {
    if opts.selection.is_empty() {
        return Err(OpsError::NothingSelected);
    }
    let id = format!("replay-{}", uuid::Uuid::new_v4());
    let mut entry = AuditEntry {
        id: id.clone(),
        action: opts.action.into(),
        by: opts.by.clone(),
        at: super::audit::now_rfc3339(),
        reason: opts.reason.clone(),
        selection: serde_json::to_value(&opts.selection).expect("selections serialize"),
        outcome: "started".into(),
        count: 0,
        first_event_id: None,
        last_event_id: None,
        topics: Vec::new(),
        objects: Vec::new(),
    };
    let sink = table_sink(config, opts.dry_run).map_err(|e| OpsError::Pipeline(Box::new(e)))?;
    let trail = AuditTrail::new(&config.ops, &config.checkpoint);
    if !opts.dry_run {
        trail.write(&entry, sink.as_ref()).await?;
    }
    let mut conn = source::connect(&config.source).await?;
    let flavor = server::flavor(&mut conn).await?;
    let position = server::current_position(&mut conn, flavor).await?;
    let mut rows = TableRows::new(opts.selection.filter(config), &position);
    rows.header = Some((config.ops.replay_header.clone(), id.into_bytes()));
    rows.rate = opts.rate;
    // Replayed now, a parked aggregate's events would overtake its release.
    rows.parked = ParkedRows::read(config, ParkedRows::leave_out)
        .await
        .map_err(|e| OpsError::Pipeline(Box::new(e)))?;
    let mut topics = BTreeSet::new();
    let mut objects = Vec::new();
    let (mut first, mut last, mut handed) = (None, None, 0u64);
    let sent = {
        let publish = republish(config, &mut conn, &mut rows, sink.as_ref(), |r| {
            let event_id = r.event.id.to_string();
            first.get_or_insert_with(|| event_id.clone());
            last = Some(event_id);
            topics.insert(r.topic.to_string());
            if let (Some(cc), true) = (&config.claim_check, r.claim_check) {
                let value = r.value.as_deref().unwrap_or_default();
                objects.push(cc.reference(&r.topic, &r.event.id, value).location());
            }
            handed += 1;
            listed(r);
        });
        tokio::select! {
            sent = publish => Some(sent),
            _ = stop.cancelled() => None,
        }
    };
    let parked = match std::mem::take(&mut rows.parked) {
        ParkedRows::LeaveOut { ids, .. } => ids,
        _ => Vec::new(),
    };
    entry.first_event_id = first;
    entry.last_event_id = last;
    entry.topics = topics.into_iter().collect();
    entry.objects = objects;
    // On a stop or failure the count is of records handed to Kafka, not all of them
    // acknowledged; the outcome says so.
    entry.count = handed;
    let left_out = match parked.len() {
        0 => String::new(),
        n => format!("; {n} event(s) of parked aggregates left out (`parked release` delivers them in order)"),
    };
    let (outcome, result) = match sent {
        Some(Ok(n)) => {
            entry.count = n;
            (format!("completed{left_out}"), Ok(()))
        }
        None => (
            format!("stopped by a signal after {handed} record(s) were handed to Kafka"),
            Ok(()),
        ),
        Some(Err(e)) => (
            format!("failed after {handed} record(s) were handed to Kafka: {e}"),
            Err(e),
        ),
    };
    let entry = entry.then(outcome);
    if !opts.dry_run {
        trail.write(&entry, sink.as_ref()).await?;
    }
    result.map_err(|e: PipelineError| OpsError::Pipeline(Box::new(e)))?;
    Ok(ReplayReport {
        audit: entry,
        dry_run: opts.dry_run,
        parked,
    })
}
