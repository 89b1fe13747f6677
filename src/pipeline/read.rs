//! Source → outbox → route, one committed transaction at a time, and what happens to
//! rows that cannot be records.

use std::time::Instant;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::PipelineError;
use crate::config::Config;
use crate::monitor::Metrics;
use crate::outbox::{Mapper, OnInvalid};
use crate::route::parking::Parking;
use crate::route::{Batch, InvalidAt, Router};
use crate::sink::ValueBudget;
use crate::source::{BinlogReader, Transaction};

/// The outbox and route stages, as configured (schemas loaded and, with a registry,
/// registered).
pub(crate) async fn stages(config: &Config) -> Result<(Mapper, Router), PipelineError> {
    let rules = std::sync::Arc::new(config.rules().map_err(PipelineError::Rules)?);
    let encoder = crate::route::encoder(&config.value, &rules).await?;
    let offload = config.claim_check.as_ref().map(crate::sink::offload);
    let router = Router::new(
        rules.clone(),
        &config.route,
        config.kafka.max_message_bytes(),
    )
    .with_encoder(encoder)
    .with_offload(offload);
    let mapper = Mapper::new(rules, router.dead_letter_copy());
    Ok((mapper, router))
}

/// One transaction through the outbox and route stages, counting the rows it ignores.
pub(super) fn map_and_route(
    mapper: &Mapper,
    router: &Router,
    metrics: &Metrics,
    txn: Transaction,
) -> Result<Batch, PipelineError> {
    let mapped = mapper.map(txn)?;
    for i in &mapped.ignored {
        metrics.ignored(i.op, i.rows);
    }
    Ok(router.route(mapped)?)
}

/// Where the reader hands its batches: the channel to the next stage, and with a claim
/// check the byte budget of the values on their way to the bucket.
pub(super) struct Handoff {
    pub tx: mpsc::Sender<Batch>,
    pub budget: Option<ValueBudget>,
}

impl Handoff {
    /// Waits while the values on their way to the bucket have spent the budget: the
    /// next transaction is not read (the binlog waits in the socket) until one is
    /// written. `false` when `stop` came first.
    async fn room(&self, stop: &CancellationToken) -> bool {
        let Some(budget) = &self.budget else {
            return true;
        };
        tokio::select! {
            biased;
            _ = stop.cancelled() => false,
            _ = budget.room() => true,
        }
    }

    /// Hands `batch` over, waiting for room; `false` when the next stage stopped or
    /// `stop` came first.
    async fn send(&self, batch: Batch, stop: &CancellationToken, metrics: &Metrics) -> bool {
        // Values for the bucket are bounded by bytes: a few 50 MB rows are not held at
        // once whatever the channel's room in batches.
        if let Some(budget) = &self.budget {
            let cost = budget.cost(&batch.records);
            tokio::select! {
                biased;
                _ = stop.cancelled() => return false,
                _ = budget.take(cost) => {}
            }
        }
        let permit = match self.tx.try_reserve() {
            Ok(permit) => permit,
            Err(mpsc::error::TrySendError::Full(())) => {
                let blocked = Instant::now();
                let permit = self.tx.reserve().await;
                metrics.reader_blocked(blocked.elapsed().as_secs_f64());
                match permit {
                    Ok(permit) => permit,
                    Err(_) => return false, // the acker stopped; it says why
                }
            }
            Err(mpsc::error::TrySendError::Closed(())) => return false,
        };
        permit.send(batch);
        true
    }
}

/// Source → outbox → route, one committed transaction at a time.
pub(super) async fn read_loop(
    mut policy: InvalidPolicy,
    mut reader: BinlogReader,
    mapper: Mapper,
    router: Router,
    handoff: Handoff,
    stop: CancellationToken,
    metrics: Metrics,
) -> Result<(), PipelineError> {
    loop {
        if !handoff.room(&stop).await {
            return Ok(());
        }
        let txn = tokio::select! {
            biased;
            _ = stop.cancelled() => return Ok(()),
            txn = reader.next_transaction() => txn?,
        };
        let mut batch = map_and_route(&mapper, &router, &metrics, txn)?;
        policy.apply(&router, &metrics, &mut batch)?;
        metrics.read(
            batch.complete.then_some(&batch.end),
            batch.commit_time_ms,
            batch.records.len(),
        );
        crash_point!("read.before_send");
        if !handoff.send(batch, &stop, &metrics).await {
            return Ok(());
        }
    }
}

/// What to do with rows that cannot be records (`outbox.on_invalid`).
#[derive(Debug)]
pub(crate) struct InvalidPolicy {
    on_invalid: OnInvalid,
    dead_letter_topic: String,
    /// `park`: the parked aggregates, read back from the parking topic when the run
    /// started; `None` where nothing parks (rows read from tables).
    parking: Option<Parking>,
}

impl InvalidPolicy {
    pub(crate) fn of(config: &Config) -> Self {
        Self {
            on_invalid: config.outbox.on_invalid,
            dead_letter_topic: config.outbox.dead_letter_topic.clone(),
            parking: None,
        }
    }

    /// The binlog stream's policy: with `park`, the parked aggregates `parking` holds.
    pub(crate) fn with_parking(mut self, parking: Option<Parking>) -> Self {
        self.parking = parking;
        self
    }

    /// Fails on the first invalid row, or dead-letters / skips each one, logged with
    /// table, position, event id and reason, and counted; or parks its aggregate and
    /// diverts the parked aggregates' events, in order.
    pub(crate) fn apply(
        &mut self,
        router: &Router,
        metrics: &Metrics,
        batch: &mut Batch,
    ) -> Result<(), PipelineError> {
        let policy = self.on_invalid.as_str();
        for _ in &batch.invalid {
            metrics.invalid(policy);
        }
        if self.on_invalid == OnInvalid::Park {
            return self.park(router, metrics, batch);
        }
        for InvalidAt { event: bad, .. } in std::mem::take(&mut batch.invalid) {
            match self.on_invalid {
                OnInvalid::Fail => return Err(PipelineError::Invalid(bad)),
                OnInvalid::DeadLetter => {
                    warn!(error = %bad, topic = %self.dead_letter_topic, policy, "invalid outbox row sent to the dead-letter topic");
                    metrics.dead_letter(&self.dead_letter_topic);
                    batch.records.push(router.dead_letter(
                        &self.dead_letter_topic,
                        &bad,
                        batch.commit_time_ms,
                    ));
                }
                OnInvalid::Skip => warn!(error = %bad, policy, "invalid outbox row skipped"),
                OnInvalid::Park => unreachable!("parked above"),
            }
        }
        Ok(())
    }

    fn park(
        &mut self,
        router: &Router,
        metrics: &Metrics,
        batch: &mut Batch,
    ) -> Result<(), PipelineError> {
        let Some(parking) = self.parking.as_mut() else {
            // Rows read from a table (snapshot, recover, replay) have no stream order to
            // keep: the first invalid one stops them, as `fail` would.
            return match std::mem::take(&mut batch.invalid).into_iter().next() {
                Some(InvalidAt { event, .. }) => Err(PipelineError::InvalidTableRow(event)),
                None => Ok(()),
            };
        };
        let before = parking.events();
        parking.divert(router, batch)?;
        if parking.events() != before {
            metrics.set_parked(parking.aggregates(), parking.events(), parking.oldest_ms());
        }
        Ok(())
    }
}
