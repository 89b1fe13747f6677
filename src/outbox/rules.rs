//! How rows become events: the resolved form of either the native `[outbox.columns]` /
//! `[route]` settings or Debezium's Outbox Event Router options (`[outbox.event_router]`,
//! same names, defaults and behaviour), so Debezium users switch without touching their
//! table or consumers.

use std::collections::BTreeMap;

use regex::Regex;

use super::config::{ColumnMapping, DEFAULT_TRACE_CONTEXT};

/// Where an additional column goes (`table.fields.additional.placement`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// A record header.
    Header,
    /// A field of the JSON envelope `{"payload": …, alias: …}`.
    Envelope,
    /// The record's partition (an integer column).
    Partition,
}

/// One additional column and where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Additional {
    /// Column name.
    pub column: String,
    /// Destination.
    pub placement: Placement,
    /// Header or envelope field name (the column name unless aliased).
    pub alias: String,
}

/// What an UPDATE on an outbox table does (`table.op.invalid.behavior`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnUpdate {
    /// Log a warning, skip.
    Warn,
    /// Log an error, skip.
    Error,
    /// Stop the router.
    Fatal,
}

/// The resolved event rules.
#[derive(Debug, Clone)]
pub struct Rules {
    /// Event id column (header `id`, or the configured header name).
    pub event_id: String,
    /// Record key column.
    pub key: String,
    /// Record value column.
    pub payload: String,
    /// Column whose value picks the topic.
    pub route_by: String,
    /// Record timestamp column, else the commit time.
    pub timestamp: Option<String>,
    /// Integer column naming the value's schema version (accepted for compatibility).
    pub schema_version: Option<String>,
    /// Additional columns.
    pub additional: Vec<Additional>,
    /// A missing additional column is an invalid row (else it is left out).
    pub additional_missing_is_error: bool,
    /// Parse a JSON text payload into JSON inside an envelope.
    pub expand_json: bool,
    /// NULL or blank payload → tombstone (null value).
    pub tombstone_on_empty: bool,
    /// UPDATE rows on the outbox.
    pub on_update: OnUpdate,
    /// Applied to the route value; must match all of it for the replacement to apply.
    pub topic_regex: Regex,
    /// Topic template with `${routedByValue}` (or any named / numbered group).
    pub topic_replacement: String,
    /// Column holding a W3C trace context, propagated as `traceparent` / `tracestate`
    /// headers when the table has it.
    pub trace_context: Option<String>,
}

/// The regex Debezium applies by default.
const DEFAULT_REGEX: &str = "(?<routedByValue>.*)";

fn full_match(regex: &str) -> Result<Regex, String> {
    Regex::new(&format!("^(?:{regex})$")).map_err(|e| format!("route.topic.regex {regex:?}: {e}"))
}

impl Rules {
    /// Rules from the native settings: the event type column becomes header `type` when
    /// the table has it.
    pub fn from_columns(c: &ColumnMapping, topic: &str) -> Result<Self, String> {
        Ok(Self {
            event_id: c.event_id.clone(),
            key: c.aggregate_id.clone(),
            payload: c.payload.clone(),
            route_by: c.aggregate_type.clone(),
            timestamp: c.timestamp.clone(),
            schema_version: None,
            additional: vec![Additional {
                column: c.event_type.clone(),
                placement: Placement::Header,
                alias: "type".into(),
            }],
            additional_missing_is_error: false,
            expand_json: false,
            tombstone_on_empty: false,
            on_update: OnUpdate::Warn,
            topic_regex: full_match(DEFAULT_REGEX)?,
            topic_replacement: topic.to_string(),
            trace_context: c.trace_context.clone(),
        })
    }

