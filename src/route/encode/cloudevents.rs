//! CloudEvents output, per the CloudEvents Kafka protocol binding 1.0: in structured
//! mode the value is the JSON event format, in binary mode the value stays the payload
//! and the attributes travel as `ce_*` headers. The record keeps its topic, key
//! (the binding's `partitionkey`), partition and the event id header either way.

use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Map, Value};

use super::config::{CloudEventsConfig, CloudEventsData, CloudEventsMode, AVRO_CONTENT_TYPE};
use super::encoder::{Encoded, Encoder};
use super::registry::RegistryError;
use crate::outbox::OutboxEvent;

/// The content type of a structured-mode record.
const STRUCTURED_CONTENT_TYPE: &str = "application/cloudevents+json; charset=UTF-8";

/// Turns an event's value into a CloudEvent.
#[derive(Debug, Clone)]
pub struct CloudEvents {
    mode: CloudEventsMode,
    source: String,
    type_header: String,
    content_type: String,
    /// The data is JSON (`application/json`, `…+json`): a JSON payload goes in `data`
    /// as JSON, not as a string.
    json_data: bool,
}

/// A value wrapped as a CloudEvent: the record's new value and the headers it gains.
pub struct Wrapped {
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl CloudEvents {
    /// The settings, checked: every attribute the spec requires can be filled.
    pub fn new(cfg: &CloudEventsConfig) -> Result<Self, String> {
        let content_type = match (cfg.data_format, &cfg.data_content_type) {
            (CloudEventsData::Payload, None) => "application/json",
            (CloudEventsData::Avro, None) => AVRO_CONTENT_TYPE,
            (CloudEventsData::Avro, Some(t)) if essence(t) != AVRO_CONTENT_TYPE => {
                return Err(format!(
                    "value.cloudevents.data_content_type is {t:?}, but data_format = \"avro\" makes the data {AVRO_CONTENT_TYPE}: remove the key"
                ))
            }
            (_, Some(t)) => t.as_str(),
        };
        for (key, value) in [
            ("source", cfg.source.as_str()),
            ("type_header", &cfg.type_header),
            ("data_content_type", content_type),
        ] {
            if value.trim().is_empty() {
                return Err(format!(
                    "value.cloudevents.{key} is empty; CloudEvents requires it"
                ));
            }
        }
        let essence = essence(content_type);
        Ok(Self {
            mode: cfg.mode,
            source: cfg.source.clone(),
            type_header: cfg.type_header.clone(),
            content_type: content_type.to_string(),
            json_data: essence == "application/json" || essence.ends_with("+json"),
        })
    }

    /// `value` (the payload, its Avro encoding, or the envelope when columns are placed
    /// in one) as the data of a CloudEvent about `e`, at `time_ms`, its schema at
    /// `dataschema` when one is known. An event without a type cannot be a CloudEvent:
    /// that is an invalid row, named with the header it lacks.
    pub fn wrap(
        &self,
        e: &OutboxEvent,
        value: Option<Vec<u8>>,
        time_ms: i64,
        dataschema: Option<String>,
    ) -> Result<Wrapped, String> {
        let kind = e
            .headers
            .iter()
            .find(|(name, _)| *name == self.type_header)
            .ok_or_else(|| {
                format!(
                    "a CloudEvent needs a type, and this event has no {:?} header (its event type column is NULL or not placed there; see value.cloudevents.type_header)",
                    self.type_header
                )
            })?;
        let kind = std::str::from_utf8(&kind.1)
            .map_err(|_| format!("the event type header {:?} is not UTF-8", self.type_header))?;
        if kind.is_empty() {
            return Err(format!(
                "a CloudEvent needs a type, and the event type header {:?} is empty",
                self.type_header
            ));
        }
        // The key was checked to be UTF-8 when the row was mapped.
        let subject = String::from_utf8_lossy(&e.key);
        let mut attributes = vec![
            ("specversion", "1.0".to_string()),
            ("id", e.id.to_string()),
            ("source", self.source(e)),
            ("type", kind.to_string()),
            ("subject", subject.into_owned()),
        ];
        if let Some(time) = rfc3339(time_ms) {
            attributes.push(("time", time));
        }
        if let Some(uri) = dataschema {
            attributes.push(("dataschema", uri));
        }
        Ok(match self.mode {
            CloudEventsMode::Binary => {
                let mut headers: Vec<(String, Vec<u8>)> = attributes
                    .into_iter()
                    .map(|(k, v)| (format!("ce_{k}"), v.into_bytes()))
                    .collect();
                headers.push((
                    "content-type".into(),
                    self.content_type.clone().into_bytes(),
                ));
                Wrapped { value, headers }
            }
            CloudEventsMode::Structured => {
                let mut event: Map<String, Value> = attributes
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), Value::String(v)))
                    .collect();
                event.insert(
                    "datacontenttype".into(),
                    Value::String(self.content_type.clone()),
                );
                event.insert(
                    "partitionkey".into(),
                    Value::String(String::from_utf8_lossy(&e.key).into_owned()),
                );
                if let Some(bytes) = value {
                    let (member, data) = self.data(bytes);
                    event.insert(member.into(), data);
                }
                Wrapped {
                    value: Some(Value::Object(event).to_string().into_bytes()),
                    headers: vec![("content-type".into(), STRUCTURED_CONTENT_TYPE.into())],
                }
            }
        })
    }

    /// The `source` attribute for this event.
    fn source(&self, e: &OutboxEvent) -> String {
        if !self.source.contains("${") {
            return self.source.clone();
        }
        self.source
            .replace("${database}", &e.table.database)
            .replace("${table}", &e.table.table)
            .replace("${aggregate_type}", &e.route_value)
    }

    /// The structured event's data member: JSON data as JSON, text as a string, and
    /// anything else (or JSON that does not parse) as `data_base64`, byte for byte.
    fn data(&self, bytes: Vec<u8>) -> (&'static str, Value) {
        if self.json_data {
            if let Ok(json) = serde_json::from_slice::<Value>(&bytes) {
                return ("data", json);
            }
        } else if self.content_type.starts_with("text/") {
            if let Ok(text) = String::from_utf8(bytes.clone()) {
                return ("data", Value::String(text));
            }
        }
        use base64::Engine as _;
        let encoded = base64::engine::general_purpose::STANDARD.encode(&bytes);
        ("data_base64", Value::String(encoded))
    }
}

