//! `value.format = "avro"`: payloads validated and encoded against `schemas/`, framed as
//! Avro single-object encoding; payloads that do not fit go through `on_invalid`.

use std::time::Duration;

use apache_avro::types::Value;
use apache_avro::Schema;
use mysql_async::prelude::Queryable;

use crate::util::*;

/// The repository's example schemas, parsed together (they may refer to each other).
fn repo_schemas() -> Vec<Schema> {
    let dir = repo_root().join("schemas");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "avsc"))
        .collect();
    files.sort();
    let texts: Vec<String> = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    Schema::parse_list(&texts).unwrap()
}

fn schema_named<'a>(schemas: &'a [Schema], name: &str) -> &'a Schema {
    schemas
        .iter()
        .find(|s| s.name().is_some_and(|n| n.name() == name))
        .unwrap_or_else(|| panic!("no schema {name}"))
}

/// Decodes a single-object encoded value, checking its fingerprint names `schema`.
fn decode_single_object(bytes: &[u8], schema: &Schema) -> serde_json::Value {
    assert_eq!(&bytes[..2], &[0xC3, 0x01], "single-object marker");
    let fingerprint = schema.fingerprint::<apache_avro::rabin::Rabin>().bytes;
    assert_eq!(&bytes[2..10], &fingerprint[..], "schema fingerprint");
    let mut datum = &bytes[10..];
    #[allow(deprecated)] // one call, no reader schema: the simplest decoder
    let value: Value = apache_avro::from_avro_datum(schema, &mut datum, None).unwrap();
    assert!(datum.is_empty(), "trailing bytes after the datum");
    serde_json::Value::try_from(value).unwrap()
}

/// Good payloads are encoded with the schema of their event type (or aggregate type),
/// defaults filled in; payloads with a missing field, an unknown field, a wrong type,
/// no schema at all, or no JSON are dead-lettered with the reason, in order, nothing
/// dropped.
#[tokio::test(flavor = "multi_thread")]
async fn avro_values_follow_their_schema_and_misfits_are_dead_lettered() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("avro").await;
    let db = setup.db.clone();
    let dlq = format!("{}.dlq", setup.topic_prefix);
    setup.outbox_toml = format!("on_invalid = \"dead-letter\"\ndead_letter_topic = \"{dlq}\"\n");
    setup.extra_toml = format!(
        "[value]\nformat = \"avro\"\nschemas = \"{}\"\n",
        repo_root().join("schemas").display()
    );
    let rows = [
        (
            "ok-created",
            "Order",
            "OrderCreated",
            r#"{"orderId":"o-1","customerId":"c-1","total":12.5,"lines":[{"sku":"A","quantity":2}]}"#,
        ),
        (
            "ok-cancelled",
            "Order",
            "OrderCancelled",
            r#"{"orderId":"o-1","reason":null}"#,
        ),
        (
            "ok-by-aggregate",
            "Customer",
            "Renamed",
            r#"{"customerId":"c-1","name":"Zoë"}"#,
        ),
        (
            "bad-missing",
            "Order",
            "OrderCreated",
            r#"{"orderId":"o-2","total":1}"#,
        ),
        (
            "bad-unknown",
            "Order",
            "OrderCancelled",
            r#"{"orderId":"o-3","refund":true}"#,
        ),
        (
            "bad-type",
            "Order",
            "OrderCreated",
            r#"{"orderId":"o-4","customerId":"c","total":"much"}"#,
        ),
        ("bad-no-schema", "Invoice", "InvoiceSent", r#"{"n":1}"#),
        ("bad-not-json", "Order", "OrderCancelled", "orderId=o-5"),
        (
            "ok-last",
            "Order",
            "OrderCancelled",
            r#"{"orderId":"o-6","reason":"late"}"#,
        ),
    ];
    for (id, agg, typ, payload) in rows {
        conn.exec_drop(
            format!("INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?,?,?,?,?)"),
            (id, agg, "agg-1", typ, payload),
        )
        .await
        .unwrap();
    }
    let topics = vec![setup.topic("Order"), setup.topic("Customer"), dlq.clone()];
    let mut router = setup.start_router();
    drain_and_stop(&mut router, &topics, rows.len());

    let schemas = repo_schemas();
    let msgs = read_all(&topics);
    let get = |id: &str| {
        msgs.iter()
            .find(|m| m.id() == id)
            .unwrap_or_else(|| panic!("{id} missing"))
    };
    let created = decode_single_object(
        get("ok-created").payload.as_deref().unwrap(),
        schema_named(&schemas, "OrderCreated"),
    );
    assert_eq!(
        created,
        serde_json::json!({"orderId":"o-1","customerId":"c-1","total":12.5,"currency":"EUR",
            "lines":[{"sku":"A","quantity":2}]}),
        "the default currency is filled in"
    );
    let cancelled = decode_single_object(
        get("ok-last").payload.as_deref().unwrap(),
        schema_named(&schemas, "OrderCancelled"),
    );
    assert_eq!(
        cancelled,
        serde_json::json!({"orderId":"o-6","reason":"late"})
    );
    let customer = get("ok-by-aggregate");
    assert_eq!(customer.topic, setup.topic("Customer"));
    assert_eq!(
        decode_single_object(
            customer.payload.as_deref().unwrap(),
            schema_named(&schemas, "Customer")
        ),
        serde_json::json!({"customerId":"c-1","name":"Zoë"})
    );

    let dead: Vec<&Msg> = msgs.iter().filter(|m| m.topic == dlq).collect();
    let reason = |id: &str| -> String {
        let m = dead
            .iter()
            .find(|m| m.id() == id)
            .unwrap_or_else(|| panic!("{id} not dead-lettered"));
        String::from_utf8(m.headers["reason"].clone()).unwrap()
    };
    assert_eq!(
        dead.len(),
        5,
        "dead letters: {:?}",
        dead.iter().map(|m| m.id()).collect::<Vec<_>>()
    );
    assert!(
        reason("bad-missing").contains("does not fit Avro schema com.example.order.OrderCreated"),
        "{}",
        reason("bad-missing")
    );
    assert!(
        reason("bad-unknown").contains("payload field \"refund\" is not in Avro schema"),
        "{}",
        reason("bad-unknown")
    );
    assert!(
        reason("bad-type").contains("does not fit"),
        "{}",
        reason("bad-type")
    );
    assert!(
        reason("bad-no-schema").contains("no Avro schema named \"InvoiceSent\""),
        "{}",
        reason("bad-no-schema")
    );
    assert!(
        reason("bad-not-json").contains("payload is not JSON"),
        "{}",
        reason("bad-not-json")
    );
}

/// A broken schema directory stops the router at start with the file's problem.
#[tokio::test(flavor = "multi_thread")]
async fn unparsable_schema_fails_at_start() {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, mut setup) = fresh("avro_bad_schema").await;
    let dir = setup.dir.path().join("schemas");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("Broken.avsc"),
        r#"{"type":"record","name":"Broken","fields":[{"name":"x","type":"strin"}]}"#,
    )
    .unwrap();
    setup.extra_toml = format!(
        "[value]\nformat = \"avro\"\nschemas = \"{}\"\n",
        dir.display()
    );
    let mut router = setup.start_router();
    let status = router
        .wait(Duration::from_secs(60))
        .expect("the router must stop on a broken schema");
    let log = router.log();
    assert!(!status.success(), "{log}");
    assert!(log.contains("do not parse"), "{log}");
    assert!(log.contains(&dir.display().to_string()), "{log}");
}
