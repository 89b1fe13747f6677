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
    let (mut conn, setup, dlq) = avro_fresh("avro", None).await;
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
    insert_rows(&mut conn, &setup.db, &rows).await;
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
    let log = router.expect_failure("a broken schema");
    assert!(log.contains("do not parse"), "{log}");
    assert!(log.contains(&dir.display().to_string()), "{log}");
}

/// Registry tests share one registry (Apicurio, in memory) and one restarts it.
static REGISTRY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Takes the registry for one test and brings it up (or down, `up = false`).
async fn take_registry(up: bool) -> tokio::sync::MutexGuard<'static, ()> {
    let guard = REGISTRY.lock().await;
    services(if up { "up" } else { "down" }, "registry");
    guard
}

/// The Confluent-compatible API of the local Apicurio Registry (`scripts/services up
/// registry`).
fn registry_url() -> String {
    let port = std::env::var("OUTBOX_REGISTRY_PORT").unwrap_or_else(|_| "8081".into());
    format!("http://127.0.0.1:{port}/apis/ccompat/v7")
}

async fn registry_get(path: &str) -> serde_json::Value {
    let url = format!("{}/{path}", registry_url());
    let resp = reqwest::get(&url).await.expect("registry answers");
    assert!(resp.status().is_success(), "GET {url}: {}", resp.status());
    resp.json().await.unwrap()
}

/// Decodes a Confluent-framed value (0, schema id, datum) with the schema the registry
/// holds under that id; returns the schema's short name and the value as JSON.
async fn decode_confluent(bytes: &[u8]) -> (u32, String, serde_json::Value) {
    assert_eq!(bytes[0], 0, "Confluent magic byte");
    let id = u32::from_be_bytes(bytes[1..5].try_into().unwrap());
    let answer = registry_get(&format!("schemas/ids/{id}")).await;
    let schema = Schema::parse_str(answer["schema"].as_str().unwrap()).unwrap();
    let mut datum = &bytes[5..];
    #[allow(deprecated)] // one call, no reader schema: the simplest decoder
    let value: Value = apache_avro::from_avro_datum(&schema, &mut datum, None).unwrap();
    assert!(datum.is_empty(), "trailing bytes after the datum");
    let name = schema.name().unwrap().name().to_string();
    (id, name, serde_json::Value::try_from(value).unwrap())
}

/// A fresh outbox and router setup with Avro values from `schemas/`, misfits
/// dead-lettered to the returned topic, and a registry with that subject strategy
/// (`Some("topic" | "record")`) or none (single-object encoding).
async fn avro_fresh(
    name: &str,
    registry_subject: Option<&str>,
) -> (mysql_async::Conn, RouterSetup, String) {
    let (conn, mut setup) = fresh(name).await;
    let dlq = format!("{}.dlq", setup.topic_prefix);
    setup.outbox_toml = format!("on_invalid = \"dead-letter\"\ndead_letter_topic = \"{dlq}\"\n");
    setup.extra_toml = format!(
        "[value]\nformat = \"avro\"\nschemas = \"{}\"\n",
        repo_root().join("schemas").display(),
    );
    if let Some(subject) = registry_subject {
        setup.extra_toml += &format!(
            "registry = {{ url = \"{}\", subject = \"{subject}\" }}\n",
            registry_url()
        );
    }
    (conn, setup, dlq)
}

async fn insert_rows(conn: &mut mysql_async::Conn, db: &str, rows: &[(&str, &str, &str, &str)]) {
    for (id, agg, typ, payload) in rows {
        conn.exec_drop(
            format!("INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?,?,?,?,?)"),
            (id, agg, "agg-1", typ, payload),
        )
        .await
        .unwrap();
    }
}

const CREATED: &str =
    r#"{"orderId":"o-1","customerId":"c-1","total":12.5,"lines":[{"sku":"A","quantity":2}]}"#;
const CANCELLED: &str = r#"{"orderId":"o-1","reason":null}"#;

