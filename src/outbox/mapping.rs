//! The mapping of a transaction's rows to events.

use std::sync::Arc;

use tracing::{error, warn};

use super::value;
use super::{Aggregate, EventId, InvalidEvent, OnUpdate, OutboxEvent, Placement, RowCopy, Rules};
use crate::source::{RowChange, RowImage, RowOp, Transaction};

/// A transaction's events, ready for routing.
#[derive(Debug)]
pub struct MappedTransaction {
    /// The transaction these events came from.
    pub end: crate::position::Position,
    /// Delivered up to here though `end` is held before a prepared XA branch.
    pub delivered_through: Option<crate::position::Position>,
    /// Commit time (ms since epoch).
    pub commit_time_ms: i64,
    /// Each inserted row in commit order: its event, or why it cannot be one (for the
    /// `on_invalid` policy, which may need to know what came before it).
    pub events: Vec<Result<OutboxEvent, InvalidEvent>>,
    /// UPDATE / DELETE rows ignored, per operation and table, for the counters.
    pub ignored: Vec<Ignored>,
    /// False for a streamed part of a larger transaction.
    pub complete: bool,
}

/// Rows of one operation on one table that were ignored (the outbox is append-only).
#[derive(Debug, Clone)]
pub struct Ignored {
    /// UPDATE or DELETE.
    pub op: RowOp,
    /// The outbox table.
    pub table: Arc<crate::position::TableName>,
    /// How many rows.
    pub rows: u64,
}

/// Maps outbox rows to events.
pub struct Mapper {
    rules: Arc<Rules>,
    /// How an invalid row's columns are copied for its dead letter.
    copy: RowCopy,
}

impl Mapper {
    /// A mapper following `rules`, copying invalid rows as `copy` says.
    pub fn new(rules: Arc<Rules>, copy: RowCopy) -> Self {
        Self { rules, copy }
    }

    /// Maps every insert of a transaction; updates and deletes are counted and ignored
    /// (an update is an error under `table.op.invalid.behavior = fatal`); rows that cannot
    /// be events are collected for the policy.
    pub fn map(&self, txn: Transaction) -> Result<MappedTransaction, InvalidEvent> {
        let mut events = Vec::with_capacity(txn.changes.len());
        // Ignored rows are reported once per transaction and table, not per row: cleanup
        // jobs delete outbox rows by the million.
        let mut ignored: Vec<Ignored> = Vec::new();
        for change in txn.changes {
            match change.op {
                RowOp::Insert => events.push(self.map_row(&txn.end.file, change)),
                op => match ignored
                    .iter_mut()
                    .find(|i| i.op == op && i.table == change.table)
                {
                    Some(i) => i.rows += 1,
                    None => ignored.push(Ignored {
                        op,
                        table: change.table,
                        rows: 1,
                    }),
                },
            }
        }
        for Ignored { op, table, rows: n } in &ignored {
            let (op, n) = (*op, *n);
            let table = table.clone();
            let what =
                "rows on an outbox table: the outbox is append-only, only INSERTs are published";
            match (op, self.rules.on_update) {
                (RowOp::Update, OnUpdate::Fatal) => {
                    return Err(InvalidEvent {
                        table,
                        position: txn.end.to_string(),
                        event_id: None,
                        reason: format!("{n} UPDATE row(s) on the append-only outbox (table.op.invalid.behavior = fatal)"),
                        row: serde_json::Value::Null,
                        aggregate: None,
                    })
                }
                (RowOp::Update, OnUpdate::Error) => {
                    error!(%table, op = %op, rows = n, transaction_end = %txn.end, "ignored {op} {what}")
                }
                _ => warn!(%table, op = %op, rows = n, transaction_end = %txn.end, "ignored {op} {what}"),
            }
        }
        Ok(MappedTransaction {
            end: txn.end,
            delivered_through: txn.delivered_through,
            commit_time_ms: txn.commit_time_ms,
            events,
            ignored,
            complete: txn.complete,
        })
    }

