//! `value.format = "json"` (the default): the payload column's bytes as stored or, when
//! outbox columns are placed in an envelope (Debezium's `…:envelope`), the JSON object
//! `{"payload": …, alias: …}`, a JSON text payload expanded when `expand_json` is on.

use std::sync::Arc;

use super::encoder::{Encoded, Encoder};
use super::registry::RegistryError;
use crate::outbox::{OutboxEvent, Rules};

/// Payload values, alone or in an envelope.
#[derive(Debug)]
pub struct JsonValues {
    rules: Arc<Rules>,
    /// The payload goes out as stored and nothing reads the event after: it is taken,
    /// not copied.
    takes_payload: bool,
}

impl JsonValues {
    /// The record's value itself: the payload as stored is taken out of the event.
    pub fn outermost(rules: Arc<Rules>) -> Self {
        let takes_payload = !rules.has_envelope();
        Self {
            rules,
            takes_payload,
        }
    }

    /// Data inside another format (a CloudEvent's), which still reads the event and
    /// whose invalid rows show their payload: the payload is copied.
    pub fn inner(rules: Arc<Rules>) -> Self {
        Self {
            rules,
            takes_payload: false,
        }
    }

    /// The payload parsed as JSON, when expansion is on and it is a JSON object or array.
    fn expanded(&self, e: &OutboxEvent, payload: &[u8]) -> Option<serde_json::Value> {
        if !self.rules.expand_json {
            return None;
        }
        let first = payload.iter().find(|b| !b.is_ascii_whitespace());
        if !matches!(first, Some(b'{' | b'[')) {
            tracing::warn!(event_id = %e.id, "payload is not a JSON object or array: sent as a string");
            return None;
        }
        match serde_json::from_slice(payload) {
            Ok(v) => Some(v),
            Err(err) => {
                tracing::warn!(event_id = %e.id, error = %err, "JSON expansion failed: payload sent as a string");
                None
            }
        }
    }
}

impl Encoder for JsonValues {
    fn encode(
        &self,
        e: &mut OutboxEvent,
        _topic: &str,
        _time_ms: i64,
    ) -> Result<Encoded, RegistryError> {
        if self.takes_payload {
            return Ok(Ok(e.payload.take()));
        }
        if !self.rules.has_envelope() {
            return Ok(Ok(e.payload.clone()));
        }
        let payload = match &e.payload {
            None => serde_json::Value::Null,
            Some(p) => self
                .expanded(e, p)
                .unwrap_or_else(|| crate::bytes_json::bytes_json(p)),
        };
        let mut envelope = serde_json::Map::with_capacity(1 + e.envelope.len());
        envelope.insert("payload".into(), payload);
        envelope.extend(e.envelope.iter().cloned());
        Ok(Ok(Some(
            serde_json::Value::Object(envelope).to_string().into_bytes(),
        )))
    }

    fn moves_payload(&self) -> bool {
        self.takes_payload
    }
}
