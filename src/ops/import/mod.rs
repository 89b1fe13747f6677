//! `import-debezium`: a Debezium MySQL / MariaDB connector config (JSON as posted to
//! Kafka Connect, or `.properties`) turned into an outbox-router TOML config, with every
//! key that has no equivalent listed and why.

mod kafka_properties;
pub mod offsets;
mod take_offset;

pub use take_offset::take_over_offset;

use std::collections::BTreeMap;
use std::fmt::Write;

/// The result of an import: the TOML text and what could not be carried over.
#[derive(Debug, Clone)]
pub struct Imported {
    /// A complete configuration file.
    pub toml: String,
    /// `(key, reason)` for every key not mapped, in key order.
    pub unmapped: Vec<(String, String)>,
    /// `(variable, what it must hold)`: the secrets the config references instead of
    /// holding them, to be set before the router starts.
    pub env: Vec<(String, String)>,
}

/// Why an input could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("not a connector config: {0}")]
    Format(String),
}

/// Reads connector settings from JSON (`{"name", "config": {…}}` or a flat object) or
/// Java properties text.
pub fn parse_connector(text: &str) -> Result<BTreeMap<String, String>, ImportError> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        let json: serde_json::Value =
            serde_json::from_str(text).map_err(|e| ImportError::Format(e.to_string()))?;
        let object = json.get("config").unwrap_or(&json);
        let map = object
            .as_object()
            .ok_or_else(|| ImportError::Format("expected a JSON object".into()))?;
        let mut settings: BTreeMap<String, String> = map
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string()),
                )
            })
            .collect();
        // As posted to Connect, the name sits beside the config; offsets are kept by it.
        if let Some(name) = json.get("name").and_then(|n| n.as_str()) {
            settings
                .entry("name".to_string())
                .or_insert_with(|| name.to_string());
        }
        return Ok(settings);
    }
    let mut out = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let split = line
            .find(['=', ':'])
            .ok_or_else(|| ImportError::Format(format!("line {line:?} has no = or :")))?;
        out.insert(
            line[..split].trim().to_string(),
            line[split + 1..].trim().to_string(),
        );
    }
    Ok(out)
}

fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// Debezium's `table.include.list` holds regular expressions; plain names and `.*`
/// wildcards translate, anything else does not.
fn include_to_pattern(regex: &str) -> Option<String> {
    let p = regex
        .trim()
        .replace("\\.", "\u{0}")
        .replace(".*", "*")
        .replace('\u{0}', ".");
    let plain = p
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '_' | '$' | '.' | '*' | '-'));
    (plain && p.split('.').count() == 2).then_some(p)
}

