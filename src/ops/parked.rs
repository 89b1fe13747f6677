//! `parked`: what ordered parking holds back (read from the parking topic, the fleet's
//! record), and an operator's release or drop — written to the parking topic as a
//! request that the source's leader carries out between two binlog transactions, at a
//! position it logs, whichever instance leads; audited; its outcome awaited.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::audit::{AuditEntry, AuditTrail};
use super::OpsError;
use crate::config::Config;
use crate::outbox::OnInvalid;
use crate::route::parking::{
    read_all, request_headers, send_proven, Action, AggregateName, Entry, Parked, Request,
};

/// One parked aggregate, as `parked list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ParkedAggregate {
    /// Which aggregate.
    #[serde(flatten)]
    pub name: AggregateName,
    /// Events waiting.
    pub events: u64,
    /// Seconds since the first was written.
    pub oldest_age_secs: i64,
    /// The first event's id.
    pub first_event: String,
    /// Why the first could not be a record.
    pub reason: String,
}

/// Every parked aggregate, oldest first.
pub fn list(config: &Config) -> Result<Vec<ParkedAggregate>, OpsError> {
    let (set, _) = crate::route::parking::load(&config.kafka, &config.outbox.parking)?;
    let now = crate::checkpoint::now_ms();
    let mut out: Vec<ParkedAggregate> = set
        .held()
        .map(|h| ParkedAggregate {
            name: AggregateName::of(&h.aggregate),
            events: h.events,
            oldest_age_secs: (now - h.since_ms).max(0) / 1000,
            first_event: h.first_event.clone(),
            reason: h.reason.clone(),
        })
        .collect();
    out.sort_by_key(|a| std::cmp::Reverse(a.oldest_age_secs));
    Ok(out)
}

/// Which aggregates a command names: ids, narrowed by type and table when given.
#[derive(Debug, Clone, Default)]
pub struct Which {
    pub ids: Vec<String>,
    pub aggregate_type: Option<String>,
    pub table: Option<String>,
}

impl Which {
    fn matches(&self, a: &ParkedAggregate, id: &str) -> bool {
        a.name.id == id
            && self
                .aggregate_type
                .as_ref()
                .is_none_or(|t| a.name.aggregate_type.as_ref() == Some(t))
            && self.table.as_ref().is_none_or(|t| &a.name.table == t)
    }

    /// The parked aggregates named: each id must name exactly one.
    fn resolve(&self, parked: &[ParkedAggregate]) -> Result<Vec<AggregateName>, OpsError> {
        let mut out = Vec::new();
        for id in &self.ids {
            let found: Vec<&ParkedAggregate> =
                parked.iter().filter(|a| self.matches(a, id)).collect();
            match found.as_slice() {
                [one] => out.push(one.name.clone()),
                [] => {
                    return Err(OpsError::NotParked {
                        id: id.clone(),
                        parked: parked.len(),
                    })
                }
                many => {
                    return Err(OpsError::AmbiguousAggregate {
                        id: id.clone(),
                        candidates: many
                            .iter()
                            .map(|a| {
                                format!(
                                    "{} {}",
                                    a.name.table,
                                    a.name.aggregate_type.as_deref().unwrap_or("NULL")
                                )
                            })
                            .collect::<Vec<_>>()
                            .join("; "),
                    })
                }
            }
        }
        Ok(out)
    }
}

/// The parked events of the aggregates `which` names, in their order (those of the
/// current parking: what a release would send).
pub fn show(config: &Config, which: &Which) -> Result<Vec<Parked>, OpsError> {
    let names = which.resolve(&list(config)?)?;
    let read = read_all(&config.kafka, &config.outbox.parking.topic, |_| false)?;
    Ok(read
        .parked_now()
        .into_iter()
        .filter(|p| names.iter().any(|n| n.names(&p.aggregate)))
        .cloned()
        .collect())
}

