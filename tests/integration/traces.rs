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