/// CloudEvents with Avro data (`[value.cloudevents] data_format = "avro"`), in both
/// modes, read by the CloudEvents SDK consumer: `datacontenttype` application/avro,
/// `dataschema` the registry's URL for the schema id the value's framing names (without
/// the credentials of the configured registry URL), the data decoded with the schema
/// fetched from that URL equal to the row; a payload that does not fit its schema is
/// dead-lettered; the registry password is in no output.
#[tokio::test(flavor = "multi_thread")]
async fn cloudevents_carry_avro_data_and_its_schema_url() {
    const CANARY: &str = "canary-registry-5521";
    let _settings = SERVER_SETTINGS.read().await;
    let _registry = take_registry(true).await;
    let rows = [
        ("created", "Order", "OrderCreated", CREATED),
        ("cancelled", "Order", "OrderCancelled", CANCELLED),
        (
            "misfit",
            "Order",
            "OrderCreated",
            r#"{"orderId":"o-2","total":1}"#,
        ),
    ];
    for mode in ["structured", "binary"] {
        let (mut conn, mut setup, dlq) = avro_fresh(&format!("ce_avro_{mode}"), None).await;
        let url = registry_url().replace("http://", &format!("http://reader:{CANARY}@"));
        setup.extra_toml = format!(
            "[value]\nformat = \"cloudevents\"\nschemas = \"{}\"\nregistry = {{ url = \"{url}\" }}\n[value.cloudevents]\nmode = \"{mode}\"\ndata_format = \"avro\"\n",
            repo_root().join("schemas").display(),
        );
        insert_rows(&mut conn, &setup.db, &rows).await;
        let order = setup.topic("Order");
        let mut router = setup.start_router();
        drain_and_stop(&mut router, &[order.clone(), dlq.clone()], rows.len());
        let log = router.log();
        assert!(
            !log.contains(CANARY),
            "the log holds the registry password:\n{log}"
        );

        let events = crate::cloudevents::sdk_read(&order, 2);
        for (event, (id, _, kind, payload)) in events.iter().zip(&rows) {
            let a = &event["attributes"];
            assert_eq!(event["mode"], mode, "{event}");
            assert_eq!(a["id"], *id, "{event}");
            assert_eq!(a["type"], *kind, "{event}");
            assert_eq!(a["datacontenttype"], "application/avro", "{event}");
            assert_eq!(
                a["dataschema"],
                format!("{}/schemas/ids/{}", registry_url(), event["schema_id"]),
                "{event}"
            );
            let mut expected: serde_json::Value = serde_json::from_str(payload).unwrap();
            if *kind == "OrderCreated" {
                expected["currency"] = "EUR".into(); // the schema's default
            }
            assert_eq!(event["data"], expected, "{mode} {id}: {event}");
        }
        assert_ne!(events[0]["schema_id"], events[1]["schema_id"]);
        let dead = read_all(&[dlq]);
        assert_eq!(dead.len(), 1, "{mode}: the misfit is dead-lettered");
        assert_eq!(dead[0].id(), "misfit");
        assert_eq!(
            read_all(&[order]).len(),
            2,
            "{mode}: nothing lost or doubled"
        );
    }
}

/// With a registry (`subject = "topic"`), values carry the Confluent framing: magic
/// byte 0 and the id under which a real registry (Apicurio's Confluent API) holds the
/// schema; each topic's schemas become versions of `<topic>-value`; a misfit is still
/// dead-lettered.
#[tokio::test(flavor = "multi_thread")]
async fn confluent_framing_with_schemas_registered_per_topic() {
    let _settings = SERVER_SETTINGS.read().await;
    let _registry = take_registry(true).await;
    let (mut conn, setup, dlq) = avro_fresh("avro_registry", Some("topic")).await;
    let rows = [
        ("created", "Order", "OrderCreated", CREATED),
        ("cancelled-1", "Order", "OrderCancelled", CANCELLED),
        (
            "renamed",
            "Customer",
            "Renamed",
            r#"{"customerId":"c-1","name":"Zoë"}"#,
        ),
        (
            "misfit",
            "Order",
            "OrderCreated",
            r#"{"orderId":"o-2","total":1}"#,
        ),
        (
            "cancelled-2",
            "Order",
            "OrderCancelled",
            r#"{"orderId":"o-3","reason":"late"}"#,
        ),
    ];
    insert_rows(&mut conn, &setup.db, &rows).await;
    let order = setup.topic("Order");
    let customer = setup.topic("Customer");
    let topics = vec![order.clone(), customer.clone(), dlq.clone()];
    let mut router = setup.start_router();
    drain_and_stop(&mut router, &topics, rows.len());

    let msgs = read_all(&topics);
    assert_eq!(msgs.len(), rows.len(), "no duplicates, nothing lost");
    let mut decoded = std::collections::HashMap::new();
    for m in msgs.iter().filter(|m| m.topic != dlq) {
        decoded.insert(
            m.id(),
            decode_confluent(m.payload.as_deref().unwrap()).await,
        );
    }
    assert_eq!(decoded.len(), 4);
    let (created_id, name, value) = &decoded["created"];
    assert_eq!(name, "OrderCreated");
    assert_eq!(
        value,
        &serde_json::json!({"orderId":"o-1","customerId":"c-1","total":12.5,"currency":"EUR",
            "lines":[{"sku":"A","quantity":2}]})
    );
    let (c1, name, value) = &decoded["cancelled-1"];
    assert_eq!(name, "OrderCancelled");
    assert_eq!(value, &serde_json::json!({"orderId":"o-1","reason":null}));
    let (c2, _, value) = &decoded["cancelled-2"];
    assert_eq!(c1, c2, "one schema, one id");
    assert_ne!(c1, created_id);
    assert_eq!(value, &serde_json::json!({"orderId":"o-3","reason":"late"}));
    assert_eq!(decoded["renamed"].1, "Customer");

    let order_versions = registry_get(&format!("subjects/{order}-value/versions")).await;
    assert_eq!(
        order_versions,
        serde_json::json!([1, 2]),
        "two schemas on the Order topic"
    );
    let customer_versions = registry_get(&format!("subjects/{customer}-value/versions")).await;
    assert_eq!(customer_versions, serde_json::json!([1]));
    let latest = registry_get(&format!("subjects/{order}-value/versions/2")).await;
    assert_eq!(latest["id"].as_u64(), Some(u64::from(*c1)), "{latest}");

    let dead: Vec<&Msg> = msgs.iter().filter(|m| m.topic == dlq).collect();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].id(), "misfit");
}

