//! Publishing outbox rows read from the tables themselves rather than the binlog —
//! the initial snapshot, `recover` after a purge, `replay` — through the same outbox,
//! route and sink stages, with their original event ids.
//!
//! The initial snapshot (`source.snapshot = "initial"`) reads every row in a consistent
//! snapshot whose binlog position MariaDB reports exactly: streaming continues there.

use std::sync::Arc;

use futures::StreamExt;

use super::{InvalidPolicy, PipelineError};
use crate::checkpoint::now_ms;
use crate::config::Config;
use crate::monitor::Metrics;
use crate::position::Position;
use crate::progress::CommandProgress;
use crate::route::parking::Parking;
use crate::route::{Batch, Router};
use crate::sink::{NullSink, Sink};
use crate::source::{self, server, RowChange, RowOp, Transaction};

/// Rows published per Kafka round trip.
const CHUNK: usize = 1000;

/// Which table rows go out, and how.
#[derive(Debug)]
pub(crate) struct TableRows<'a> {
    /// Which rows of each outbox table.
    pub filter: source::snapshot::RowFilter,
    /// The position their records carry as transaction end.
    pub position: &'a Position,
    /// A header added to every record (a replay's id).
    pub header: Option<(String, Vec<u8>)>,
    /// Records per second at most.
    pub rate: Option<f64>,
    /// What happens to rows of parked aggregates.
    pub parked: ParkedRows,
}

impl<'a> TableRows<'a> {
    /// The rows passing `filter`, as fast as Kafka takes them, without an extra header.
    pub fn new(filter: source::snapshot::RowFilter, position: &'a Position) -> Self {
        Self {
            filter,
            position,
            header: None,
            rate: None,
            parked: ParkedRows::Unaware,
        }
    }
}

/// What a table read does with the rows of parked aggregates (`on_invalid = "park"`).
#[derive(Debug, Default)]
pub(crate) enum ParkedRows {
    /// Nothing to keep order with: parking is off, or the read only compares.
    #[default]
    Unaware,
    /// Held behind their aggregate's parked events on the parking topic, and invalid
    /// rows parking their aggregate, as the stream would have done (`recover`: rows the
    /// purged binlog carried); counted.
    Hold { parking: Parking, held: u64 },
    /// Left out, their ids kept (`replay`: sent now, they would overtake the parked
    /// events a release delivers in order).
    LeaveOut { parking: Parking, ids: Vec<String> },
    /// Read to compare (`reconcile`): rows that cannot be records are counted, not a
    /// reason to stop — parking took them out of the stream.
    Compare { invalid: u64 },
}

impl ParkedRows {
    /// With `on_invalid = "park"`, the parked aggregates as the parking topic holds them,
    /// in the shape `with` makes; `Unaware` otherwise.
    pub(crate) async fn read(
        config: &Config,
        with: fn(Parking) -> ParkedRows,
    ) -> Result<ParkedRows, PipelineError> {
        if config.outbox.on_invalid != crate::outbox::OnInvalid::Park {
            return Ok(ParkedRows::Unaware);
        }
        let (kafka, parking) = (config.kafka.clone(), config.outbox.parking.clone());
        let (set, _) =
            tokio::task::spawn_blocking(move || crate::route::parking::load(&kafka, &parking))
                .await
                .map_err(|e| PipelineError::TaskFailed {
                    task: "parking",
                    reason: e.to_string(),
                })??;
        Ok(with(set))
    }

    /// `Hold` with nothing held yet.
    pub(crate) fn hold(parking: Parking) -> Self {
        ParkedRows::Hold { parking, held: 0 }
    }

    /// `LeaveOut` with nothing left out yet.
    pub(crate) fn leave_out(parking: Parking) -> Self {
        ParkedRows::LeaveOut {
            parking,
            ids: Vec::new(),
        }
    }

    /// Before the invalid-row policy (which stops a table read at an invalid row):
    /// `Hold` parks invalid rows and holds parked aggregates' events, as the stream
    /// would; `LeaveOut` takes out every row of a parked aggregate, invalid ones too;
    /// `Compare` counts the invalid rows instead.
    fn apply(&mut self, router: &Router, batch: &mut Batch) -> Result<(), PipelineError> {
        match self {
            ParkedRows::Unaware => {}
            ParkedRows::Hold { parking, held } => {
                parking.divert(router, batch)?;
                let topic = parking.topic();
                *held += batch.records.iter().filter(|r| &*r.topic == topic).count() as u64;
            }
            ParkedRows::LeaveOut { parking, ids } => {
                batch.records.retain(|r| {
                    let parked = parking.holds(r);
                    if parked {
                        ids.push(r.event.id.to_string());
                    }
                    !parked
                });
                batch.invalid.retain(|bad| {
                    let parked = bad
                        .event
                        .aggregate
                        .as_deref()
                        .is_some_and(|a| parking.holds_aggregate(a));
                    if parked {
                        ids.push(bad.event.event_id.as_ref().map_or_else(
                            || format!("(no id, at {})", bad.event.position),
                            ToString::to_string,
                        ));
                    }
                    !parked
                });
            }
            ParkedRows::Compare { invalid } => {
                *invalid += batch.invalid.len() as u64;
                batch.invalid.clear();
            }
        }
        Ok(())
    }
}

/// Where rows read from tables go: an at-least-once Kafka producer (same event ids; a
/// table read is never part of an exactly-once transaction), or nowhere for a dry run.
pub(crate) fn table_sink(config: &Config, dry_run: bool) -> Result<Box<dyn Sink>, PipelineError> {
    if dry_run {
        return Ok(Box::new(NullSink));
    }
    let metrics = Metrics::default();
    let check_in = match &config.claim_check {
        Some(cfg) => Some(crate::sink::CheckIn::new(cfg, &metrics)?),
        None => None,
    };
    Ok(crate::sink::kafka_sink(
        &config.kafka,
        &crate::sink::DeliveryConfig::default(),
        check_in,
        &metrics,
    )?)
}

