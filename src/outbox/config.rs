//! `[outbox]`: which tables are outboxes, their columns, and the invalid-row policy.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{ColumnMapping, OnInvalid};

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