/// `value.format = "cloudevents"`: the data format's value (the payload as stored, or
/// its Avro encoding) wrapped as a CloudEvent, whose headers join the event's.
#[derive(Debug)]
pub struct CloudEventsValues {
    cloudevents: CloudEvents,
    data: Box<dyn Encoder>,
}

impl CloudEventsValues {
    /// CloudEvents around the values `data` makes.
    pub fn new(cloudevents: CloudEvents, data: Box<dyn Encoder>) -> Self {
        Self { cloudevents, data }
    }
}

impl Encoder for CloudEventsValues {
    fn encode(
        &self,
        e: &mut OutboxEvent,
        topic: &str,
        time_ms: i64,
    ) -> Result<Encoded, RegistryError> {
        let data = match self.data.encode(e, topic, time_ms)? {
            Ok(data) => data,
            Err(reason) => return Ok(Err(reason)),
        };
        // Only a CloudEvent carries the schema's URL: the data format names it here,
        // never a string per record for plain values.
        let dataschema = data.as_deref().and_then(|d| self.data.schema_uri(d));
        Ok(self
            .cloudevents
            .wrap(e, data, time_ms, dataschema)
            .map(|wrapped| {
                e.headers.extend(wrapped.headers);
                wrapped.value
            }))
    }
}

