//! OpenTelemetry traces against a real collector: Jaeger v1.75.0 built by
//! `scripts/services up jaeger`, receiving OTLP, read back through its query API.

use std::time::{Duration, Instant, SystemTime};

use mysql_async::prelude::Queryable;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use serde_json::Value;

use crate::util::*;

const QUERY: &str = "http://127.0.0.1:16686";
const OTLP_GRPC: &str = "http://127.0.0.1:14317";
const OTLP_HTTP: &str = "http://127.0.0.1:14318/v1/traces";

/// A W3C trace context as an application writes it into its outbox row.
fn app_context(trace: u128, span: u64, sampled: bool) -> String {
    format!(
        "00-{:032x}-{:016x}-{}",
        trace,
        span,
        if sampled { "01" } else { "00" }
    )
}

/// The trace `trace_id` as Jaeger's query API returns it, once it holds a span named
/// `operation` (at most `within`); `None` if it never does.
async fn jaeger_trace(trace_id: &str, operation: &str, within: Duration) -> Option<Value> {
    let deadline = Instant::now() + within;
    loop {
        let answer = reqwest::get(format!("{QUERY}/api/traces/{trace_id}")).await;
        if let Ok(answer) = answer {
            if let Ok(v) = answer.json::<Value>().await {
                let trace = &v["data"][0];
                let found = trace["spans"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|s| s["operationName"] == operation));
                if found {
                    return Some(trace.clone());
                }
            }
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A span's tag value, as text.
fn tag(span: &Value, key: &str) -> Option<String> {
    span["tags"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .map(|t| match &t["value"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
}

/// A span's events (Jaeger's logs): name and time (µs since the epoch), in time order.
fn events(span: &Value) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = span["logs"]
        .as_array()
        .map(|logs| {
            logs.iter()
                .map(|l| {
                    let name = l["fields"]
                        .as_array()
                        .and_then(|f| f.iter().find(|f| f["key"] == "event"))
                        .and_then(|f| f["value"].as_str())
                        .unwrap_or_default()
                        .to_string();
                    (name, l["timestamp"].as_i64().unwrap_or_default())
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by_key(|(_, t)| *t);
    out
}

/// The parent span id a span names (`CHILD_OF`), if any.
fn parent_of(span: &Value) -> Option<String> {
    span["references"]
        .as_array()?
        .iter()
        .find(|r| r["refType"] == "CHILD_OF")
        .and_then(|r| r["spanID"].as_str())
        .map(str::to_string)
}

/// A consumer that continues the trace from a record's `traceparent`: its span, exported
/// over OTLP/HTTP as any instrumented consumer would.
async fn consume_as_child_of(traceparent: &str, service: &str) {
    let parts: Vec<&str> = traceparent.split('-').collect();
    let trace_id = TraceId::from_hex(parts[1]).unwrap();
    let parent = SpanId::from_hex(parts[2]).unwrap();
    let now = SystemTime::now();
    let span = SpanData {
        span_context: SpanContext::new(
            trace_id,
            SpanId::from(0x00c0_ffee_0000_0001),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: parent,
        parent_span_is_remote: true,
        span_kind: SpanKind::Consumer,
        name: "billing consume".into(),
        start_time: now,
        end_time: now + Duration::from_millis(3),
        attributes: Vec::new(),
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: Status::Unset,
        instrumentation_scope: opentelemetry::InstrumentationScope::builder("it").build(),
    };
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(reqwest_s3::Client::new())
        .with_endpoint(OTLP_HTTP)
        .build()
        .unwrap();
    exporter.set_resource(
        &opentelemetry_sdk::Resource::builder_empty()
            .with_service_name(service.to_string())
            .build(),
    );
    exporter.export(vec![span]).await.unwrap();
}

/// An application's trace, written into its outbox rows, continues through the router:
/// Jaeger holds the router's span of each sampled row under the application's span,
/// with the binlog commit, the read, the hand-over and Kafka's acknowledgement (at the
/// record's offset) as its events, within the stated tolerance of the commit time; the
/// record's `traceparent` names the router's span, and a consumer continuing from it
/// lands in the same trace below it. A row whose upstream trace is not sampled goes out
/// with its own `traceparent` unchanged and no span; a row without trace context starts a
/// trace of its own (ratio 1). Over OTLP/gRPC.
#[tokio::test(flavor = "multi_thread")]
async fn an_applications_trace_continues_through_the_router_and_its_consumer() {
    let _settings = SERVER_SETTINGS.read().await;
    services("up", "jaeger");
    let (mut conn, mut setup) = fresh("traces_grpc").await;
    let db = setup.db.clone();
    conn.query_drop(format!("ALTER TABLE {db}.outbox ADD trace_ctx TEXT NULL"))
        .await
        .unwrap();
    let service = format!("outbox-router-it-{}", setup.server_id);
    setup.columns_toml = "trace_context = \"trace_ctx\"".into();
    setup.monitor_toml = format!(
        "[tracing]\nenabled = true\nendpoint = \"{OTLP_GRPC}\"\nservice_name = \"{service}\"\n"
    );
    let mut router = setup.start_router();
    wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(60)).await;

    let seed = u128::from(setup.server_id) << 64;
    let sampled = app_context(seed | 1, 0xa1, true);
    let unsampled = app_context(seed | 2, 0xa2, false);
    let inserted_at = SystemTime::now();
    conn.exec_drop(
        format!(
            "INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload, trace_ctx) VALUES
             ('t-sampled', 'Order', 'o-1', 'Created', '{{}}', ?), ('t-unsampled', 'Order', 'o-2', 'Created', '{{}}', ?),
             ('t-none', 'Order', 'o-3', 'Created', '{{}}', NULL)"
        ),
        (sampled.as_str(), unsampled.as_str()),
    )
    .await
    .unwrap();
    let topics = vec![setup.topic("Order")];
    assert_eq!(wait_for_ids(&topics, 3, Duration::from_secs(60)), 3);
    let msgs = read_all(&topics);
    let record = |id: &str| msgs.iter().find(|m| m.id() == id).unwrap().clone();
    let traceparent = |id: &str| {
        record(id)
            .headers
            .get("traceparent")
            .map(|v| String::from_utf8(v.clone()).unwrap())
    };

    // The sampled row: its record names the router's span, in the application's trace.
    let out = traceparent("t-sampled").expect("a traceparent");
    let trace_id = format!("{:032x}", seed | 1);
    assert!(
        out.starts_with(&format!("00-{trace_id}-")) && out.ends_with("-01"),
        "{out}"
    );
    let router_span = out.split('-').nth(2).unwrap().to_string();
    assert_ne!(
        router_span,
        format!("{:016x}", 0xa1),
        "the router's own span"
    );
    let trace = jaeger_trace(&trace_id, "outbox event", Duration::from_secs(30))
        .await
        .unwrap_or_else(|| panic!("no router span in Jaeger for {trace_id}\n{}", router.log()));
    let span = trace["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["operationName"] == "outbox event")
        .unwrap()
        .clone();
    assert_eq!(span["spanID"], router_span.as_str());
    assert_eq!(
        parent_of(&span).as_deref(),
        Some(format!("{:016x}", 0xa1).as_str())
    );
    let m = record("t-sampled");
    assert_eq!(
        tag(&span, "messaging.kafka.offset"),
        Some(m.offset.to_string())
    );
    assert_eq!(
        tag(&span, "messaging.destination.partition.id"),
        Some(m.partition.to_string())
    );
    assert_eq!(
        tag(&span, "messaging.message.id").as_deref(),
        Some("t-sampled")
    );
    assert_eq!(
        tag(&span, "messaging.destination.name"),
        Some(m.topic.clone())
    );
    assert_eq!(tag(&span, "outbox.role").as_deref(), Some("single"));
    let process = &trace["processes"][span["processID"].as_str().unwrap()];
    assert_eq!(process["serviceName"], service.as_str());
    let stages = events(&span);
    let names: Vec<&str> = stages.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "binlog commit",
            "read by the router",
            "handed to Kafka",
            "acknowledged by Kafka"
        ],
        "{span}"
    );
    // MariaDB's commit time has whole seconds: the commit is at most a second before
    // the insert's time here (same clock, one machine), never after it by more than the
    // statement took.
    let inserted_us = inserted_at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    let commit_us = stages[0].1;
    assert!(
        commit_us > inserted_us - 1_000_000 && commit_us < inserted_us + 1_000_000,
        "commit {commit_us} µs, insert {inserted_us} µs"
    );
    assert_eq!(span["startTime"].as_i64(), Some(commit_us.min(stages[1].1)));
    let acked_us = stages[3].1;
    assert!(
        acked_us - stages[1].1 < 5_000_000,
        "read → acknowledged took {} µs",
        acked_us - stages[1].1
    );
    println!(
        "traces: {trace_id}: commit → read {} ms, read → handed {} ms, handed → acknowledged {} ms",
        (stages[1].1 - stages[0].1) / 1000,
        (stages[2].1 - stages[1].1) / 1000,
        (stages[3].1 - stages[2].1) / 1000
    );

    // A consumer continuing from the record's headers hangs below the router's span.
    consume_as_child_of(&out, &format!("{service}-consumer")).await;
    let trace = jaeger_trace(&trace_id, "billing consume", Duration::from_secs(30))
        .await
        .expect("the consumer's span in the same trace");
    let consumer = trace["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["operationName"] == "billing consume")
        .unwrap();
    assert_eq!(parent_of(consumer), Some(router_span.clone()));

    // Upstream not sampled: its own traceparent goes out, no span is made.
    assert_eq!(traceparent("t-unsampled"), Some(unsampled.clone()));
    // No context: a trace of its own, rooted at the router's span.
    let own = traceparent("t-none").expect("a trace of its own at ratio 1");
    let own_trace = own.split('-').nth(1).unwrap().to_string();
    let trace = jaeger_trace(&own_trace, "outbox event", Duration::from_secs(30))
        .await
        .expect("the row without context has its own trace");
    assert_eq!(parent_of(&trace["spans"][0]), None);
    let none = jaeger_trace(
        &format!("{:032x}", seed | 2),
        "outbox event",
        Duration::from_secs(3),
    )
    .await;
    assert!(none.is_none(), "an unsampled upstream got a span: {none:?}");

    let (_, metrics) = http_get(setup.monitor_port, "/metrics").await;
    assert_eq!(
        metric(
            &metrics,
            "outbox_router_trace_spans_total{outcome=\"exported\"}"
        ),
        2.0,
        "{metrics}"
    );
    drain_and_stop(&mut router, &topics, 3);
}

/// Over OTLP/HTTP with a ratio of 0: rows whose upstream trace is sampled are still
/// traced (parent-based); rows without context are not, and go out without a
/// `traceparent`. The collector gone (a port nothing listens on) costs only the spans:
/// every event is delivered, each span is counted as dropped.
#[tokio::test(flavor = "multi_thread")]
async fn sampling_follows_the_upstream_and_a_missing_collector_costs_only_spans() {
    let _settings = SERVER_SETTINGS.read().await;
    services("up", "jaeger");
    for (name, endpoint, reachable) in [
        ("traces_http", OTLP_HTTP, true),
        (
            "traces_nocollector",
            "http://127.0.0.1:14399/v1/traces",
            false,
        ),
    ] {
        let (mut conn, mut setup) = fresh(name).await;
        let db = setup.db.clone();
        conn.query_drop(format!("ALTER TABLE {db}.outbox ADD trace_ctx TEXT NULL"))
            .await
            .unwrap();
        setup.columns_toml = "trace_context = \"trace_ctx\"".into();
        setup.monitor_toml = format!(
            "[tracing]\nenabled = true\nprotocol = \"http/protobuf\"\nendpoint = \"{endpoint}\"\nsample_ratio = 0.0\nexport_timeout_secs = 2\n"
        );
        let mut router = setup.start_router();
        wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(60)).await;
        const EVENTS: usize = 2_000;
        let seed = u128::from(setup.server_id) << 64;
        for chunk in 0..(EVENTS / 100) {
            let rows: Vec<String> = (0..100)
                .map(|i| {
                    let n = chunk * 100 + i;
                    // Every other row carries a sampled upstream trace.
                    let ctx = match n % 2 {
                        0 => format!("'{}'", app_context(seed | n as u128, 0xb0 + n as u64, true)),
                        _ => "NULL".into(),
                    };
                    format!(
                        "('s-{n}', 'Order', 'k-{}', 'Created', '{{\"seq\":{n}}}', {ctx})",
                        n % 7
                    )
                })
                .collect();
            conn.query_drop(format!(
                "INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload, trace_ctx) VALUES {}",
                rows.join(",")
            ))
            .await
            .unwrap();
        }
        let topics = vec![setup.topic("Order")];
        assert_eq!(
            wait_for_ids(&topics, EVENTS, Duration::from_secs(120)),
            EVENTS
        );
        for m in read_all(&topics) {
            let n: usize = m.id()[2..].parse().unwrap();
            let tp = m
                .headers
                .get("traceparent")
                .map(|v| String::from_utf8(v.clone()).unwrap());
            match n % 2 {
                0 => {
                    let tp = tp.expect("a sampled upstream is traced");
                    assert!(tp.contains(&format!("{:032x}", seed | n as u128)), "{tp}");
                    assert!(
                        !tp.contains(&format!("{:016x}", 0xb0 + n as u64)),
                        "the router's span: {tp}"
                    );
                }
                _ => assert_eq!(tp, None, "ratio 0: no trace for {}", m.id()),
            }
        }
        let traced = (EVENTS / 2) as f64;
        let outcome = match reachable {
            true => "exported",
            false => "dropped",
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, metrics) = http_get(setup.monitor_port, "/metrics").await;
            let n = metric(
                &metrics,
                &format!("outbox_router_trace_spans_total{{outcome=\"{outcome}\"}}"),
            );
            if n == traced {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{n} of {traced} spans {outcome}\n{metrics}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        if reachable {
            let trace_id = format!("{:032x}", seed | 1000);
            assert!(
                jaeger_trace(&trace_id, "outbox event", Duration::from_secs(30))
                    .await
                    .is_some(),
                "s-1000's trace in Jaeger"
            );
        } else {
            assert!(
                router.log().contains("streaming goes on"),
                "{}",
                router.log()
            );
        }
        let log = drain_and_stop(&mut router, &topics, EVENTS);
        assert_eq!(check_stream(&topics, EVENTS), 0);
        println!("traces: {name}: {EVENTS} events, {traced} traced, all {outcome}");
        let _ = log;
    }
}

/// Exactly-once: a span ends when its Kafka transaction commits, not at the record's
/// acknowledgement — `written to Kafka` (at the offset a read_committed consumer reads)
/// then `Kafka transaction committed`.
#[tokio::test(flavor = "multi_thread")]
async fn in_exactly_once_a_span_ends_when_its_kafka_transaction_commits() {
    let _settings = SERVER_SETTINGS.read().await;
    services("up", "jaeger");
    let name = "traces_eos";
    let (mut conn, mut setup) = fresh(name).await;
    let db = setup.db.clone();
    conn.query_drop(format!("ALTER TABLE {db}.outbox ADD trace_ctx TEXT NULL"))
        .await
        .unwrap();
    setup.delivery(Some(&exactly_once_delivery(name, true)));
    setup.columns_toml = "trace_context = \"trace_ctx\"".into();
    setup.monitor_toml = format!("[tracing]\nenabled = true\nendpoint = \"{OTLP_GRPC}\"\n");
    let mut router = setup.start_router();
    wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(60)).await;
    let trace = (u128::from(setup.server_id) << 64) | 7;
    conn.exec_drop(
        format!(
            "INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload, trace_ctx) VALUES
             ('e-1', 'Order', 'o-1', 'Created', '{{}}', ?)"
        ),
        (app_context(trace, 0xc1, true),),
    )
    .await
    .unwrap();
    let topics = vec![setup.topic("Order")];
    assert_eq!(wait_for_ids(&topics, 1, Duration::from_secs(60)), 1);
    let m = read_all(&topics).remove(0);
    let trace_id = format!("{trace:032x}");
    let found = jaeger_trace(&trace_id, "outbox event", Duration::from_secs(30))
        .await
        .unwrap_or_else(|| panic!("no span for {trace_id}\n{}", router.log()));
    let span = &found["spans"][0];
    let names: Vec<String> = events(span).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "binlog commit",
            "read by the router",
            "handed to Kafka",
            "written to Kafka",
            "Kafka transaction committed"
        ]
    );
    assert_eq!(
        tag(span, "messaging.kafka.offset"),
        Some(m.offset.to_string())
    );
    assert_eq!(tag(span, "otel.status_code"), None, "{span}");
    drain_and_stop(&mut router, &topics, 1);
}

/// The spans of trace `trace_id` named `outbox event`, once there are at least `n` (at
/// most `within`); what there is then.
async fn router_spans(trace_id: &str, n: usize, within: Duration) -> Vec<Value> {
    let deadline = Instant::now() + within;
    loop {
        let mut spans = Vec::new();
        if let Ok(answer) = reqwest::get(format!("{QUERY}/api/traces/{trace_id}")).await {
            if let Ok(v) = answer.json::<Value>().await {
                spans = v["data"][0]["spans"]
                    .as_array()
                    .map(|s| {
                        s.iter()
                            .filter(|s| s["operationName"] == "outbox event")
                            .cloned()
                            .collect()
                    })
                    .unwrap_or_default();
            }
        }
        if spans.len() >= n || Instant::now() > deadline {
            return spans;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Whether a span ended with an error status.
fn is_error(span: &Value) -> bool {
    tag(span, "otel.status_code").as_deref() == Some("ERROR")
}

/// Whether a span claims its record was delivered (acknowledged, or its transaction
/// committed).
fn claims_delivery(span: &Value) -> bool {
    events(span)
        .iter()
        .any(|(n, _)| n == "acknowledged by Kafka" || n == "Kafka transaction committed")
}

/// A record Kafka refuses for good (over its topic's `max.message.bytes`), with parking
/// on: the router's span of that attempt ends with an error, names the topic that refused
/// it and claims no delivery; the event, parked on the next run, gets a span that names
/// the parking topic it really went to. The JSON log line about the refusal carries the
/// event's trace id and the failed span's id (`--log-format json`).
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_record_ends_its_span_with_an_error_and_the_log_names_its_trace() {
    let _settings = SERVER_SETTINGS.read().await;
    services("up", "jaeger");
    let name = "traces_refused";
    let (mut conn, mut setup) = fresh(name).await;
    let db = setup.db.clone();
    conn.query_drop(format!("ALTER TABLE {db}.outbox ADD trace_ctx TEXT NULL"))
        .await
        .unwrap();
    let parked = crate::parking::parking(&mut setup);
    let invoices = setup.topic("Invoice");
    setup.extra_toml += &format!(
        "[[kafka.topics.rule]]\npattern = \"{invoices}\"\nconfig = {{ \"max.message.bytes\" = \"20000\" }}\n"
    );
    setup
        .kafka_properties
        .push(("batch.size".into(), "16384".into()));
    setup.columns_toml = "trace_context = \"trace_ctx\"".into();
    setup.monitor_toml = format!("[tracing]\nenabled = true\nendpoint = \"{OTLP_GRPC}\"\n");
    let mut router = setup.start_router_with(&[], &["--log-format", "json"]);
    wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(60)).await;
    let trace = (u128::from(setup.server_id) << 64) | 0x51;
    conn.exec_drop(
        format!(
            "INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload, trace_ctx) VALUES
             ('big-1', 'Invoice', 'i-1', 'Issued', CONCAT('{{\"pad\":\"', (SELECT GROUP_CONCAT(MD5(seq) SEPARATOR '') FROM {db}.seq_1_to_3000), '\"}}'), ?)"
        ),
        (app_context(trace, 0xd1, true),),
    )
    .await
    .unwrap();
    assert_eq!(
        wait_for_ids(std::slice::from_ref(&parked), 1, Duration::from_secs(90)),
        1,
        "the refused event parked\n{}",
        router.log()
    );
    let trace_id = format!("{trace:032x}");
    let spans = router_spans(&trace_id, 2, Duration::from_secs(30)).await;
    assert_eq!(spans.len(), 2, "{spans:?}\n{}", router.log());
    let failed = spans
        .iter()
        .find(|s| is_error(s))
        .unwrap_or_else(|| panic!("no failed span: {spans:?}"));
    assert!(!claims_delivery(failed), "{failed}");
    assert!(
        events(failed).iter().any(|(n, _)| n == "not delivered"),
        "{failed}"
    );
    assert_eq!(
        tag(failed, "messaging.destination.name"),
        Some(invoices.clone())
    );
    assert_eq!(tag(failed, "messaging.kafka.offset"), None, "{failed}");
    let delivered = spans.iter().find(|s| !is_error(s)).unwrap();
    assert!(claims_delivery(delivered), "{delivered}");
    assert_eq!(
        tag(delivered, "messaging.destination.name"),
        Some(parked.clone()),
        "the span names where the record went"
    );
    let record = read_all(std::slice::from_ref(&parked)).remove(0);
    assert_eq!(
        tag(delivered, "messaging.kafka.offset"),
        Some(record.offset.to_string())
    );
    for span in [failed, delivered] {
        assert_eq!(
            parent_of(span),
            Some(format!("{:016x}", 0xd1)),
            "under the app's span"
        );
    }

    // The log line about the refusal, as JSON, names the trace and the failed span.
    let log = router.log();
    let refusal = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("refused an outbox event's record for good"))
        })
        .unwrap_or_else(|| panic!("no JSON line about the refusal:\n{log}"));
    assert_eq!(
        refusal["fields"]["trace_id"].as_str(),
        Some(trace_id.as_str()),
        "{refusal}"
    );
    assert_eq!(
        refusal["fields"]["span_id"].as_str(),
        failed["spanID"].as_str(),
        "{refusal}"
    );
    assert_eq!(refusal["fields"]["event"], "big-1", "{refusal}");
    drain_and_stop(&mut router, std::slice::from_ref(&parked), 1);
}

/// The `outbox event` spans service `service` exported (since `since_us` µs, if given),
/// from the Jaeger whose query API is at `query`.
async fn spans_of_service_at(query: &str, service: &str, since_us: Option<i64>) -> Vec<Value> {
    let since = since_us
        .map(|us| format!("&start={us}"))
        .unwrap_or_default();
    let url = format!("{query}/api/traces?service={service}{since}&limit=100000");
    let Ok(answer) = reqwest::get(url).await else {
        return Vec::new();
    };
    let v: Value = answer.json().await.unwrap_or_default();
    v["data"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["spans"].as_array().cloned().unwrap_or_default())
        .filter(|s| s["operationName"] == "outbox event")
        .collect()
}

/// `spans_of_service_at` the suite's Jaeger.
async fn spans_of_service(service: &str, since_us: i64) -> Vec<Value> {
    spans_of_service_at(QUERY, service, Some(since_us)).await
}

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

/// A standby pair in exactly-once, every event traced: the leader frozen (SIGSTOP) past
/// its session while events keep coming; the standby, which never led, takes over and
/// fences it; resumed, the old leader cannot commit what it had open. Every span that
/// claims a delivery names a record a read_committed consumer finds at that topic,
/// partition and offset with the span's event id; every event has such a span; the
/// spans of what the old leader could not commit end with an error and claim nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_takeover_leaves_no_span_claiming_a_delivery_that_did_not_happen() {
    takeover_spans("traces_takeover", false).await;
}

/// The same with the pair's other instance (`b`) started first and leading.
#[tokio::test(flavor = "multi_thread")]
async fn a_takeover_leaves_no_span_claiming_a_delivery_that_did_not_happen_other_order() {
    takeover_spans("traces_takeover_b", true).await;
}

async fn takeover_spans(name: &str, b_first: bool) {
    let _settings = SERVER_SETTINGS.read().await;
    services("up", "jaeger");
    let since = now_us();
    let mut p = crate::standby::pair(name).await;
    if b_first {
        std::mem::swap(&mut p.a, &mut p.b);
    }
    let service = format!("outbox-router-takeover-{}", p.a.server_id);
    for s in [&mut p.a, &mut p.b] {
        s.monitor_toml = format!(
            "[tracing]\nenabled = true\nendpoint = \"{OTLP_GRPC}\"\nservice_name = \"{service}\"\n"
        );
    }
    let mut a = p.a.start_router();
    crate::standby::wait_streaming(p.a.monitor_port, Duration::from_secs(60), &a).await;
    let mut b = p.b.start_router();
    crate::standby::wait_standby_ready(p.b.monitor_port, &b).await;
    let writer = crate::standby::Writer::start_sized(&p.a.db, 10);
    tokio::time::sleep(Duration::from_secs(3)).await;
    a.pause();
    crate::standby::wait_streaming(p.b.monitor_port, Duration::from_secs(90), &b).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.resume();
    // Fenced at its next commit, or a standby again once it sees the lock gone.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if a.wait(Duration::from_millis(200)).is_some()
            || crate::standby::gauge(p.a.monitor_port, "outbox_router_leader").await == Some(0.0)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the old leader kept leading:\n{}",
            a.log()
        );
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let total = writer.stop().await;
    drain_and_stop(&mut b, &p.topics, total);
    assert_eq!(
        check_stream(&p.topics, total),
        0,
        "read_committed duplicates"
    );
    a.stop(Duration::from_secs(30));

    let committed: std::collections::HashMap<(String, i32, i64), String> = read_all(&p.topics)
        .into_iter()
        .map(|m| ((m.topic.clone(), m.partition, m.offset), m.id()))
        .collect();
    let mut delivered = std::collections::HashSet::new();
    let (mut claims, mut failed) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let spans = loop {
        let spans = spans_of_service(&service, since).await;
        let ids: std::collections::HashSet<String> = spans
            .iter()
            .filter(|s| claims_delivery(s))
            .filter_map(|s| tag(s, "messaging.message.id"))
            .collect();
        if ids.len() >= total || Instant::now() > deadline {
            break spans;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    for span in &spans {
        let id = tag(span, "messaging.message.id").unwrap();
        if claims_delivery(span) {
            assert!(!is_error(span), "{span}");
            let at = (
                tag(span, "messaging.destination.name").unwrap(),
                tag(span, "messaging.destination.partition.id")
                    .unwrap()
                    .parse()
                    .unwrap(),
                tag(span, "messaging.kafka.offset")
                    .unwrap()
                    .parse()
                    .unwrap(),
            );
            assert_eq!(
                committed.get(&at),
                Some(&id),
                "a span claims {id} committed at {at:?}: {span}"
            );
            claims += 1;
            delivered.insert(id);
        } else {
            assert!(is_error(span), "neither delivered nor failed: {span}");
            failed += 1;
        }
    }
    assert_eq!(delivered.len(), total, "every event has a delivered span");
    println!(
        "traces: takeover ({name}): {total} events, {claims} spans claim a commit (each found where it says), {failed} error spans of what was not committed"
    );
}

/// A Jaeger of a test's own (its ports, its run directory; the suite's binary), to stop
/// and start without touching the one the other tests share.
struct PrivateJaeger {
    dir: tempfile::TempDir,
    grpc: u16,
    query: u16,
}

impl PrivateJaeger {
    fn new(grpc: u16, query: u16) -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            grpc,
            query,
        }
    }

    fn services(&self, action: &str) {
        let status = std::process::Command::new(repo_root().join("scripts/services"))
            .args([action, "jaeger"])
            .env("OUTBOX_JAEGER_RUN_DIR", self.dir.path())
            .env("OUTBOX_JAEGER_OTLP_GRPC_PORT", self.grpc.to_string())
            .env("OUTBOX_JAEGER_OTLP_HTTP_PORT", (self.grpc + 1).to_string())
            .env("OUTBOX_JAEGER_QUERY_PORT", self.query.to_string())
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "private Jaeger: {action} failed");
    }

    /// The event ids of the `outbox event` spans it holds for `service`.
    async fn event_ids(&self, service: &str) -> std::collections::HashSet<String> {
        let query = format!("http://127.0.0.1:{}", self.query);
        spans_of_service_at(&query, service, None)
            .await
            .iter()
            .filter_map(|s| tag(s, "messaging.message.id"))
            .collect()
    }
}

impl Drop for PrivateJaeger {
    fn drop(&mut self) {
        self.services("down");
    }
}

/// The spans the router counted as `outcome` so far.
async fn spans_counted(port: u16, outcome: &str) -> f64 {
    let (_, metrics) = http_get(port, "/metrics").await;
    metric(
        &metrics,
        &format!("outbox_router_trace_spans_total{{outcome=\"{outcome}\"}}"),
    )
}

/// The collector stopped for a minute while events keep coming, then started again:
/// streaming does not notice (every event written during the outage is in Kafka within
/// seconds of the last one), the spans of the outage are dropped and counted, one warning
/// says so and one line says when spans reach the collector again; afterwards the new
/// events' spans are in the collector. Every traced event's span is counted once:
/// exported + dropped = events.
#[tokio::test(flavor = "multi_thread")]
async fn a_collector_down_for_a_minute_costs_only_the_spans_of_that_minute() {
    let _settings = SERVER_SETTINGS.read().await;
    services("up", "jaeger");
    let jaeger = PrivateJaeger::new(14417, 16786);
    jaeger.services("up");
    let (_conn, mut setup) = fresh("traces_outage").await;
    let db = setup.db.clone();
    let service = format!("outbox-router-outage-{}", setup.server_id);
    setup.monitor_toml = format!(
        "[tracing]\nenabled = true\nendpoint = \"http://127.0.0.1:{}\"\nservice_name = \"{service}\"\nexport_timeout_secs = 2\n",
        jaeger.grpc
    );
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    let mut router = setup.start_router();
    wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(60)).await;
    let port = setup.monitor_port;

    // Before: every span reaches the collector.
    crate::crash::write_mixed(&db, 0, 200, 20).await;
    assert_eq!(wait_for_ids(&topics, 200, Duration::from_secs(60)), 200);
    let deadline = Instant::now() + Duration::from_secs(30);
    while spans_counted(port, "exported").await < 200.0 {
        assert!(Instant::now() < deadline, "{}", router.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The collector down for a minute; events keep coming.
    jaeger.services("down");
    let mut written = 200;
    let outage = Instant::now();
    while outage.elapsed() < Duration::from_secs(60) {
        crate::crash::write_mixed(&db, written, written + 20, 20).await;
        written += 20;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let last_written = Instant::now();
    assert_eq!(
        wait_for_ids(&topics, written, Duration::from_secs(60)),
        written
    );
    let caught_up = last_written.elapsed();
    assert!(
        caught_up < Duration::from_secs(10),
        "streaming lagged {caught_up:?} behind the writes while the collector was down"
    );
    let dropped = spans_counted(port, "dropped").await;
    assert!(dropped > 0.0, "{}", router.log());
    let log = router.log();
    assert_eq!(
        log.matches("the collector did not take a batch of spans")
            .count()
            + log.matches("the collector did not answer in time").count(),
        1,
        "one warning for the outage:\n{log}"
    );

    // Back: the next events' spans reach it again.
    jaeger.services("up");
    let before = written;
    let deadline = Instant::now() + Duration::from_secs(90);
    while !router.log().contains("spans reach the collector again") {
        crate::crash::write_mixed(&db, written, written + 20, 20).await;
        written += 20;
        assert!(Instant::now() < deadline, "{}", router.log());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    crate::crash::write_mixed(&db, written, written + 200, 20).await;
    written += 200;
    assert_eq!(
        wait_for_ids(&topics, written, Duration::from_secs(60)),
        written
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let exported = spans_counted(port, "exported").await;
        let dropped = spans_counted(port, "dropped").await;
        if exported + dropped == written as f64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "exported {exported} + dropped {dropped} ≠ {written} events\n{}",
            router.log()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let wanted: Vec<String> = (written - 200..written).map(|n| format!("s-{n}")).collect();
    loop {
        let held = jaeger.event_ids(&service).await;
        let missing = wanted.iter().filter(|id| !held.contains(*id)).count();
        if missing == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{missing} of the last 200 events' spans not in the collector"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drain_and_stop(&mut router, &topics, written);
    assert_eq!(check_stream(&topics, written), 0);
    println!(
        "traces: collector down 60 s: {written} events ({} during the outage and until spans came back), all delivered {} ms after the last write; {dropped} spans dropped and counted, the rest exported",
        before - 200,
        caught_up.as_millis()
    );
}
