//! `import-debezium` turns a realistic Debezium connector config into a working config:
//! the imported router publishes what the Debezium connector would have.

use std::time::Duration;

use crate::util::*;

#[tokio::test(flavor = "multi_thread")]
async fn imported_debezium_config_runs_with_debezium_semantics() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, setup) = fresh("import").await;
    let db = setup.db.clone();
    let prefix = setup.topic_prefix.clone();
    // A secured connector's Kafka password, in Java's JAAS text.
    let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="alice-secret";"#;
    let connector = serde_json::json!({
        "name": "outbox-connector",
        "config": {
            "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
            "tasks.max": "1",
            "database.hostname": "127.0.0.1",
            "database.port": mariadb_port().to_string(),
            "database.user": "cdc",
            "database.password": "cdc-secret",
            "database.server.id": setup.server_id.to_string(),
            "topic.prefix": "shop",
            "table.include.list": format!("{db}\\.outbox"),
            "snapshot.mode": "no_data",
            "schema.history.internal.kafka.bootstrap.servers": kafka_sasl_bootstrap(),
            "schema.history.internal.kafka.topic": "schema-changes.shop",
            "schema.history.internal.producer.sasl.jaas.config": jaas,
            "producer.override.linger.ms": "2",
            "producer.override.security.protocol": "SASL_PLAINTEXT",
            "producer.override.sasl.mechanism": "PLAIN",
            "producer.override.sasl.jaas.config": jaas,
            "transforms": "outbox",
            "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
            "transforms.outbox.table.field.event.id": "event_id",
            "transforms.outbox.table.field.event.key": "aggregate_id",
            "transforms.outbox.route.by.field": "aggregate_type",
            "transforms.outbox.table.fields.additional.placement": "event_type:header:eventType",
            "transforms.outbox.route.topic.replacement": format!("{prefix}.${{routedByValue}}"),
        }
    });
    let dir = setup.dir.path();
    std::fs::write(dir.join("connector.json"), connector.to_string()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-router"))
        .args(["import-debezium", "connector.json"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let toml = String::from_utf8(out.stdout).unwrap();
    let report = String::from_utf8(out.stderr).unwrap();
    for secret in ["cdc-secret", "alice-secret"] {
        assert!(!toml.contains(secret), "{secret} copied:\n{toml}");
        assert!(!report.contains(secret), "{secret} printed:\n{report}");
    }
    for said in [
        "OUTBOX_DB_PASSWORD: database.password",
        "OUTBOX_KAFKA_SASL_PASSWORD: the password in producer.override.sasl.jaas.config",
    ] {
        assert!(report.contains(said), "{report}");
    }
    assert!(
        toml.contains("\"sasl.password\" = \"${env:OUTBOX_KAFKA_SASL_PASSWORD}\"")
            && toml.contains("\"sasl.username\" = \"alice\""),
        "{toml}"
    );
    assert!(
        report.contains("schema.history.internal.kafka.topic: not needed"),
        "{report}"
    );
    assert!(toml.contains("\"linger.ms\" = \"2\""), "{toml}");

    // Run it as imported (plus a private monitor port), then write events.
    let config = dir.join("imported.toml");
    std::fs::write(
        &config,
        format!(
            "{toml}\n[monitor]\nlisten = \"127.0.0.1:{}\"\n",
            setup.monitor_port
        ),
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-router"))
        .args(["--config", "imported.toml", "run", "--init"])
        .current_dir(dir)
        .env("OUTBOX_DB_PASSWORD", "cdc-secret")
        .env("OUTBOX_KAFKA_SASL_PASSWORD", "alice-secret")
        .stderr(std::fs::File::create(dir.join("imported.log")).unwrap())
        .spawn()
        .unwrap();
    wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(30)).await;
    insert_txn(
        &mut conn,
        &db,
        &[
            Ev::new("i-1", "Order", "o-1", "{\"n\":1}"),
            Ev::new("i-2", "Order", "o-2", "{}"),
        ],
    )
    .await;
    let topic = format!("{prefix}.Order");
    let seen = wait_for_count(std::slice::from_ref(&topic), 2, Duration::from_secs(60));
    child.kill().unwrap();
    child.wait().unwrap();
    let log = std::fs::read_to_string(dir.join("imported.log")).unwrap_or_default();
    assert_eq!(seen, 2, "{log}");
    let msgs = read_all(&[topic]);
    let first = msgs.iter().find(|m| m.id() == "i-1").unwrap();
    assert_eq!(first.key, b"o-1");
    assert_eq!(
        first.headers.get("eventType").map(Vec::as_slice),
        Some(&b"OrderHappened"[..])
    );
    assert_eq!(first.payload.as_deref(), Some(&b"{\"n\":1}"[..]));
}

#[test]
fn properties_files_import_too() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("c.properties"),
        "# Debezium MySQL connector\nconnector.class=io.debezium.connector.mysql.MySqlConnector\n\
         database.hostname=db.internal\ndatabase.port=3306\ndatabase.user=debezium\n\
         database.server.id=5400\ntable.include.list=app.outbox_events,app.(a|b)\n\
         database.ssl.mode=verify_identity\ntransforms=router\n\
         transforms.router.type=io.debezium.transforms.outbox.EventRouter\n\
         transforms.router.table.expand.json.payload=true\ntransforms.router.table.bogus=1\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-router"))
        .args(["import-debezium", "c.properties"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let toml = String::from_utf8(out.stdout).unwrap();
    let report = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{report}");
    for line in [
        "host = \"db.internal\"",
        "server_id = 5400",
        "tables = [\"app.outbox_events\"]",
        "tls_mode = \"verify_identity\"",
        "\"table.expand.json.payload\" = \"true\"",
    ] {
        assert!(toml.contains(line), "missing {line:?} in:\n{toml}");
    }
    assert!(
        report.contains("app.(a|b)"),
        "regex table not reported:\n{report}"
    );
    assert!(
        report.contains("table.bogus"),
        "unknown option not reported:\n{report}"
    );
    // The output is a valid config.
    let parsed = outbox_router::config::Config::parse(&toml, std::path::Path::new("imported.toml"));
    assert!(parsed.is_ok(), "{:?}\n{toml}", parsed.err());
}
