//! `value.format = "cloudevents"`: every record of a run decoded by the CloudEvents
//! Python SDK (examples/cloudevents_consumer.py, a real Kafka consumer), in structured
//! and in binary mode; an event without a type goes through `on_invalid`.

use base64::Engine as _;
use mysql_async::prelude::Queryable;
use serde_json::{json, Value};

use crate::util::*;

const CREATED_AT: &str = "2026-01-02 03:04:05.678";

/// An outbox row: event id, event type, payload.
type Row = (&'static str, Option<&'static str>, Option<Vec<u8>>);

/// JSON, text that is not JSON, bytes that are not UTF-8, NULL, and one without a type.
fn rows() -> Vec<Row> {
    vec![
        (
            "ce-json",
            Some("OrderCreated"),
            Some(r#"{"n":1,"name":"Zoë"}"#.into()),
        ),
        (
            "ce-text",
            Some("OrderNoted"),
            Some(b"plain text, not JSON".to_vec()),
        ),
        (
            "ce-bytes",
            Some("OrderScanned"),
            Some(vec![0xff, 0x00, 0xfe, b'{']),
        ),
        ("ce-null", Some("OrderPinged"), None),
        ("ce-untyped", None, Some(b"{}".to_vec())),
    ]
}

/// Runs the router with CloudEvents in `mode` over `rows()`; returns the SDK's reading
/// of every record on the event topic, the records as Kafka holds them, and the
/// dead-letter records.
async fn run(mode: &str) -> (Vec<Value>, Vec<Msg>, Vec<Msg>) {
    let (mut conn, mut setup) = fresh(&format!("ce_{mode}")).await;
    let db = setup.db.clone();
    conn.query_drop(format!(
        "ALTER TABLE {db}.outbox MODIFY event_type VARCHAR(64) NULL, MODIFY payload LONGBLOB NULL"
    ))
    .await
    .unwrap();
    setup.start_here(&mut conn).await;
    let dlq = format!("{}.dlq", setup.topic_prefix);
    setup.outbox_toml = format!("on_invalid = \"dead-letter\"\ndead_letter_topic = \"{dlq}\"\n");
    setup.columns_toml = "timestamp = \"created_at\"\n".into();
    setup.extra_toml = format!(
        "[value]\nformat = \"cloudevents\"\n[value.cloudevents]\nmode = \"{mode}\"\nsource = \"/shop/${{database}}/${{table}}/${{aggregate_type}}\"\n"
    );
    for (id, kind, payload) in rows() {
        conn.exec_drop(
            format!("INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at) VALUES (?, 'Order', 'order-7', ?, ?, ?)"),
            (id, kind, payload, CREATED_AT),
        )
        .await
        .unwrap();
    }
    let topic = setup.topic("Order");
    let mut router = setup.start_router();
    let topics = [topic.clone(), dlq.clone()];
    drain_and_stop(&mut router, &topics, rows().len());
    let decoded = sdk_read(&topic, 4);
    (decoded, read_all(&[topic]), read_all(&[dlq]))
}

/// The first `count` records of `topic` as the CloudEvents SDK reads them
/// (examples/cloudevents_consumer.py, a JSON line each).
pub(crate) fn sdk_read(topic: &str, count: usize) -> Vec<Value> {
    let output = std::process::Command::new(repo_root().join(".local/venv/bin/python"))
        .arg(repo_root().join("examples/cloudevents_consumer.py"))
        .args(["--bootstrap", &kafka_bootstrap(), "--topic", topic])
        .args(["--count", &count.to_string(), "--timeout-secs", "60"])
        .output()
        .expect(
            "run examples/cloudevents_consumer.py (scripts/services deps installs its packages)",
        );
    assert!(
        output.status.success(),
        "the SDK consumer failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// What the SDK must read for each event of `rows()` (the untyped one excepted).
fn expected_data(mode: &str, payload: Option<&[u8]>) -> Value {
    let b64 = |b: &[u8]| json!({ "base64": base64::engine::general_purpose::STANDARD.encode(b) });
    match payload {
        None => Value::Null,
        Some(p) => match serde_json::from_slice::<Value>(p) {
            Ok(json) => json,
            // Structured mode puts bytes that are not JSON in data_base64; binary mode
            // leaves them in the value, where the SDK makes text of what is UTF-8.
            Err(_) if mode == "binary" => match std::str::from_utf8(p) {
                Ok(text) => Value::String(text.into()),
                Err(_) => b64(p),
            },
            Err(_) => b64(p),
        },
    }
}

/// Both content modes, read by the SDK: every attribute from the outbox row (id = event
/// id, type = event type, subject and partitionkey = aggregate id, source from its
/// template, time = the timestamp column), the data byte for byte; the record keeps its
/// key and the event id header; the event without a type is dead-lettered with the
/// reason.
#[tokio::test(flavor = "multi_thread")]
async fn cloudevents_in_both_modes_read_back_by_the_sdk() {
    let _settings = SERVER_SETTINGS.read().await;
    for mode in ["structured", "binary"] {
        let (decoded, records, dead) = run(mode).await;
        assert_eq!(decoded.len(), 4, "{mode}: {decoded:?}");
        for ((id, kind, payload), event) in rows().iter().zip(&decoded) {
            let a = &event["attributes"];
            assert_eq!(event["mode"], mode, "{event}");
            assert_eq!(a["specversion"], "1.0", "{event}");
            assert_eq!(a["id"], *id, "{event}");
            assert_eq!(a["type"], kind.unwrap(), "{event}");
            assert_eq!(a["subject"], "order-7", "{event}");
            assert_eq!(a["partitionkey"], "order-7", "{event}");
            assert_eq!(a["datacontenttype"], "application/json", "{event}");
            assert_eq!(a["time"], "2026-01-02T03:04:05.678000+00:00", "{event}");
            let source = a["source"].as_str().unwrap();
            assert!(
                source.starts_with("/shop/ce_") && source.ends_with("/outbox/Order"),
                "{event}"
            );
            assert_eq!(
                event["data"],
                expected_data(mode, payload.as_deref()),
                "{mode} {id}: {event}"
            );
        }
        assert_eq!(records.len(), 4);
        for (m, (id, _, _)) in records.iter().zip(rows()) {
            assert_eq!(m.id(), id, "the event id header stays");
            assert_eq!(m.key, b"order-7", "the key stays the aggregate id");
        }
        assert_eq!(dead.len(), 1, "{mode}: the untyped event is dead-lettered");
        let reason = String::from_utf8_lossy(&dead[0].headers["reason"]).into_owned();
        assert_eq!(dead[0].id(), "ce-untyped");
        assert!(reason.contains("CloudEvent needs a type"), "{reason}");
    }
}

/// An empty source template is refused by `validate` and by `run`, naming the key.
#[tokio::test(flavor = "multi_thread")]
async fn an_empty_cloudevents_source_is_refused_at_start() {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, mut setup) = fresh("ce_empty").await;
    setup.extra_toml =
        "[value]\nformat = \"cloudevents\"\n[value.cloudevents]\nsource = \" \"\n".into();
    for command in ["validate", "run"] {
        let out = setup.cli(&[command]);
        let text = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{command}: {text}");
        assert!(
            text.contains("value.cloudevents.source is empty"),
            "{command}: {text}"
        );
    }
}
