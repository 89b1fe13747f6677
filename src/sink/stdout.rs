//! Dry-run sink: one JSON line per record on stdout, acknowledged once written.

use std::io::Write;

use base64::Engine;
use futures::FutureExt;
use serde_json::{json, Map, Value};

use super::{Delivery, SinkError};
use crate::route::Record;

/// Writes records as JSON lines.
#[derive(Default)]
pub struct StdoutSink;

/// Text as a JSON string; other bytes as `{"base64": …}`.
fn bytes_json(b: &[u8]) -> Value {
    match std::str::from_utf8(b) {
        Ok(s) => Value::String(s.to_string()),
        Err(_) => json!({ "base64": base64::engine::general_purpose::STANDARD.encode(b) }),
    }
}

impl StdoutSink {
    pub(super) fn send(&self, records: Vec<Record>) -> Result<Delivery, SinkError> {
        let n = records.len();
        let mut out = std::io::stdout().lock();
        for r in records {
            let headers: Map<String, Value> = r
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), bytes_json(v)))
                .collect();
            let line = json!({
                "topic": r.topic,
                "key": bytes_json(&r.key),
                "headers": headers,
                "timestamp": r.timestamp_ms,
                "value": r.value.as_deref().map(bytes_json),
            });
            writeln!(out, "{line}").map_err(SinkError::Stdout)?;
        }
        out.flush().map_err(SinkError::Stdout)?;
        Ok(futures::future::ready(Ok(n)).boxed())
    }
}