    /// Rules from Debezium Outbox Event Router options, with Debezium's defaults.
    pub fn from_debezium(options: &BTreeMap<String, String>) -> Result<Self, String> {
        for key in options.keys() {
            if !KNOWN.contains(&key.as_str()) {
                return Err(format!(
                    "unknown Outbox Event Router option {key:?}; known: {}",
                    KNOWN.join(", ")
                ));
            }
        }
        let get = |k: &str, default: &str| {
            options
                .get(k)
                .map(|v| v.trim().to_string())
                .unwrap_or(default.into())
        };
        let opt = |k: &str| {
            options
                .get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let boolean = |k: &str| -> Result<bool, String> {
            match get(k, "false").to_ascii_lowercase().as_str() {
                "true" => Ok(true),
                "false" => Ok(false),
                other => Err(format!("{k} must be true or false, not {other:?}")),
            }
        };
        let on_update = match get("table.op.invalid.behavior", "warn").as_str() {
            "warn" => OnUpdate::Warn,
            "error" => OnUpdate::Error,
            "fatal" => OnUpdate::Fatal,
            other => {
                return Err(format!(
                    "table.op.invalid.behavior must be warn, error or fatal, not {other:?}"
                ))
            }
        };
        // 3.6 name first, then the older boolean.
        let additional_missing_is_error = match opt("table.field.additional.missing") {
            Some(v) if v == "error" => true,
            Some(v) if v == "ignore" => false,
            Some(v) => {
                return Err(format!(
                    "table.field.additional.missing must be error or ignore, not {v:?}"
                ))
            }
            None => opt("table.fields.additional.error.on.missing").is_none_or(|v| v == "true"),
        };
        match get("table.json.payload.null.behavior", "ignore").as_str() {
            "ignore" | "optional_bytes" => {}
            other => {
                return Err(format!(
                "table.json.payload.null.behavior must be ignore or optional_bytes, not {other:?}"
            ))
            }
        }
        Ok(Self {
            event_id: get("table.field.event.id", "id"),
            key: get("table.field.event.key", "aggregateid"),
            payload: get("table.field.event.payload", "payload"),
            route_by: get("route.by.field", "aggregatetype"),
            timestamp: opt("table.field.event.timestamp"),
            schema_version: opt("table.field.event.schema.version"),
            additional: parse_placements(&get("table.fields.additional.placement", ""))?,
            additional_missing_is_error,
            expand_json: boolean("table.expand.json.payload")?,
            tombstone_on_empty: boolean("route.tombstone.on.empty.payload")?,
            on_update,
            topic_regex: full_match(&get("route.topic.regex", DEFAULT_REGEX))?,
            topic_replacement: get("route.topic.replacement", "outbox.event.${routedByValue}"),
            trace_context: Some(get("tracing.span.context.field", DEFAULT_TRACE_CONTEXT))
                .filter(|c| !c.is_empty()),
        })
    }

    /// The topic for a route value: the replacement when the regex matches all of it,
    /// else the value itself (Kafka Connect's RegexRouter).
    pub fn topic(&self, route_value: &str) -> String {
        if self.topic_regex.is_match(route_value) {
            self.topic_regex
                .replace(route_value, self.topic_replacement.as_str())
                .into_owned()
        } else {
            route_value.to_string()
        }
    }

    /// True when some column goes into a JSON envelope.
    pub fn has_envelope(&self) -> bool {
        self.additional
            .iter()
            .any(|a| a.placement == Placement::Envelope)
    }
}

/// Options accepted in `[outbox.event_router]` (Debezium 3.6 names).
const KNOWN: &[&str] = &[
    "table.field.event.id",
    "table.field.event.key",
    "table.field.event.payload",
    "table.field.event.timestamp",
    "table.field.event.schema.version",
    "table.fields.additional.placement",
    "table.field.additional.missing",
    "table.fields.additional.error.on.missing",
    "table.expand.json.payload",
    "table.json.payload.null.behavior",
    "table.op.invalid.behavior",
    "route.by.field",
    "route.topic.regex",
    "route.topic.replacement",
    "route.tombstone.on.empty.payload",
    "tracing.span.context.field",
    // Accepted for configs copied from Debezium; spans are not created, so no effect.
    "tracing.operation.name",
    "tracing.with.context.field.only",
];

/// Parses `col:header|envelope|partition[:alias]`, comma separated.
pub fn parse_placements(text: &str) -> Result<Vec<Additional>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            let parts: Vec<&str> = item.split(':').map(str::trim).collect();
            let (column, placement, alias) = match parts.as_slice() {
                [c, p] => (*c, *p, *c),
                [c, p, a] => (*c, *p, *a),
                _ => {
                    return Err(format!(
                        "placement {item:?} is not column:header|envelope|partition[:alias]"
                    ))
                }
            };
            let placement = match placement.to_ascii_lowercase().as_str() {
                "header" => Placement::Header,
                "envelope" => Placement::Envelope,
                "partition" => Placement::Partition,
                other => {
                    return Err(format!(
                        "placement {other:?} in {item:?} is not header, envelope or partition"
                    ))
                }
            };
            Ok(Additional {
                column: column.into(),
                placement,
                alias: alias.into(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debezium_defaults() {
        let r = Rules::from_debezium(&BTreeMap::new()).unwrap();
        assert_eq!(
            (r.event_id.as_str(), r.key.as_str(), r.route_by.as_str()),
            ("id", "aggregateid", "aggregatetype")
        );
        assert_eq!(r.topic("Order"), "outbox.event.Order");
        assert!(r.additional_missing_is_error && !r.expand_json && !r.has_envelope());
    }

    #[test]
    fn regex_routes_or_passes_through() {
        let mut o = BTreeMap::new();
        o.insert(
            "route.topic.regex".to_string(),
            "(?<routedByValue>[a-z]+)-v\\d".to_string(),
        );
        o.insert(
            "route.topic.replacement".to_string(),
            "events.${routedByValue}".to_string(),
        );
        let r = Rules::from_debezium(&o).unwrap();
        assert_eq!(r.topic("order-v2"), "events.order");
        assert_eq!(
            r.topic("Other"),
            "Other",
            "no match: the value is the topic"
        );
    }

    #[test]
    fn placements_and_bad_options() {
        let p =
            parse_placements("type:header:eventType, version:envelope, shard:partition").unwrap();
        assert_eq!(
            p[0],
            Additional {
                column: "type".into(),
                placement: Placement::Header,
                alias: "eventType".into()
            }
        );
        assert_eq!(p[1].alias, "version");
        assert_eq!(p[2].placement, Placement::Partition);
        assert!(parse_placements("a:nowhere").is_err());
        let mut o = BTreeMap::new();
        o.insert("table.field.event.bogus".to_string(), "x".to_string());
        assert!(Rules::from_debezium(&o).unwrap_err().contains("unknown"));
    }
}
