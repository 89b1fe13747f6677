//! An operator's parking request (`parked release` / `parked drop`), carried out by the
//! source's leader between two binlog transactions: the read loop reads nothing while
//! it works, so no later event of a released aggregate can overtake its parked ones.
//!
//! A release re-reads each parked event's row from its table (a fixed row goes out
//! fixed; a row that is gone goes out as its parked copy), sends the records to their
//! destinations in their original order with their original ids, then the outcome
//! record that un-parks the aggregate for every instance:
//! - exactly-once: records and outcome in one batch, so one Kafka transaction — both
//!   visible, or neither and the next leader carries the request out again;
//! - at-least-once: the outcome only once Kafka acknowledged every record, so a crash
//!   in between leaves the aggregate parked and the request open: it is carried out
//!   again (duplicates with the same ids, never a reordering, never a loss).

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::handoff::Handoff;
use super::invalid::InvalidPolicy;
use super::refusals::Refusals;
use super::PipelineError;
use crate::kafka::KafkaConfig;
use crate::monitor::Metrics;
use crate::outbox::{Aggregate, Mapper};
use crate::position::Position;
use crate::route::parking::{
    outcome_record, release_records, Action, Entry, Kind, ParkedCopy, Request,
};
use crate::route::{Batch, Record, Router};
use crate::source::{self, RowChange, RowOp, SourceConfig, Transaction};

/// Event ids a release reads again per statement.
const REREAD_CHUNK: usize = 1000;

/// Where the read loop is: the end of the last binlog transaction handed on (what a
/// request's batches carry, so the checkpoint stays where it is), and whether it is
/// between two transactions (a streamed part of a large one may have gone before).
#[derive(Debug, Clone)]
pub(super) struct At {
    pub end: Position,
    pub delivered_through: Option<Position>,
    pub between: bool,
}

impl At {
    /// After `batch` was handed on.
    pub(super) fn follow(&mut self, batch: &Batch) {
        self.between = batch.complete;
        if batch.complete {
            self.end = batch.end.clone();
            self.delivered_through = batch.delivered_through.clone();
        }
    }
}

/// Requests on their way to the read loop, and what carrying them out needs.
pub(super) struct Releases {
    pub requests: mpsc::UnboundedReceiver<Request>,
    pub kafka: KafkaConfig,
    pub source: SourceConfig,
    pub event_id_column: String,
    pub exactly_once: bool,
    /// What Kafka refused in this process's runs: a release it refused is answered so.
    pub refusals: Refusals,
    /// Stops the parking topic's watcher when the run ends.
    pub _watching: tokio_util::sync::DropGuard,
}

/// What the read loop lends a request.
pub(super) struct Stages<'a> {
    pub policy: &'a mut InvalidPolicy,
    pub mapper: &'a Mapper,
    pub router: &'a Router,
    pub handoff: &'a Handoff,
    pub stop: &'a CancellationToken,
    pub metrics: &'a Metrics,
}