/// Maps a connector config.
pub fn import(config: &BTreeMap<String, String>) -> Imported {
    let mut unmapped: Vec<(String, String)> = Vec::new();
    let mut used: Vec<&str> = Vec::new();
    let mut get = |k: &'static str| {
        used.push(k);
        config.get(k).cloned()
    };
    let class = get("connector.class").unwrap_or_default();
    let mut source = String::new();
    if let Some(h) = get("database.hostname") {
        writeln!(source, "host = {}", quoted(&h)).ok();
    }
    let port = get("database.port").unwrap_or_else(|| "3306".into());
    writeln!(source, "port = {}", port.parse::<u16>().unwrap_or(3306)).ok();
    writeln!(
        source,
        "user = {}",
        quoted(&get("database.user").unwrap_or_else(|| "cdc".into()))
    )
    .ok();
    writeln!(
        source,
        "# The password is not copied: export it as OUTBOX_DB_PASSWORD."
    )
    .ok();
    writeln!(source, "password = \"${{env:OUTBOX_DB_PASSWORD}}\"").ok();
    get("database.password");
    let mut kafka = kafka_properties::Translated::default();
    kafka.env.push((
        "OUTBOX_DB_PASSWORD".into(),
        "database.password (the router user's)".into(),
    ));
    let server_id = get("database.server.id")
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(6001);
    writeln!(source, "server_id = {server_id}").ok();
    match get("database.ssl.mode").as_deref() {
        None | Some("disabled") => {}
        Some("preferred") => {
            unmapped.push(("database.ssl.mode".into(), "preferred (TLS if offered) has no equivalent: choose tls_mode = \"required\" or stay disabled".into()))
        }
        Some(mode @ ("required" | "verify_ca" | "verify_identity")) => {
            writeln!(source, "tls_mode = {}", quoted(mode)).ok();
            if mode != "required" {
                writeln!(source, "tls_ca_file = \"/path/to/ca.pem\"  # PEM; Debezium used a JKS truststore").ok();
            }
        }
        Some(other) => unmapped.push(("database.ssl.mode".into(), format!("unknown mode {other:?}"))),
    }

    match get("snapshot.mode").as_deref() {
        Some("initial") => {
            writeln!(source, "snapshot = \"initial\"").ok();
        }
        None | Some("no_data" | "never" | "schema_only") => {}
        Some(other) => unmapped.push((
            "snapshot.mode".into(),
            format!("{other} has no equivalent: outbox-router offers never (default) and initial"),
        )),
    }
    let mut tables = Vec::new();
    if let Some(list) = get("table.include.list").or_else(|| config.get("table.whitelist").cloned())
    {
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match include_to_pattern(item) {
                Some(p) => tables.push(p),
                None => unmapped.push((
                    "table.include.list".into(),
                    format!("{item:?} is a regular expression without a wildcard equivalent: name the tables"),
                )),
            }
        }
    }
    if tables.is_empty() {
        tables.push("db.outbox".into());
        unmapped.push((
            "table.include.list".into(),
            "missing: set outbox.tables to your outbox table(s)".into(),
        ));
    }

    // The EventRouter transform, whatever its alias.
    let mut router = BTreeMap::new();
    let transforms = get("transforms").unwrap_or_default();
    for name in transforms
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let prefix = format!("transforms.{name}.");
        let ty = config
            .get(&format!("{prefix}type"))
            .cloned()
            .unwrap_or_default();
        if ty == "io.debezium.transforms.outbox.EventRouter" {
            for (k, v) in config
                .iter()
                .filter(|(k, _)| k.starts_with(&prefix) && !k.ends_with(".type"))
            {
                router.insert(k[prefix.len()..].to_string(), v.clone());
            }
        } else {
            unmapped.push((
                format!("{prefix}type"),
                format!("transform {ty} has no equivalent"),
            ));
        }
    }
    let mut router_toml = String::new();
    for (k, v) in &router {
        if matches!(
            k.as_str(),
            "tracing.operation.name" | "tracing.with.context.field.only"
        ) {
            unmapped.push((
                format!("transforms.*.{k}"),
                "spans are not created (the trace context column is propagated as traceparent / tracestate headers)".into(),
            ));
            continue;
        }
        let mut one = BTreeMap::new();
        one.insert(k.clone(), v.clone());
        match crate::outbox::Rules::from_debezium(&one) {
            Ok(_) => {
                writeln!(router_toml, "{} = {}", quoted(k), quoted(v)).ok();
            }
            Err(e) => unmapped.push((format!("transforms.*.{k}"), e)),
        }
    }

    let mut bootstrap = "127.0.0.1:9092".to_string();
    for (k, v) in config {
        if let Some(p) = k.strip_prefix("producer.override.") {
            kafka.add(k, p, v);
        } else if k == "schema.history.internal.kafka.bootstrap.servers"
            || k == "database.history.kafka.bootstrap.servers"
        {
            bootstrap = v.clone();
        }
    }

    for k in config.keys() {
        if used.contains(&k.as_str())
            || k.starts_with("transforms.")
            || k.starts_with("producer.override.")
            || unmapped.iter().any(|(u, _)| u == k)
        {
            continue;
        }
        let reason = match k.as_str() {
            "name" | "tasks.max" => "Kafka Connect bookkeeping: not needed",
            "topic.prefix" | "database.server.name" => "not needed: topics come from the Outbox Event Router rules",
            "schema.history.internal.kafka.bootstrap.servers" | "database.history.kafka.bootstrap.servers" => {
                "used as kafka.bootstrap_servers; no schema history is kept"
            }
            k if k.starts_with("schema.history") || k.starts_with("database.history") => {
                "not needed: column names travel in the binlog (binlog_row_metadata=FULL), no schema history"
            }
            "heartbeat.interval.ms" | "heartbeat.action.query" => {
                "not needed: the position advances over every transaction, outbox or not"
            }
            "database.include.list" | "table.whitelist" => "covered by outbox.tables",
            "include.schema.changes" => "not needed: schema changes are never published",
            "tombstones.on.delete" => "not needed: DELETEs on an outbox are never published",
            "key.converter" | "value.converter" | "key.converter.schemas.enable" | "value.converter.schemas.enable" => {
                "not needed: keys and values are written as the stored bytes (like StringConverter)"
            }
            "connector.adapter" | "gtid.source.includes" | "gtid.source.excludes" => "no equivalent yet",
            _ => "no equivalent",
        };
        unmapped.push((k.clone(), reason.to_string()));
    }
    if !class.is_empty() && !class.contains("MySql") && !class.contains("MariaDb") {
        unmapped.push((
            "connector.class".into(),
            format!("{class} is not a MySQL / MariaDB connector"),
        ));
    }
    unmapped.append(&mut kafka.unmapped);
    unmapped.sort();

    let mut out = String::new();
    writeln!(
        out,
        "# Imported from a Debezium connector config by `outbox-router import-debezium`.\n"
    )
    .ok();
    writeln!(out, "[source]\n{source}").ok();
    writeln!(
        out,
        "[outbox]\ntables = [{}]\n",
        tables
            .iter()
            .map(|t| quoted(t))
            .collect::<Vec<_>>()
            .join(", ")
    )
    .ok();
    writeln!(out, "# Debezium Outbox Event Router options, same names and defaults.\n[outbox.event_router]\n{router_toml}").ok();
    writeln!(out, "[kafka]\nbootstrap_servers = {}\n", quoted(&bootstrap)).ok();
    if !kafka.toml.is_empty() {
        writeln!(out, "[kafka.properties]\n{}", kafka.toml).ok();
    }
    writeln!(out, "[checkpoint]\ndir = \"outbox-router-checkpoint\"").ok();
    Imported {
        toml: out,
        unmapped,
        env: kafka.env,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracing_options_carry_the_context_column_and_name_what_has_no_effect() {
        let config: BTreeMap<String, String> = [
            ("transforms", "outbox"),
            (
                "transforms.outbox.type",
                "io.debezium.transforms.outbox.EventRouter",
            ),
            ("transforms.outbox.tracing.span.context.field", "trace_ctx"),
            ("transforms.outbox.tracing.operation.name", "outbox-read"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let imported = import(&config);
        assert!(
            imported
                .toml
                .contains("\"tracing.span.context.field\" = \"trace_ctx\""),
            "{}",
            imported.toml
        );
        assert!(!imported.toml.contains("tracing.operation.name"));
        assert!(imported
            .unmapped
            .iter()
            .any(|(k, why)| k.ends_with("tracing.operation.name") && why.contains("spans")));
    }

    #[test]
    fn include_list_translation() {
        assert_eq!(
            include_to_pattern("shop.outbox").as_deref(),
            Some("shop.outbox")
        );
        assert_eq!(
            include_to_pattern("shop\\.outbox").as_deref(),
            Some("shop.outbox")
        );
        assert_eq!(
            include_to_pattern("tenant_.*\\.outbox").as_deref(),
            Some("tenant_*.outbox")
        );
        assert_eq!(include_to_pattern("shop.(a|b)"), None);
    }
}