    fn map_row(
        &self,
        file: &crate::position::BinlogFile,
        mut change: RowChange,
    ) -> Result<OutboxEvent, InvalidEvent> {
        let position = format!("{file}:{}", change.event_offset);
        let invalid = |event_id: Option<EventId>, reason: String| InvalidEvent {
            table: change.table.clone(),
            position: position.clone(),
            event_id,
            reason,
            row: change
                .row
                .as_ref()
                .map(|r| row_json(r, self.copy))
                .unwrap_or_default(),
            aggregate: change
                .row
                .as_ref()
                .and_then(|r| aggregate_of(r, &self.rules, &change.table))
                .map(Box::new),
        };
        let Some(row) = change.row.as_ref() else {
            return Err(invalid(
                None,
                "insert without an after image (binlog_row_image must be FULL)".into(),
            ));
        };
        let r = &self.rules;
        let id = match column(row, &r.event_id) {
            Err(e) => return Err(invalid(None, e)),
            Ok(Some(id)) => EventId(id),
            Ok(None) => {
                return Err(invalid(
                    None,
                    format!("event id column {:?} is NULL", r.event_id),
                ))
            }
        };
        let invalid = |reason: String| invalid(Some(id.clone()), reason);
        let route_value = column(row, &r.route_by)
            .map_err(&invalid)?
            .ok_or_else(|| invalid(format!("route column {:?} is NULL", r.route_by)))?;
        let route_value = String::from_utf8(route_value)
            .map_err(|_| invalid(format!("route column {:?} is not valid UTF-8", r.route_by)))?;
        if route_value.is_empty() {
            return Err(invalid(format!("route column {:?} is empty", r.route_by)));
        }
        let key = column(row, &r.key)
            .map_err(&invalid)?
            .ok_or_else(|| invalid(format!("key column {:?} is NULL", r.key)))?;
        // Consumers (and Debezium) treat keys as text; a binary key would not compare.
        if std::str::from_utf8(&key).is_err() {
            return Err(invalid(format!(
                "key column {:?} is not valid UTF-8",
                r.key
            )));
        }
        let payload = Payload::of(row, &r.payload).map_err(&invalid)?;
        let timestamp_ms = match &r.timestamp {
            Some(name) => {
                let i = row.index(name).ok_or_else(|| invalid(missing(row, name)))?;
                row.get(i)
                    .map(value::to_epoch_ms)
                    .transpose()
                    .map_err(&invalid)?
                    .flatten()
            }
            None => None,
        };
        let (mut headers, mut envelope, mut partition) = (Vec::new(), Vec::new(), None);
        for extra in &r.additional {
            let Some(i) = row.index(&extra.column) else {
                if r.additional_missing_is_error {
                    return Err(invalid(missing(row, &extra.column)));
                }
                continue;
            };
            let Some(v) = row.get(i) else { continue };
            match extra.placement {
                Placement::Header => {
                    if let Some(b) = value::to_bytes(v).map_err(&invalid)? {
                        headers.push((extra.alias.clone(), b));
                    }
                }
                Placement::Envelope => {
                    envelope.push((extra.alias.clone(), value::to_json(v).map_err(&invalid)?))
                }
                Placement::Partition => {
                    partition = value::to_partition(v)
                        .map_err(|e| invalid(format!("partition column {:?}: {e}", extra.column)))?
                }
            }
        }
        if let Some(column) = &r.trace_context {
            if let Some(v) = row.index(column).and_then(|i| row.get(i)) {
                if let Some(text) = value::to_bytes(v).map_err(&invalid)? {
                    match super::trace::headers(&text) {
                        Ok(h) => headers.extend(h),
                        Err(why) => bad_trace_context(&change.table, &id, column, &why),
                    }
                }
            }
        }
        let payload = payload.take(&mut change.row);
        Ok(OutboxEvent {
            table: change.table,
            position,
            id,
            route_value,
            key,
            payload,
            timestamp_ms,
            headers,
            envelope,
            partition,
        })
    }
}

/// An unreadable trace context costs the event its trace headers, not its delivery:
/// logged for the first one and every thousandth after, so a table full of them does
/// not flood the log.
fn bad_trace_context(table: &crate::position::TableName, id: &EventId, column: &str, why: &str) {
    static SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if n.is_multiple_of(1000) {
        warn!(%table, event_id = %id, column, reason = why, seen = n + 1, "trace context not propagated: the event goes out without traceparent / tracestate headers");
    }
}

/// The aggregate a row that cannot be an event names, as read: its id must be text
/// (NULL, empty or binary ids name none), its type is taken as stored.
fn aggregate_of(
    row: &RowImage,
    rules: &Rules,
    table: &Arc<crate::position::TableName>,
) -> Option<Aggregate> {
    let id = column(row, &rules.key).ok().flatten()?;
    if id.is_empty() || std::str::from_utf8(&id).is_err() {
        return None;
    }
    let aggregate_type = match column(row, &rules.route_by) {
        Ok(Some(b)) => Some(String::from_utf8_lossy(&b).into_owned()),
        Ok(None) => None,
        // An unreadable type column: no aggregate can be named with certainty.
        Err(_) => return None,
    };
    Some(Aggregate {
        table: table.clone(),
        aggregate_type,
        id,
    })
}

/// The whole row as JSON, for dead-letter records.
fn row_json(row: &RowImage, copy: RowCopy) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for (i, name) in row.names().iter().enumerate() {
        let value = match row.get(i).map(value::to_bytes) {
            Some(Ok(Some(b))) => copy.json(&b),
            Some(Err(e)) => serde_json::json!({ "undecodable": e }),
            _ => serde_json::Value::Null,
        };
        let name = if name.is_empty() {
            format!("@{}", i + 1)
        } else {
            name.clone()
        };
        out.insert(name, value);
    }
    serde_json::Value::Object(out)
}

fn missing(row: &RowImage, name: &str) -> String {
    if row.names().iter().all(String::is_empty) {
        return format!(
            "column {name:?} cannot be found: the row carries no column names (set binlog_row_metadata=FULL)"
        );
    }
    format!(
        "mapped column {name:?} is missing (table has: {})",
        row.names().join(", ")
    )
}

/// A mapped, required column's bytes (None for NULL); missing column is an error.
/// The payload column, checked where it is found and moved out of the row last: a
/// copy of a 50 MB payload is 50 MB more held at once, and a memcpy per event.
enum Payload {
    Converted(Option<Vec<u8>>),
    InRow(usize),
}

impl Payload {
    fn of(row: &RowImage, name: &str) -> Result<Self, String> {
        let i = row.index(name).ok_or_else(|| missing(row, name))?;
        match row.get(i) {
            Some(v) if value::is_bytes(v) => Ok(Self::InRow(i)),
            Some(v) => value::to_bytes(v).map(Self::Converted),
            None => Err(absent(name)),
        }
    }

    fn take(self, row: &mut Option<RowImage>) -> Option<Vec<u8>> {
        match self {
            Self::Converted(bytes) => bytes,
            Self::InRow(i) => row
                .as_mut()
                .and_then(|r| r.take(i))
                .and_then(value::into_bytes),
        }
    }
}

fn absent(name: &str) -> String {
    format!("column {name:?} is absent from the row image (binlog_row_image must be FULL)")
}

fn column(row: &RowImage, name: &str) -> Result<Option<Vec<u8>>, String> {
    let i = row.index(name).ok_or_else(|| missing(row, name))?;
    match row.get(i) {
        Some(v) => value::to_bytes(v),
        None => Err(absent(name)),
    }
}