/// `subject = "record"`: every schema is registered under its full name at start, and
/// the ids in the records are those the registry gives for these subjects.
#[tokio::test(flavor = "multi_thread")]
async fn record_name_subjects_registered_at_start() {
    let _settings = SERVER_SETTINGS.read().await;
    let _registry = take_registry(true).await;
    let (mut conn, setup, _) = avro_fresh("avro_registry_record", Some("record")).await;
    let rows = [
        ("created", "Order", "OrderCreated", CREATED),
        (
            "renamed",
            "Customer",
            "Renamed",
            r#"{"customerId":"c-2","name":"Ann"}"#,
        ),
    ];
    insert_rows(&mut conn, &setup.db, &rows).await;
    let topics = vec![setup.topic("Order"), setup.topic("Customer")];
    let mut router = setup.start_router();
    drain_and_stop(&mut router, &topics, rows.len());

    let subjects = registry_get("subjects").await;
    for full_name in [
        "com.example.order.OrderCreated",
        "com.example.order.OrderCancelled",
        "com.example.customer.Customer",
    ] {
        assert!(
            subjects.as_array().unwrap().iter().any(|s| s == full_name),
            "{full_name} not in {subjects}"
        );
    }
    let msgs = read_all(&topics);
    assert_eq!(msgs.len(), 2);
    for m in &msgs {
        let (id, name, _) = decode_confluent(m.payload.as_deref().unwrap()).await;
        let subject = match name.as_str() {
            "OrderCreated" => "com.example.order.OrderCreated",
            "Customer" => "com.example.customer.Customer",
            other => panic!("unexpected schema {other}"),
        };
        let latest = registry_get(&format!("subjects/{subject}/versions/latest")).await;
        assert_eq!(latest["id"].as_u64(), Some(u64::from(id)), "{latest}");
    }
}

/// A registry that does not answer holds the events back (transient error, resume from
/// the checkpoint) instead of dead-lettering them; once it answers, every event goes out
/// exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn unreachable_registry_holds_events_until_it_answers() {
    let _settings = SERVER_SETTINGS.read().await;
    let _registry = take_registry(false).await;
    let (mut conn, setup, dlq) = avro_fresh("avro_registry_down", Some("topic")).await;
    let rows = [
        ("first", "Order", "OrderCreated", CREATED),
        ("second", "Order", "OrderCancelled", CANCELLED),
        (
            "third",
            "Customer",
            "Renamed",
            r#"{"customerId":"c-3","name":"Bo"}"#,
        ),
    ];
    insert_rows(&mut conn, &setup.db, &rows).await;
    let topics = vec![setup.topic("Order"), setup.topic("Customer"), dlq.clone()];
    let mut router = setup.start_router();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        count(&topics),
        0,
        "nothing may go out without its schema id"
    );
    assert!(
        router.wait(Duration::from_millis(10)).is_none(),
        "the router must keep retrying:\n{}",
        router.log()
    );
    services("up", "registry");
    drain_and_stop(&mut router, &topics, rows.len());
    let log = router.log();
    assert!(
        log.contains("schema registry") && log.contains("transient"),
        "the outage is logged:\n{log}"
    );
    let msgs = read_all(&topics);
    let mut ids: Vec<String> = msgs.iter().map(Msg::id).collect();
    ids.sort();
    assert_eq!(
        ids,
        ["first", "second", "third"],
        "exactly once, none dead-lettered"
    );
    for m in &msgs {
        decode_confluent(m.payload.as_deref().unwrap()).await;
    }
}