impl Releases {
    /// Carries out the requests that arrived; `false` when the pipeline stopped
    /// meanwhile (the acker says why).
    pub(super) async fn carry_out_arrived(
        &mut self,
        stages: &mut Stages<'_>,
        at: &At,
    ) -> Result<bool, PipelineError> {
        if !at.between {
            return Ok(true);
        }
        while let Ok(request) = self.requests.try_recv() {
            if !self.carry_out(request, stages, at).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    async fn carry_out(
        &mut self,
        request: Request,
        stages: &mut Stages<'_>,
        at: &At,
    ) -> Result<bool, PipelineError> {
        let Some(parking) = stages.policy.parking() else {
            return Ok(true);
        };
        let topic = parking.topic().to_string();
        let parked: Vec<Aggregate> = request
            .aggregates
            .iter()
            .filter_map(|name| parking.find(name).map(|h| h.aggregate.clone()))
            .collect();
        let position = at.end.to_string();
        // Named but not parked (released meanwhile): answered, so that the command
        // waiting for it hears why.
        for name in &request.aggregates {
            if parked.iter().any(|a| name.names(a)) {
                continue;
            }
            warn!(request = %request.id, aggregate = ?name, "parking request names an aggregate that is not parked: nothing to do");
            if let Some(aggregate) = name.aggregate() {
                let why = "not parked (released or dropped before this request)";
                let outcome = outcome_record(
                    &topic,
                    Kind::Refused,
                    &aggregate,
                    &request.id,
                    &position,
                    why,
                );
                if !self.send(Vec::new(), outcome, stages, at).await {
                    return Ok(false);
                }
            }
        }
        // Every parked event handed on so far is on the parking topic (committed, in
        // exactly-once mode) before it is read: none may be left behind by a release.
        if !parked.is_empty() && !self.counted(Vec::new(), stages, at).await {
            return Ok(false);
        }
        let copies = match request.action {
            Action::Drop => HashMap::new(),
            Action::Release => self.copies_of(&topic, &parked).await?,
        };
        for aggregate in parked {
            let (records, kind, reason) = match request.action {
                Action::Drop => (Vec::new(), Kind::Dropped, request.reason.clone()),
                Action::Release => {
                    let copies = copies.get(&aggregate).map_or(&[][..], Vec::as_slice);
                    let refused = self.refusals.refused_release(&request.id, &aggregate);
                    let released = match refused {
                        Some(why) => Err(format!("{why}; fix the topic (its ACL, its max.message.bytes), then release again")),
                        None => self.release(copies, stages, &at.end).await?,
                    };
                    match released {
                        Ok(records) => {
                            self.refusals.releasing(
                                &request.id,
                                &aggregate,
                                records.iter().map(|r| &r.event.id),
                            );
                            let why = format!(
                                "{} parked event(s) re-published in their order ({})",
                                records.len(),
                                request.reason
                            );
                            (records, Kind::Released, why)
                        }
                        Err(why) => (Vec::new(), Kind::Refused, why),
                    }
                }
            };
            let outcome = outcome_record(&topic, kind, &aggregate, &request.id, &position, &reason);
            let events = records.len();
            if !self.send(records, outcome, stages, at).await {
                return Ok(false);
            }
            let parking = stages.policy.parking().expect("parking");
            match kind {
                Kind::Refused => {
                    warn!(request = %request.id, %aggregate, reason, by = %request.by, "parking request refused: the aggregate stays parked")
                }
                _ => {
                    parking.unpark(&aggregate, Some(at.end.clone()));
                    info!(request = %request.id, %aggregate, action = kind.as_str(), events, %position, by = %request.by, reason = %request.reason, "aggregate un-parked: its later events go straight to their topics");
                }
            }
            stages
                .metrics
                .set_parked(parking.aggregates(), parking.events(), parking.oldest_ms());
        }
        Ok(true)
    }

    /// Each aggregate's parked events since it was last released or dropped, in
    /// parking order, with their records.
    async fn copies_of(
        &self,
        topic: &str,
        aggregates: &[Aggregate],
    ) -> Result<HashMap<Aggregate, Vec<ParkedCopy>>, PipelineError> {
        let (kafka, topic, wanted) = (self.kafka.clone(), topic.to_string(), aggregates.to_vec());
        let read = tokio::task::spawn_blocking(move || {
            crate::route::parking::read_all(
                &kafka,
                &topic,
                |e| matches!(e, Entry::Event(p) if wanted.contains(&p.aggregate)),
            )
        })
        .await
        .map_err(|e| PipelineError::TaskFailed {
            task: "parking",
            reason: e.to_string(),
        })??;
        let mut out: HashMap<Aggregate, Vec<ParkedCopy>> = HashMap::new();
        for (entry, raw) in read.entries {
            match (entry, raw) {
                (Entry::Event(parked), Some(raw)) => out
                    .entry(parked.aggregate.clone())
                    .or_default()
                    .push(ParkedCopy { parked, raw }),
                // A release or drop ends an episode: what was parked before it is done.
                (Entry::Outcome(o), _) if matches!(o.kind, Kind::Released | Kind::Dropped) => {
                    out.remove(&o.aggregate);
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// The records releasing `copies` sends (`Err`: why it is refused), each row read
    /// again from its table.
    async fn release(
        &self,
        copies: &[ParkedCopy],
        stages: &Stages<'_>,
        end: &Position,
    ) -> Result<Result<Vec<Record>, String>, PipelineError> {
        let Some(first) = copies.first() else {
            return Ok(Err("no parked event of it is on the parking topic".into()));
        };
        let table = first.parked.aggregate.table.clone();
        let ids: Vec<String> = copies
            .iter()
            .filter_map(|c| c.parked.event_id.as_ref())
            .map(|id| String::from_utf8_lossy(&id.0).into_owned())
            .collect();
        let mut conn = source::connect(&self.source).await?;
        let mut rows = HashMap::new();
        // A statement takes at most 65,535 parameters: read in slices.
        for ids in ids.chunks(REREAD_CHUNK) {
            let filter = source::snapshot::RowFilter::default().one_of(&self.event_id_column, ids);
            let mut stream = source::snapshot::rows(&mut conn, &table, &filter, &[]).await?;
            while let Some(row) = stream.next().await {
                let row = row?;
                let id = row
                    .index(&self.event_id_column)
                    .and_then(|i| row.get(i))
                    .and_then(|v| crate::outbox::column_bytes(v));
                if let Some(id) = id {
                    rows.insert(id, row);
                }
            }
        }
        let _ = conn.disconnect().await;
        let reread = |copy: &ParkedCopy| {
            let id = copy.parked.event_id.as_ref()?;
            let row = rows.remove(&id.0)?;
            Some(route_row(stages, &table, row, copy, end))
        };
        Ok(release_records(copies, reread))
    }

    /// Hands a request's records and outcome on: exactly-once in one batch (one Kafka
    /// transaction); at-least-once the outcome only once every record is acknowledged.
    async fn send(
        &self,
        records: Vec<Record>,
        outcome: Record,
        stages: &Stages<'_>,
        at: &At,
    ) -> bool {
        let (handoff, stop, metrics) = (stages.handoff, stages.stop, stages.metrics);
        if self.exactly_once || records.is_empty() {
            let mut all = records;
            all.push(outcome);
            let sent = handoff.send(batch_at(at, all, None), stop, metrics).await;
            crash_point!("parking.release_handed_on");
            return sent;
        }
        if !self.counted(records, stages, at).await {
            return false;
        }
        crash_point!("parking.release_before_outcome");
        handoff
            .send(batch_at(at, vec![outcome], None), stop, metrics)
            .await
    }

    /// Hands `records` on as a batch of their own and waits until it, and everything
    /// before it, counts (acknowledged; exactly-once: committed); `false` when the
    /// pipeline stopped first (the acker says why).
    async fn counted(&self, records: Vec<Record>, stages: &Stages<'_>, at: &At) -> bool {
        let (tx, rx) = oneshot::channel();
        let batch = batch_at(at, records, Some(tx));
        if !stages
            .handoff
            .send(batch, stages.stop, stages.metrics)
            .await
        {
            return false;
        }
        tokio::select! {
            biased;
            _ = stages.stop.cancelled() => false,
            // Dropped unanswered: a delivery or the commit failed.
            answer = rx => answer.is_ok(),
        }
    }
}

/// A batch of a request's records where the read loop is: it moves the checkpoint
/// nowhere new.
fn batch_at(at: &At, records: Vec<Record>, settled: Option<oneshot::Sender<()>>) -> Batch {
    Batch {
        end: at.end.clone(),
        delivered_through: at.delivered_through.clone(),
        commit_time_ms: 0,
        records,
        invalid: Vec::new(),
        routed_at: std::time::Instant::now(),
        complete: true,
        settled,
    }
}

/// A row read again, through the outbox and route stages, as the record it is now; its
/// commit time the parked copy's (the row's own, when a timestamp column maps it).
fn route_row(
    stages: &Stages<'_>,
    table: &Arc<crate::position::TableName>,
    row: source::RowImage,
    copy: &ParkedCopy,
    end: &Position,
) -> Result<Record, String> {
    let txn = Transaction {
        end: end.clone(),
        delivered_through: None,
        commit_time_ms: copy.raw.timestamp_ms,
        changes: vec![RowChange {
            table: table.clone(),
            op: RowOp::Insert,
            row: Some(row),
            event_offset: 0,
        }],
        complete: true,
    };
    let mapped = stages.mapper.map(txn).map_err(|e| e.reason)?;
    let mut batch = stages.router.route(mapped).map_err(|e| e.to_string())?;
    if let Some(bad) = batch.invalid.pop() {
        return Err(bad.event.reason);
    }
    let mut record = batch.records.pop().ok_or("the row was not an insert")?;
    record.event.position = copy.parked.position.clone();
    Ok(record)
}
