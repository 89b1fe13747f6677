//! Value formats: how an event's payload becomes its record's value. Each format is one
//! `Encoder` in one file; `encoder` is the one place a configured format is chosen. The
//! route stage decides everything around the value (topic, key, headers, tombstones,
//! size, the claim check) the same way for every format.
//!
//! A new format: a variant of `ValueFormat` with its settings (`config.rs`), a file
//! here implementing `Encoder`, and its arm in `encoder` (and in `check`, when its
//! settings can be wrong without a server to ask).

mod avro;
mod cloudevents;
mod config;
mod encoder;
mod json;
mod registry;

pub use avro::{AvroError, AvroValues};
pub use cloudevents::{CloudEvents, CloudEventsValues};
pub use config::{CloudEventsData, ValueConfig, ValueFormat};
pub use encoder::Encoder;
pub use json::JsonValues;
pub use registry::RegistryError;

#[cfg(test)]
pub use config::{CloudEventsConfig, CloudEventsMode};

use std::sync::Arc;

use crate::outbox::Rules;

/// Why the configured format cannot start.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{0}")]
    CloudEvents(String),
    #[error("Avro values (value.format = \"avro\", or CloudEvents with data_format = \"avro\") encode the payload alone; they cannot be combined with envelope placements (table.fields.additional.placement …:envelope)")]
    AvroWithEnvelope,
    #[error(transparent)]
    Avro(#[from] AvroError),
}

/// The encoder `value` configures, its schemas loaded and, with a registry and
/// record-name subjects, registered.
pub async fn encoder(
    value: &ValueConfig,
    rules: &Arc<Rules>,
) -> Result<Arc<dyn Encoder>, FormatError> {
    Ok(match value.format {
        ValueFormat::Json => Arc::new(JsonValues::outermost(rules.clone())),
        ValueFormat::Avro => Arc::new(avro_values(value, rules).await?),
        ValueFormat::CloudEvents => {
            let cloudevents =
                CloudEvents::new(&value.cloudevents).map_err(FormatError::CloudEvents)?;
            let data: Box<dyn Encoder> = match value.cloudevents.data_format {
                CloudEventsData::Payload => Box::new(JsonValues::inner(rules.clone())),
                CloudEventsData::Avro => Box::new(avro_values(value, rules).await?),
            };
            Arc::new(CloudEventsValues::new(cloudevents, data))
        }
    })
}

/// What is wrong with `value`'s settings that can be told without a file or a server.
pub fn check(value: &ValueConfig) -> Result<(), String> {
    if let Some(registry) = &value.registry {
        registry.check()?;
    }
    if value.format == ValueFormat::CloudEvents {
        CloudEvents::new(&value.cloudevents)?;
    }
    Ok(())
}

async fn avro_values(value: &ValueConfig, rules: &Rules) -> Result<AvroValues, FormatError> {
    if rules.has_envelope() {
        return Err(FormatError::AvroWithEnvelope);
    }
    Ok(AvroValues::load(value).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::OutboxEvent;

    fn rules(options: &[(&str, &str)]) -> Arc<Rules> {
        let options = options
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Arc::new(Rules::from_debezium(&options).unwrap())
    }

    fn value(format: ValueFormat) -> ValueConfig {
        ValueConfig {
            format,
            schemas: "/nonexistent/schemas".into(),
            ..ValueConfig::default()
        }
    }

    /// Avro encodes the payload alone: with an envelope it is refused as a setting
    /// before any schema is read, as a value format and as a CloudEvent's data.
    #[tokio::test]
    async fn avro_with_an_envelope_is_refused_before_any_schema_is_read() {
        let envelope = rules(&[("table.fields.additional.placement", "type:envelope")]);
        let mut ce_avro = value(ValueFormat::CloudEvents);
        ce_avro.cloudevents.data_format = CloudEventsData::Avro;
        for cfg in [value(ValueFormat::Avro), ce_avro] {
            let err = encoder(&cfg, &envelope).await.unwrap_err();
            assert!(matches!(err, FormatError::AvroWithEnvelope), "{err}");
        }
        // Without the envelope the same settings go on to read the schemas.
        let err = encoder(&value(ValueFormat::Avro), &rules(&[]))
            .await
            .unwrap_err();
        assert!(
            matches!(err, FormatError::Avro(AvroError::ReadDir { .. })),
            "{err}"
        );
    }

    /// The configured format is the one that encodes: JSON takes the payload as stored
    /// (no copy), a CloudEvent wraps a copy of it and adds its headers to the event.
    #[tokio::test]
    async fn each_format_is_registered_once() {
        let plain = rules(&[]);
        let json = encoder(&value(ValueFormat::Json), &plain).await.unwrap();
        let mut e = OutboxEvent::sample("o-1", Some(b"{\"a\":1}"), &[("type", "Created")]);
        assert!(json.moves_payload());
        let v = json.encode(&mut e, "t", 0).unwrap().unwrap();
        assert_eq!(v.as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(e.payload, None, "taken, not copied");

        let ce = encoder(&value(ValueFormat::CloudEvents), &plain)
            .await
            .unwrap();
        let mut e = OutboxEvent::sample("o-1", Some(b"{\"a\":1}"), &[("type", "Created")]);
        assert!(!ce.moves_payload());
        let v = ce.encode(&mut e, "t", 0).unwrap().unwrap().unwrap();
        let event: serde_json::Value = serde_json::from_slice(&v).unwrap();
        assert_eq!(event["type"], "Created");
        assert_eq!(event["data"], serde_json::json!({"a": 1}));
        assert!(
            e.payload.is_some(),
            "an invalid CloudEvent's report shows it"
        );
        assert!(e.headers.iter().any(|(k, _)| k == "content-type"));
        // An event without a type cannot be a CloudEvent: an invalid row, not an error.
        let mut untyped = OutboxEvent::sample("o-1", Some(b"{}"), &[]);
        assert!(ce.encode(&mut untyped, "t", 0).unwrap().is_err());
    }
}