/// A registry that refuses a schema (here: incompatible under the subject's `BACKWARD`
/// rule, HTTP 409) stops the router with the subject and the registry's answer, instead
/// of retrying forever or sending anything without an id.
#[tokio::test(flavor = "multi_thread")]
async fn schema_refused_by_the_registry_stops_the_router() {
    let _settings = SERVER_SETTINGS.read().await;
    let _registry = take_registry(true).await;
    let (mut conn, setup, _) = avro_fresh("avro_registry_refused", Some("topic")).await;
    let subject = format!("{}-value", setup.topic("Order"));
    let client = reqwest::Client::new();
    let created = std::fs::read_to_string(repo_root().join("schemas/OrderCreated.avsc")).unwrap();
    for (method, path, body) in [
        (
            reqwest::Method::POST,
            format!("subjects/{subject}/versions"),
            serde_json::json!({ "schema": created }),
        ),
        (
            reqwest::Method::PUT,
            format!("config/{subject}"),
            serde_json::json!({ "compatibility": "BACKWARD" }),
        ),
    ] {
        let resp = client
            .request(method, format!("{}/{path}", registry_url()))
            .header("Content-Type", "application/vnd.schemaregistry.v1+json")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success(), "{path}: {}", resp.status());
    }
    let rows = [("cancelled", "Order", "OrderCancelled", CANCELLED)];
    insert_rows(&mut conn, &setup.db, &rows).await;
    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    let log = router.expect_failure("a refused schema");
    assert!(log.contains("refused the schema"), "{log}");
    assert!(log.contains(&subject), "{log}");
    assert!(log.contains("409"), "{log}");
    assert_eq!(count(&topics), 0, "nothing sent without an id");
    // The checkpoint stayed before the event: once the registry accepts the schema, a
    // restart delivers it. (Comparing positions raced with other tests' transactions
    // committed between reading the position and the insert.)
    let resp = client
        .put(format!("{}/config/{subject}", registry_url()))
        .header("Content-Type", "application/vnd.schemaregistry.v1+json")
        .json(&serde_json::json!({ "compatibility": "NONE" }))
        .send()
        .await
        .unwrap();
    assert!(
        resp.status().is_success(),
        "compatibility NONE: {}",
        resp.status()
    );
    let mut router = setup.start_router();
    drain_and_stop(&mut router, &topics, 1);
}

/// The registry's URL over HTTPS (certificate of the private CA in `.local/tls`).
fn registry_https_url() -> String {
    let port: u16 = std::env::var("OUTBOX_REGISTRY_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(8081);
    format!("https://127.0.0.1:{}/apis/ccompat/v7", port + 1)
}

/// A registry over HTTPS: trusting the private CA (`ca_file`), values carry the ids the
/// registry gave; trusting only the public roots, or another CA, the router stops at
/// once with the TLS failure and the key to fix, rather than retrying forever.
#[tokio::test(flavor = "multi_thread")]
async fn registry_over_https_with_the_private_ca_and_a_wrong_one() {
    let _settings = SERVER_SETTINGS.read().await;
    let _registry = take_registry(true).await;
    let (mut conn, mut setup, dlq) = avro_fresh("avro_https", None).await;
    let base = setup.extra_toml.clone();
    let with_ca = |ca: Option<&str>| {
        let ca = ca
            .map(|c| format!(", ca_file = {:?}", crate::secured_kafka::tls_file(c)))
            .unwrap_or_default();
        format!(
            "{base}registry = {{ url = \"{}\", subject = \"topic\"{ca} }}\n",
            registry_https_url()
        )
    };
    insert_rows(
        &mut conn,
        &setup.db,
        &[("tls-1", "Order", "OrderCreated", CREATED)],
    )
    .await;
    for ca in [None, Some("other-ca.pem")] {
        setup.extra_toml = with_ca(ca);
        let mut router = setup.start_router();
        let log = router.expect_failure("an untrusted registry certificate");
        assert!(
            log.contains("TLS failed")
                && log.contains("UnknownIssuer")
                && log.contains("value.registry.ca_file"),
            "{ca:?}:\n{log}"
        );
    }
    setup.extra_toml = with_ca(Some("ca.pem"));
    let topics = vec![setup.topic("Order"), dlq];
    let mut router = setup.start_router();
    drain_and_stop(&mut router, &topics, 1);
    let msgs = read_all(&topics);
    assert_eq!(msgs.len(), 1);
    let (_, name, _) = decode_confluent(msgs[0].payload.as_deref().unwrap()).await;
    assert_eq!(name, "OrderCreated");
}
