//! Dry-run sink: one JSON line per record on stdout, acknowledged once written.

use std::io::Write;

use futures::FutureExt;
use serde_json::{json, Map, Value};

use crate::bytes_json::bytes_json;

use futures::future::BoxFuture;

use super::{Delivery, Sink, SinkError};
use crate::route::Record;

/// Writes records as JSON lines.
#[derive(Default)]
pub struct StdoutSink;

impl Sink for StdoutSink {
    fn send(&self, records: Vec<Record>) -> BoxFuture<'_, Result<Delivery, SinkError>> {
        futures::future::ready(self.write(records)).boxed()
    }
}

impl StdoutSink {
    fn write(&self, records: Vec<Record>) -> Result<Delivery, SinkError> {
        let n = records.len();
        let mut out = std::io::stdout().lock();
        for r in records {
            let headers: Map<String, Value> = r
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), bytes_json(v)))
                .collect();
            let line = json!({
                "topic": &*r.topic,
                "key": bytes_json(&r.key),
                "headers": headers,
                "timestamp": r.timestamp_ms,
                "partition": r.partition,
                "value": r.value.as_deref().map(bytes_json),
            });
            writeln!(out, "{line}").map_err(SinkError::Stdout)?;
        }
        out.flush().map_err(SinkError::Stdout)?;
        Ok(futures::future::ready(Ok(n)).boxed())
    }
}