/// The records the outbox tables' rows that `rows.filter` passes would become, each
/// shown to `inspect`, nothing sent (`reconcile` compares them with the topics).
pub(crate) async fn read_as_records(
    config: &Config,
    conn: &mut mysql_async::Conn,
    rows: &mut TableRows<'_>,
    inspect: impl FnMut(&crate::route::Record),
) -> Result<u64, PipelineError> {
    republish(config, conn, rows, &NullSink, inspect).await
}

/// Publishes the outbox tables' rows that `rows.filter` passes, with their original event
/// ids, waiting for every acknowledgement; `inspect` sees each record before it is sent.
pub(crate) async fn republish(
    config: &Config,
    conn: &mut mysql_async::Conn,
    rows: &mut TableRows<'_>,
    sink: &dyn Sink,
    mut inspect: impl FnMut(&crate::route::Record),
) -> Result<u64, PipelineError> {
    let metrics = Metrics::default();
    let (mapper, router) = super::read::stages(config).await?;
    let router = router.with_header(rows.header.clone());
    let mut policy = InvalidPolicy::of(config);
    let order_by: Vec<String> = if !config.source.snapshot_order_by.is_empty() {
        config.source.snapshot_order_by.clone()
    } else {
        rows.filter
            .time_column()
            .map(str::to_string)
            .or_else(|| config.rules().ok().and_then(|r| r.timestamp))
            .into_iter()
            .collect()
    };
    // Small chunks under a low rate, so the pace is even.
    let chunk_size = match rows.rate {
        Some(rate) if rate > 0.0 => (rate as usize).clamp(1, CHUNK),
        _ => CHUNK,
    };
    let started = std::time::Instant::now();
    let patterns = config.table_patterns();
    let tables = server::matching_tables(conn, &patterns).await?;
    let mut total = 0;
    for table in &tables {
        total += source::snapshot::count(conn, table, &rows.filter).await?;
    }
    let task = match sink.discards() {
        true => "outbox rows read from the table",
        false => "outbox rows published from the table",
    };
    let mut progress = CommandProgress::new(task, Some(total));
    let mut events = 0u64;
    for table in tables {
        let table = Arc::new(table);
        let stream = source::snapshot::rows(conn, &table, &rows.filter, &order_by).await?;
        let mut chunks = stream.chunks(chunk_size);
        while let Some(chunk) = chunks.next().await {
            let changes = chunk
                .into_iter()
                .map(|row| {
                    Ok(RowChange {
                        table: table.clone(),
                        op: RowOp::Insert,
                        row: Some(row?),
                        event_offset: 0,
                    })
                })
                .collect::<Result<Vec<_>, source::SourceError>>()?;
            let txn = Transaction {
                end: rows.position.clone(),
                delivered_through: None,
                commit_time_ms: now_ms(),
                changes,
                complete: true,
            };
            let mut batch = super::read::map_and_route(&mapper, &router, &metrics, txn)?;
            rows.parked.apply(&router, &mut batch)?;
            policy.apply(&router, &metrics, &mut batch)?;
            for record in &batch.records {
                inspect(record);
            }
            // Exactly-once mode: one Kafka transaction per chunk, without a marker (the
            // checkpoint moves only once every row is out), so a crash part-way sends the
            // rows again: table rows are published at least once.
            let transactions = sink.transactions();
            if let Some(t) = transactions {
                t.begin()?;
            }
            let sent = match sink.send(batch.records).await {
                Ok(delivery) => delivery.await,
                Err(e) => Err(e),
            };
            match sent {
                Ok(n) => {
                    events += n as u64;
                    progress.add(n as u64);
                }
                Err(e) => {
                    sink.abandon();
                    if let Some(t) = transactions {
                        t.abort();
                    }
                    return Err(e.into());
                }
            }
            if let Some(t) = transactions {
                t.commit(None).await?;
            }
            if let Some(rate) = rows.rate.filter(|r| *r > 0.0) {
                let due = std::time::Duration::from_secs_f64(events as f64 / rate);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    tokio::time::sleep(wait).await;
                }
            }
        }
        // reconcile and dry runs only read: the log says what happened.
        match sink.discards() {
            true => {
                tracing::info!(%table, events, "read outbox rows from the table, publishing nothing")
            }
            false => tracing::info!(%table, events, "published outbox rows from the table"),
        }
    }
    progress.finish();
    Ok(events)
}

/// The initial snapshot: every outbox row `rows` passes (all, or those past a watermark)
/// as of one consistent snapshot, published, and the binlog position that snapshot
/// corresponds to, where streaming continues.
pub async fn initial_snapshot(
    config: &Config,
    rows: source::snapshot::RowFilter,
    sink: &dyn Sink,
) -> Result<Position, PipelineError> {
    use mysql_async::prelude::Queryable;
    let mut conn = source::connect(&config.source).await?;
    let position = server::consistent_snapshot(&mut conn)
        .await?
        .ok_or(PipelineError::SnapshotUnsupported)?;
    let mut rows = TableRows::new(rows, &position);
    let events = republish(config, &mut conn, &mut rows, sink, |_| {}).await?;
    conn.query_drop("COMMIT")
        .await
        .map_err(|source| source::SourceError::Query {
            query: "COMMIT",
            source,
        })?;
    tracing::info!(%position, events, "initial snapshot published");
    Ok(position)
}
