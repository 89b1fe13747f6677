//! `[monitor.tracing]`: OpenTelemetry traces over OTLP, off unless `enabled`.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::secret::Secret;

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Protocol {
    /// OTLP over gRPC (port 4317 by convention).
    #[serde(rename = "grpc")]
    Grpc,
    /// OTLP over HTTP with protobuf bodies (port 4318, path `/v1/traces`).
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

impl Protocol {
    /// `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL` spelling.
    fn from_env(value: &str) -> Option<Self> {
        match value.trim() {
            "grpc" => Some(Self::Grpc),
            "http/protobuf" => Some(Self::HttpProtobuf),
            _ => None,
        }
    }

    /// The collector's conventional local address for this protocol.
    pub fn default_endpoint(self) -> &'static str {
        match self {
            Self::Grpc => "http://127.0.0.1:4317",
            Self::HttpProtobuf => "http://127.0.0.1:4318/v1/traces",
        }
    }
}

/// Traces: one span per event, from its binlog commit to its acknowledgement. Each key
/// the file leaves out is taken from the standard `OTEL_*` variable, then the default:
/// the file wins where it speaks (docs/monitoring.md).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracingConfig {
    /// Turns tracing on; off, no span is made and nothing is exported.
    #[serde(default)]
    pub enabled: bool,
    /// The collector: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// (with `/v1/traces` added for HTTP), else the protocol's local default.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// `grpc` or `http/protobuf`: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`,
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`, else `grpc`.
    #[serde(default)]
    pub protocol: Option<Protocol>,
    /// Share of new traces kept (events whose row carries no trace context); a row's
    /// upstream decision is followed (parent-based). `OTEL_TRACES_SAMPLER_ARG`, else 1.
    #[serde(default)]
    pub sample_ratio: Option<f64>,
    /// `service.name`: `OTEL_SERVICE_NAME`, else `outbox-router`.
    #[serde(default)]
    pub service_name: Option<String>,
    /// Headers sent with every export (a collector's token: `${env:NAME}` /
    /// `${file:PATH}`); `OTEL_EXPORTER_OTLP_HEADERS` adds the ones not named here.
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
    /// Spans waiting for export at most; more are dropped and counted
    /// (`outbox_router_trace_spans_total{outcome="dropped"}`), never waited for.
    #[serde(default = "default_max_queue_spans")]
    pub max_queue_spans: usize,
    /// Spans per export request at most.
    #[serde(default = "default_max_batch_spans")]
    pub max_batch_spans: usize,
    /// An export that takes longer fails (its spans are counted as dropped).
    #[serde(
        default = "default_export_timeout_secs",
        deserialize_with = "crate::units::secs"
    )]
    pub export_timeout_secs: u64,
}

fn default_max_queue_spans() -> usize {
    8_192
}
fn default_max_batch_spans() -> usize {
    512
}
fn default_export_timeout_secs() -> u64 {
    10
}

/// The settings in force: the file's, then `OTEL_*`'s, then the defaults.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub endpoint: String,
    pub protocol: Protocol,
    pub sample_ratio: f64,
    pub service_name: String,
    /// In the file's order, then the environment's; values never printed.
    pub headers: Vec<(String, Secret)>,
}

impl TracingConfig {
    /// The settings, with `env` read for what the file leaves out.
    pub fn resolve(&self, env: impl Fn(&str) -> Option<String>) -> Result<Resolved, String> {
        let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let protocol = match self.protocol {
            Some(p) => p,
            None => match env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
            {
                Some(v) => Protocol::from_env(&v).ok_or_else(|| {
                    format!("OTEL_EXPORTER_OTLP_PROTOCOL {v:?} is not grpc or http/protobuf")
                })?,
                None => Protocol::Grpc,
            },
        };
        let endpoint = match &self.endpoint {
            Some(e) => e.clone(),
            None => match env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
                Some(e) => e,
                None => match env("OTEL_EXPORTER_OTLP_ENDPOINT") {
                    Some(base) if protocol == Protocol::HttpProtobuf => {
                        format!("{}/v1/traces", base.trim_end_matches('/'))
                    }
                    Some(base) => base,
                    None => protocol.default_endpoint().to_string(),
                },
            },
        };
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(format!(
                "monitor.tracing.endpoint {:?} is not an http:// or https:// URL",
                shown(&endpoint)
            ));
        }
        let sample_ratio = match self.sample_ratio {
            Some(r) => r,
            None => match env("OTEL_TRACES_SAMPLER_ARG") {
                Some(v) => v
                    .trim()
                    .parse()
                    .map_err(|_| format!("OTEL_TRACES_SAMPLER_ARG {v:?} is not a number"))?,
                None => 1.0,
            },
        };
        if !(0.0..=1.0).contains(&sample_ratio) {
            return Err(format!(
                "monitor.tracing.sample_ratio {sample_ratio} is not between 0 and 1"
            ));
        }
        let service_name = self
            .service_name
            .clone()
            .or_else(|| env("OTEL_SERVICE_NAME"))
            .unwrap_or_else(|| "outbox-router".to_string());
        let mut headers: Vec<(String, Secret)> = self
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let from_env = env("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
            .or_else(|| env("OTEL_EXPORTER_OTLP_HEADERS"))
            .unwrap_or_default();
        for pair in from_env.split(',').filter(|p| !p.trim().is_empty()) {
            let Some((k, v)) = pair.split_once('=') else {
                return Err(
                    "OTEL_EXPORTER_OTLP_HEADERS is not a list of key=value (its values are not shown)"
                        .to_string(),
                );
            };
            let k = k.trim().to_string();
            if !headers
                .iter()
                .any(|(named, _)| named.eq_ignore_ascii_case(&k))
            {
                headers.push((k, Secret::new(percent_decode(v.trim()))));
            }
        }
        Ok(Resolved {
            endpoint,
            protocol,
            sample_ratio,
            service_name,
            headers,
        })
    }
}

impl Resolved {
    /// `text` (a message that may quote the endpoint) with the endpoint's credentials,
    /// if it has any, left out.
    pub fn scrub(&self, text: &str) -> String {
        text.replace(&self.endpoint, &shown(&self.endpoint))
    }
}

/// An endpoint as logs and errors may show it: `user:password@` left out.
pub fn shown(endpoint: &str) -> String {
    let (scheme, rest) = match endpoint.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), endpoint),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}***@{}", &rest[at + 1..]),
        None => endpoint.to_string(),
    }
}

/// `OTEL_EXPORTER_OTLP_HEADERS` values are percent-encoded (W3C baggage format).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_file_wins_and_otel_variables_fill_what_it_leaves_out() {
        let file: TracingConfig = toml::from_str(
            "enabled = true\nsample_ratio = 0.25\n[headers]\nauthorization = \"Bearer from-file\"\n",
        )
        .unwrap();
        let vars = [
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318/"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.5"),
            ("OTEL_SERVICE_NAME", "billing-outbox"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "Authorization=Bearer%20env,x-tenant=a%2Cb",
            ),
        ];
        let r = file.resolve(env(&vars)).unwrap();
        assert_eq!(r.protocol, Protocol::HttpProtobuf);
        assert_eq!(r.endpoint, "https://collector:4318/v1/traces");
        assert_eq!(r.sample_ratio, 0.25);
        assert_eq!(r.service_name, "billing-outbox");
        let headers: Vec<(&str, &str)> = r
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.expose()))
            .collect();
        assert_eq!(
            headers,
            [("authorization", "Bearer from-file"), ("x-tenant", "a,b")]
        );
        assert!(!format!("{r:?}").contains("from-file"));
    }

    #[test]
    fn without_file_or_variables_it_is_grpc_on_loopback_keeping_every_trace() {
        let r = TracingConfig::default().resolve(|_| None).unwrap();
        assert_eq!(
            (
                r.protocol,
                r.endpoint.as_str(),
                r.sample_ratio,
                r.service_name.as_str()
            ),
            (
                Protocol::Grpc,
                "http://127.0.0.1:4317",
                1.0,
                "outbox-router"
            )
        );
    }

    #[test]
    fn an_endpoints_credentials_are_never_shown() {
        let r = TracingConfig::default()
            .resolve(|name| {
                (name == "OTEL_EXPORTER_OTLP_ENDPOINT")
                    .then(|| "https://tenant:s3cret@collector:4317".to_string())
            })
            .unwrap();
        assert_eq!(shown(&r.endpoint), "https://***@collector:4317");
        let said = r.scrub(&format!("error sending request for url ({})", r.endpoint));
        assert!(
            !said.contains("s3cret") && said.contains("collector:4317"),
            "{said}"
        );
        assert_eq!(
            shown("http://127.0.0.1:4318/v1/traces@x"),
            "http://127.0.0.1:4318/v1/traces@x"
        );
        let bad: TracingConfig = toml::from_str("endpoint = \"u:pw@collector:4317\"").unwrap();
        assert!(!bad.resolve(|_| None).unwrap_err().contains("pw"));
    }

    #[test]
    fn wrong_values_are_named() {
        let bad: TracingConfig = toml::from_str("sample_ratio = 2.0").unwrap();
        assert!(bad.resolve(|_| None).unwrap_err().contains("sample_ratio"));
        let bad: TracingConfig = toml::from_str("endpoint = \"collector:4317\"").unwrap();
        assert!(bad.resolve(|_| None).unwrap_err().contains("http://"));
        let err = TracingConfig::default()
            .resolve(env(&[("OTEL_EXPORTER_OTLP_HEADERS", "token-without-key")]))
            .unwrap_err();
        assert!(!err.contains("token-without-key"), "{err}");
    }
}
