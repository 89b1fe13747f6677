//! Source → outbox → route, one committed transaction at a time, handed on to the sink's
//! side.

use tokio_util::sync::CancellationToken;

use super::handoff::Handoff;
use super::invalid::InvalidPolicy;
use super::release::{At, Releases, Stages};
use super::PipelineError;
use crate::config::Config;
use crate::monitor::Metrics;
use crate::outbox::Mapper;
use crate::route::{Batch, Router};
use crate::source::{BinlogReader, Read, Transaction};

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
    let mut batch = router.route(mapped)?;
    if let Some(traces) = metrics.traces() {
        for r in &mut batch.records {
            let about = crate::monitor::traces::About {
                event_id: &r.event.id.0,
                table: r.event.table.to_string(),
                position: &r.event.position,
            };
            r.trace = traces.start(&mut r.headers, batch.commit_time_ms, about);
        }
    }
    Ok(batch)
}

/// The read loop's stages and where it hands their batches.
pub(super) struct ReadStages {
    pub policy: InvalidPolicy,
    pub mapper: Mapper,
    pub router: Router,
    pub handoff: Handoff,
    /// With parking, operators' requests, carried out between transactions.
    pub releases: Option<Releases>,
}

/// Source → outbox → route, one committed transaction at a time; between two, the
/// operators' parking requests that arrived (a quiet server's heartbeat is such a
/// moment too).
pub(super) async fn read_loop(
    stages: ReadStages,
    mut reader: BinlogReader,
    mut at: At,
    stop: CancellationToken,
    metrics: Metrics,
) -> Result<(), PipelineError> {
    let ReadStages {
        mut policy,
        mapper,
        router,
        handoff,
        mut releases,
    } = stages;
    loop {
        if !handoff.room(&stop).await {
            return Ok(());
        }
        if let Some(releases) = releases.as_mut() {
            let mut lent = Stages {
                policy: &mut policy,
                mapper: &mapper,
                router: &router,
                handoff: &handoff,
                stop: &stop,
                metrics: &metrics,
            };
            if !releases.carry_out_arrived(&mut lent, &at).await? {
                return Ok(());
            }
        }
        let read = tokio::select! {
            biased;
            _ = stop.cancelled() => return Ok(()),
            read = reader.next_read() => read?,
        };
        let Read::Transaction(txn) = read else {
            continue;
        };
        let mut batch = map_and_route(&mapper, &router, &metrics, txn)?;
        policy.apply(&router, &metrics, &mut batch)?;
        // Only requests need to know where the loop is.
        if releases.is_some() {
            at.follow(&batch);
        }
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
