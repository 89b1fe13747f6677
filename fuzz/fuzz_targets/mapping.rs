//! Arbitrary rows (column names, NULLs, binary and text values) through the outbox
//! mapping and routing: every row becomes a record or an invalid event, never a panic.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use mysql_async::binlog::row::BinlogRow;
use mysql_async::binlog::value::BinlogValue;
use mysql_async::consts::ColumnType;
use mysql_async::{Column, Value};
use outbox_router::route::RouteConfig;
use outbox_router::monitor::Metrics;
use outbox_router::outbox::{parse_placements, ColumnMapping, Mapper, Rules};
use outbox_router::route::Router;
use outbox_router::source::{RowChange, RowOp, Transaction};
use outbox_router::position::TableName;

const NAMES: [&str; 7] = ["id", "aggregatetype", "aggregateid", "type", "payload", "created_at", "other"];

fuzz_target!(|data: &[u8]| {
    // Each column: a name byte, a kind byte, a length byte, then that many value bytes.
    let mut columns = Vec::new();
    let mut values = Vec::new();
    let mut rest = data;
    while rest.len() >= 3 && columns.len() < 12 {
        let (name, kind, len) = (rest[0], rest[1], rest[2] as usize);
        rest = &rest[3..];
        let bytes = &rest[..len.min(rest.len())];
        rest = &rest[bytes.len()..];
        columns.push(Column::new(ColumnType::MYSQL_TYPE_BLOB).with_name(NAMES[name as usize % NAMES.len()].as_bytes()));
        let value = match kind % 6 {
            0 => Value::NULL,
            1 => Value::Int(i64::from_le_bytes(pad(bytes))),
            2 => Value::Date(2024, 1 + bytes.first().copied().unwrap_or(0) % 12, 1, 0, 0, 0, 0),
            3 => Value::Double(f64::from_le_bytes(pad(bytes))),
            _ => Value::Bytes(bytes.to_vec()),
        };
        values.push(Some(BinlogValue::Value(value)));
    }
    let row = BinlogRow::new(values, Arc::from(columns));
    let table = Arc::new(TableName::parse("db.outbox").unwrap());
    let txn = Transaction {
        end: "mysql-bin.000001:100".parse().unwrap(),
        commit_time_ms: 0,
        changes: vec![RowChange { table, op: RowOp::Insert, row: Some(row), event_offset: 99 }],
        complete: data.first().is_some_and(|b| b & 4 == 0),
    };
    let mut mapping = ColumnMapping::default();
    mapping.timestamp = Some("created_at".into());
    let mut rules = Rules::from_columns(&mapping, "outbox.event.${routedByValue}").unwrap();
    // Exercise every placement and the envelope / expansion / tombstone paths too.
    rules.additional.extend(parse_placements("other:envelope:o,other:partition,type:header:t").unwrap());
    rules.expand_json = data.first().is_some_and(|b| b & 1 == 1);
    rules.tombstone_on_empty = data.first().is_some_and(|b| b & 2 == 2);
    let rules = Arc::new(rules);
    let mapper = Mapper::new(rules.clone(), Metrics::default());
    let router = Router::new(rules, &RouteConfig::default(), 1_000_000);
    let Ok(mapped) = mapper.map(txn) else { return };
    let batch = router
        .route(mapped)
        .expect("routing fails only on schema registry errors; none is configured");
    assert_eq!(batch.records.len() + batch.invalid.len(), 1);
    for bad in &batch.invalid {
        let _ = router.dead_letter("dlq", bad, 0);
        let _ = bad.to_string();
    }
});

fn pad(bytes: &[u8]) -> [u8; 8] {
    let mut out = [0u8; 8];
    for (o, b) in out.iter_mut().zip(bytes) {
        *o = *b;
    }
    out
}
