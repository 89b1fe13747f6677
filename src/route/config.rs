//! `[route]` and `[value]`: topic template, id header, and how values are encoded.

use std::path::PathBuf;

use serde::Deserialize;

/// Record value encoding.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValueConfig {
    /// `json`: the payload column's bytes as stored; `avro`: the JSON payload validated
    /// and encoded against a schema from `schemas`.
    #[serde(default)]
    pub format: ValueFormat,
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

/// How an event becomes a Kafka record.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Topic template; `${routedByValue}` is replaced by the route column's value.
    #[serde(default = "default_topic")]
    pub topic: String,
    /// Header that carries the event id.
    #[serde(default = "default_event_id_header")]
    pub event_id_header: String,
    /// Prefix of every topic under `run --shadow` (dead letters too), so a router can
    /// publish beside a polling relay without touching the live topics.
    #[serde(default = "default_shadow_prefix")]
    pub shadow_prefix: String,
    /// Set by `run --shadow` (and `reconcile --against-shadow`), never in the file.
    #[serde(skip)]
    pub shadow: bool,
}

impl Default for RouteConfig {
    fn default() -> Self {
        Self {
            topic: default_topic(),
            event_id_header: default_event_id_header(),
            shadow_prefix: default_shadow_prefix(),
            shadow: false,
        }
    }
}

fn default_shadow_prefix() -> String {
    "shadow.".into()
}

fn default_topic() -> String {
    "outbox.event.${routedByValue}".into()
}

fn default_event_id_header() -> String {
    "id".into()
}
