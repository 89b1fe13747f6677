//! `[outbox]`: which tables are outboxes, which column means what, and the invalid-row
//! policy.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::OnInvalid;

/// Outbox tables and their column mapping.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxConfig {
    /// Outbox tables as `database.table`.
    pub tables: Vec<String>,
    /// Column names; defaults are Debezium's Outbox Event Router names.
    #[serde(default)]
    pub columns: ColumnMapping,
    /// Rows that cannot become records: `fail` (stop), `dead-letter` or `skip`.
    #[serde(default)]
    pub on_invalid: OnInvalid,
    /// Topic for dead-lettered rows.
    #[serde(default = "default_dead_letter_topic")]
    pub dead_letter_topic: String,
    /// `on_invalid = "park"`: where parked events go and how many may wait there.
    #[serde(default)]
    pub parking: ParkingConfig,
    /// Debezium Outbox Event Router options by their Debezium names (e.g.
    /// `"table.fields.additional.placement"`); when present they replace `columns` and
    /// `route.topic`, with Debezium's defaults.
    pub event_router: Option<BTreeMap<String, String>>,
}

impl OutboxConfig {
    /// The outbox table names / patterns, compiled.
    pub fn table_patterns(&self) -> Vec<crate::pattern::Pattern> {
        self.tables
            .iter()
            .map(|t| crate::pattern::Pattern::new(t))
            .collect()
    }
}

fn default_dead_letter_topic() -> String {
    "outbox.dead-letter".into()
}

/// `[outbox.parking]`: ordered parking's topic and bounds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParkingConfig {
    /// The parking topic: one partition, records kept forever (checked at start). It
    /// is the fleet's record of what is parked, so each source needs its own.
    #[serde(default = "default_parking_topic")]
    pub topic: String,
    /// Aggregates parked at once past which the router stops: a deploy that breaks
    /// every row must not quietly turn the parking topic into a second outbox.
    #[serde(default = "default_max_aggregates")]
    pub max_aggregates: u64,
    /// Events parked at once past which the router stops.
    #[serde(default = "default_max_events")]
    pub max_events: u64,
}

impl Default for ParkingConfig {
    fn default() -> Self {
        Self {
            topic: default_parking_topic(),
            max_aggregates: default_max_aggregates(),
            max_events: default_max_events(),
        }
    }
}

fn default_parking_topic() -> String {
    "outbox.parked".into()
}
fn default_max_aggregates() -> u64 {
    1_000
}
fn default_max_events() -> u64 {
    100_000
}

/// Debezium's default name of the trace-context column (`tracing.span.context.field`).
pub const DEFAULT_TRACE_CONTEXT: &str = "tracingspancontext";

/// Outbox column names. Defaults are those of Debezium's Outbox Event Router.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnMapping {
    /// Unique event id, sent as the event-id header.
    #[serde(default = "d_id")]
    pub event_id: String,
    /// Column whose value picks the topic (Debezium's `route.by.field`).
    #[serde(default = "d_aggregate_type")]
    pub aggregate_type: String,
    /// Aggregate id: the record key.
    #[serde(default = "d_aggregate_id")]
    pub aggregate_id: String,
    /// Event type, sent as header `type` when the table has this column.
    #[serde(default = "d_event_type")]
    pub event_type: String,
    /// The record value.
    #[serde(default = "d_payload")]
    pub payload: String,
    /// Optional DATETIME/TIMESTAMP column used as record timestamp (else commit time).
    #[serde(default)]
    pub timestamp: Option<String>,
    /// Column holding a W3C trace context (`traceparent` text, or Debezium's properties
    /// text), propagated as `traceparent` / `tracestate` headers when the table has it.
    #[serde(default = "d_trace_context")]
    pub trace_context: Option<String>,
}

fn d_id() -> String {
    "id".into()
}
fn d_aggregate_type() -> String {
    "aggregatetype".into()
}
fn d_aggregate_id() -> String {
    "aggregateid".into()
}
fn d_event_type() -> String {
    "type".into()
}
fn d_payload() -> String {
    "payload".into()
}
fn d_trace_context() -> Option<String> {
    Some(DEFAULT_TRACE_CONTEXT.into())
}

impl Default for ColumnMapping {
    fn default() -> Self {
        Self {
            event_id: d_id(),
            aggregate_type: d_aggregate_type(),
            aggregate_id: d_aggregate_id(),
            event_type: d_event_type(),
            payload: d_payload(),
            timestamp: None,
            trace_context: d_trace_context(),
        }
    }
}