/// A media type without its parameters, lower case.
fn essence(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// RFC 3339 with milliseconds, UTC; none before 1970 (the attribute is optional).
fn rfc3339(ms: i64) -> Option<String> {
    let ms = u64::try_from(ms).ok()?;
    let at = UNIX_EPOCH + Duration::from_millis(ms);
    Some(humantime::format_rfc3339_millis(at).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(headers: Vec<(&str, &str)>) -> OutboxEvent {
        OutboxEvent::sample("order-7", None, &headers)
    }

    fn config(mode: CloudEventsMode, content_type: &str) -> CloudEvents {
        CloudEvents::new(&CloudEventsConfig {
            mode,
            data_content_type: Some(content_type.into()),
            ..CloudEventsConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn structured_carries_every_attribute_and_json_data_as_json() {
        let ce = config(CloudEventsMode::Structured, "application/json");
        let w = ce
            .wrap(
                &event(vec![("type", "OrderCreated")]),
                Some(br#"{"n":1}"#.to_vec()),
                1_700_000_000_123,
                None,
            )
            .unwrap();
        let v: Value = serde_json::from_slice(&w.value.unwrap()).unwrap();
        assert_eq!(v["specversion"], "1.0");
        assert_eq!(v["id"], "e-1");
        assert_eq!(v["source"], "/outbox/shop/outbox");
        assert_eq!(v["type"], "OrderCreated");
        assert_eq!(v["subject"], "order-7");
        assert_eq!(v["partitionkey"], "order-7");
        assert_eq!(v["time"], "2023-11-14T22:13:20.123Z");
        assert_eq!(v["data"], serde_json::json!({"n": 1}));
        assert_eq!(w.headers[0].0, "content-type");
    }

    #[test]
    fn bytes_that_are_not_json_keep_every_byte_in_data_base64() {
        let ce = config(CloudEventsMode::Structured, "application/json");
        let w = ce
            .wrap(
                &event(vec![("type", "T")]),
                Some(vec![0xff, 0x00, b'{']),
                0,
                None,
            )
            .unwrap();
        let v: Value = serde_json::from_slice(&w.value.unwrap()).unwrap();
        assert_eq!(v["data_base64"], "/wB7");
        assert!(v.get("data").is_none());
    }

    #[test]
    fn binary_keeps_the_value_and_puts_attributes_in_ce_headers() {
        let ce = config(CloudEventsMode::Binary, "application/json");
        let w = ce
            .wrap(&event(vec![("type", "T")]), Some(b"{}".to_vec()), 0, None)
            .unwrap();
        assert_eq!(w.value.as_deref(), Some(&b"{}"[..]));
        let names: Vec<_> = w.headers.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "ce_specversion",
                "ce_id",
                "ce_source",
                "ce_type",
                "ce_subject",
                "ce_time",
                "content-type"
            ]
        );
    }

    #[test]
    fn an_event_without_a_type_is_refused_naming_the_header() {
        let ce = config(CloudEventsMode::Binary, "application/json");
        let err = ce.wrap(&event(vec![]), None, 0, None).err().unwrap();
        assert!(err.contains("\"type\" header"), "{err}");
    }

    /// Avro data: `application/avro`, the bytes in `data_base64` (structured) or the
    /// value (binary), the schema's URL as `dataschema`; a JSON content type with Avro
    /// data is refused.
    #[test]
    fn avro_data_carries_its_schema_reference() {
        let avro = |mode, content_type: Option<&str>| {
            CloudEvents::new(&CloudEventsConfig {
                mode,
                data_format: CloudEventsData::Avro,
                data_content_type: content_type.map(Into::into),
                ..CloudEventsConfig::default()
            })
        };
        let uri = "http://registry:8081/schemas/ids/7".to_string();
        let framed = vec![0, 0, 0, 0, 7, 2, b'a'];
        let wrapped = |mode| {
            let ce = avro(mode, None).unwrap();
            let e = event(vec![("type", "T")]);
            ce.wrap(&e, Some(framed.clone()), 0, Some(uri.clone()))
                .unwrap()
        };
        let w = wrapped(CloudEventsMode::Structured);
        let v: Value = serde_json::from_slice(&w.value.unwrap()).unwrap();
        assert_eq!(v["datacontenttype"], "application/avro");
        assert_eq!(v["dataschema"], uri.as_str());
        assert_eq!(v["data_base64"], "AAAAAAcCYQ==");
        let w = wrapped(CloudEventsMode::Binary);
        assert_eq!(w.value, Some(framed.clone()));
        assert!(w
            .headers
            .iter()
            .any(|(k, v)| k == "ce_dataschema" && v == uri.as_bytes()));
        assert!(w
            .headers
            .iter()
            .any(|(k, v)| k == "content-type" && v == b"application/avro"));
        let err = avro(CloudEventsMode::Binary, Some("application/json")).unwrap_err();
        assert!(err.contains("data_format = \"avro\""), "{err}");
    }
}