/// What became of a request, per aggregate.
#[derive(Debug, Clone, Serialize)]
pub struct Answered {
    pub request: String,
    pub outcomes: Vec<OutcomeLine>,
    /// Aggregates the leader had not answered for when the wait ended.
    pub waiting: Vec<AggregateName>,
}

/// One aggregate's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct OutcomeLine {
    #[serde(flatten)]
    pub name: AggregateName,
    pub outcome: String,
    pub position: String,
    pub reason: String,
}

/// A release or drop: the request written (after its audit entry), then its outcome
/// awaited for `wait`.
pub async fn request(
    config: &Config,
    action: Action,
    which: &Which,
    reason: &str,
    by: &str,
    wait: Duration,
) -> Result<Answered, OpsError> {
    if config.outbox.on_invalid != OnInvalid::Park {
        return Err(OpsError::ParkingOff);
    }
    let names = which.resolve(&list(config)?)?;
    let request = Request {
        id: format!("parked-{}", uuid::Uuid::new_v4()),
        action,
        aggregates: names.clone(),
        by: by.to_string(),
        reason: reason.to_string(),
    };
    let verb = match action {
        Action::Release => "parked release",
        Action::Drop => "parked drop",
    };
    let entry = AuditEntry {
        id: request.id.clone(),
        action: verb.into(),
        by: by.to_string(),
        at: super::audit::now_rfc3339(),
        reason: reason.to_string(),
        selection: serde_json::to_value(&names).expect("names serialize"),
        outcome: "requested".into(),
        count: 0,
        first_event_id: None,
        last_event_id: None,
        topics: vec![config.outbox.parking.topic.clone()],
        objects: Vec::new(),
    };
    let sink = crate::pipeline::table::table_sink(config, false)
        .map_err(|e| OpsError::Pipeline(Box::new(e)))?;
    let trail = AuditTrail::new(&config.ops, &config.checkpoint);
    trail.write(&entry, sink.as_ref()).await?;
    send_request(config, &request).await?;
    let answered = tokio::task::block_in_place(|| await_outcomes(config, &request, wait))?;
    let outcome = match (
        answered.waiting.is_empty(),
        answered.outcomes.iter().all(|o| o.outcome != "refused"),
    ) {
        (false, _) => "requested; no answer yet from the leader".to_string(),
        (true, true) => "completed".to_string(),
        (true, false) => "refused for some aggregates (see the outcomes)".to_string(),
    };
    trail.write(&entry.then(outcome), sink.as_ref()).await?;
    Ok(answered)
}

/// Writes `request` to the parking topic, proven by its offset.
async fn send_request(config: &Config, request: &Request) -> Result<(), OpsError> {
    let value = serde_json::to_vec(request).expect("requests serialize");
    send_proven(
        &config.kafka,
        &config.outbox.parking.topic,
        request.id.as_bytes(),
        &request_headers(),
        Some(&value),
    )
    .await?;
    Ok(())
}

/// Reads the parking topic until every aggregate of `request` has an outcome, or
/// `wait` passed.
fn await_outcomes(
    config: &Config,
    request: &Request,
    wait: Duration,
) -> Result<Answered, OpsError> {
    let deadline = Instant::now() + wait;
    loop {
        let read = read_all(&config.kafka, &config.outbox.parking.topic, |_| false)?;
        let outcomes: Vec<OutcomeLine> = read
            .entries
            .into_iter()
            .filter_map(|(e, _)| match e {
                Entry::Outcome(o) if o.request == request.id => Some(OutcomeLine {
                    name: AggregateName::of(&o.aggregate),
                    outcome: o.kind.as_str().to_string(),
                    position: o.position,
                    reason: o.reason,
                }),
                _ => None,
            })
            .collect();
        let waiting: Vec<AggregateName> = request
            .aggregates
            .iter()
            .filter(|n| !outcomes.iter().any(|o| &o.name == *n))
            .cloned()
            .collect();
        if waiting.is_empty() || Instant::now() >= deadline {
            return Ok(Answered {
                request: request.id.clone(),
                outcomes,
                waiting,
            });
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
