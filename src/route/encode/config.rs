//! `[value]`: which format a record's value is encoded in, and each format's settings.

use std::path::PathBuf;

use serde::Deserialize;

use crate::secret::Secret;

/// Record value encoding.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValueConfig {
    /// `json`: the payload column's bytes as stored; `avro`: the JSON payload validated
    /// and encoded against a schema from `schemas`; `cloudevents`: a CloudEvent per
    /// the Kafka protocol binding (see `cloudevents`).
    #[serde(default)]
    pub format: ValueFormat,
    /// CloudEvents settings (`format = "cloudevents"` only).
    #[serde(default)]
    pub cloudevents: CloudEventsConfig,
    /// Directory of `.avsc` files (Avro only).
    #[serde(default = "default_schemas_dir")]
    pub schemas: PathBuf,
    /// Header whose value names an event's schema (the event type, header `type` by
    /// default); when absent or unknown, the aggregate type (route value) names it.
    #[serde(default = "default_schema_by")]
    pub schema_by: String,
    /// Confluent-compatible schema registry: values get the Confluent wire format
    /// (magic byte 0 + schema id). Without it, Avro single-object encoding.
    #[serde(default)]
    pub registry: Option<RegistryConfig>,
}

impl Default for ValueConfig {
    fn default() -> Self {
        Self {
            format: ValueFormat::default(),
            schemas: default_schemas_dir(),
            schema_by: default_schema_by(),
            registry: None,
            cloudevents: CloudEventsConfig::default(),
        }
    }
}

/// The record value format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValueFormat {
    /// The payload bytes unchanged (JSON in a typical outbox).
    #[default]
    Json,
    /// Avro, validated against a schema.
    Avro,
    /// A CloudEvent (Kafka protocol binding 1.0) carrying the payload as its data.
    #[serde(rename = "cloudevents")]
    CloudEvents,
}

/// `[value.cloudevents]`: how an outbox event becomes a CloudEvent.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloudEventsConfig {
    /// `structured`: the value is the JSON event format (`application/cloudevents+json`);
    /// `binary`: the value is the payload as stored, the attributes `ce_*` headers.
    #[serde(default)]
    pub mode: CloudEventsMode,
    /// The `source` attribute, a URI-reference; `${database}`, `${table}` and
    /// `${aggregate_type}` are replaced per event.
    #[serde(default = "default_ce_source")]
    pub source: String,
    /// The record header (as the outbox columns place it) whose value is the `type`
    /// attribute: `type` is where the event type column goes by default.
    #[serde(default = "default_ce_type_header")]
    pub type_header: String,
    /// The `datacontenttype` attribute: what the payload column holds; unset,
    /// `application/json` (`application/avro` for Avro data).
    #[serde(default)]
    pub data_content_type: Option<String>,
    /// `payload`: the data is the payload as stored; `avro`: the JSON payload encoded
    /// against its schema as `value.format = "avro"` does (`value.schemas`,
    /// `value.schema_by`, `[value.registry]`), `datacontenttype` `application/avro` and,
    /// with a registry, `dataschema` the schema's URL there.
    #[serde(default)]
    pub data_format: CloudEventsData,
}

impl Default for CloudEventsConfig {
    fn default() -> Self {
        Self {
            mode: CloudEventsMode::default(),
            source: default_ce_source(),
            type_header: default_ce_type_header(),
            data_content_type: None,
            data_format: CloudEventsData::default(),
        }
    }
}

/// The CloudEvents Kafka binding's two content modes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CloudEventsMode {
    /// The whole event in the value, as JSON.
    #[default]
    Structured,
    /// The data in the value, the attributes in `ce_` headers.
    Binary,
}

/// What a CloudEvent's data is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CloudEventsData {
    /// The payload column's bytes as stored.
    #[default]
    Payload,
    /// The payload encoded as Avro against its schema.
    Avro,
}

/// The `datacontenttype` of Avro data.
pub const AVRO_CONTENT_TYPE: &str = "application/avro";

fn default_ce_source() -> String {
    "/outbox/${database}/${table}".into()
}

fn default_ce_type_header() -> String {
    "type".into()
}

/// A Confluent-compatible schema registry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// Base URL, e.g. `http://127.0.0.1:8081` (Apicurio: `…/apis/ccompat/v7`).
    pub url: String,
    /// Subject naming: `record` (the schema's full name, registered at start) or
    /// `topic` (`<topic>-value`, Confluent's default, registered on first use).
    #[serde(default)]
    pub subject: SubjectStrategy,
    /// PEM file of the CA(s) that signed an `https://` registry's certificate, trusted
    /// besides the built-in public roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// PEM certificate (chain) and private key presented to a registry that asks for a
    /// client certificate (mutual TLS); both or neither.
    #[serde(default)]
    pub client_cert_file: Option<PathBuf>,
    #[serde(default)]
    pub client_key_file: Option<PathBuf>,
    /// HTTP basic authentication (Confluent Cloud: the API key and secret); the
    /// password as `${env:…}` or `${file:…}`.
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<Secret>,
    /// A bearer token (OAuth) sent as `Authorization: Bearer …`, as `${env:…}` or
    /// `${file:…}`; the file is read at start.
    #[serde(default)]
    pub bearer_token: Option<Secret>,
}

impl RegistryConfig {
    /// What is wrong with these settings, if anything.
    pub fn check(&self) -> Result<(), String> {
        if self.client_cert_file.is_some() != self.client_key_file.is_some() {
            return Err("value.registry: client_cert_file and client_key_file go together".into());
        }
        if self.password.is_some() && self.username.is_none() {
            return Err("value.registry: password without username".into());
        }
        if self.bearer_token.is_some() && (self.username.is_some() || self.url_has_credentials()) {
            return Err("value.registry: bearer_token and basic authentication (username, or credentials in the URL) exclude each other".into());
        }
        Ok(())
    }

    fn url_has_credentials(&self) -> bool {
        reqwest::Url::parse(&self.url).is_ok_and(|u| !u.username().is_empty())
    }
}

/// How registry subjects are named.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SubjectStrategy {
    /// `<topic>-value` (Confluent's TopicNameStrategy).
    #[default]
    Topic,
    /// The schema's full name (RecordNameStrategy).
    Record,
}

fn default_schemas_dir() -> PathBuf {
    PathBuf::from("schemas")
}

fn default_schema_by() -> String {
    "type".into()
}
