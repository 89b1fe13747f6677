//! What the router reports about itself and the server: `validate` on wrong binlog
//! settings, `/metrics`, `/ready`, `/health` and `status` over a stream, and the
//! retention runway predicted from the checkpoint's commit time.

use std::time::Duration;

use mysql_async::prelude::Queryable;

use crate::util::*;

/// `validate` names wrong binlog settings with how to fix them.
#[tokio::test(flavor = "multi_thread")]
async fn validate_reports_wrong_binlog_settings() {
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, setup) = fresh("validate").await;
    let _db = setup.db.clone();
    let ok = setup.cli(&["validate"]);
    assert!(
        ok.status.success(),
        "validate on a good server:\n{}",
        String::from_utf8_lossy(&ok.stdout)
    );

    let _restore_meta = RestoreGlobal("binlog_row_metadata", "'FULL'".into());
    let _restore_format = RestoreGlobal("binlog_format", "'ROW'".into());
    conn.query_drop("SET GLOBAL binlog_row_metadata = 'MINIMAL'")
        .await
        .unwrap();
    conn.query_drop("SET GLOBAL binlog_format = 'STATEMENT'")
        .await
        .unwrap();
    let out = setup.cli(&["validate"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("binlog_row_metadata is MINIMAL"), "{text}");
    assert!(text.contains("binlog_format is STATEMENT"), "{text}");
    assert!(text.contains("fix: set binlog_row_metadata=FULL"), "{text}");
    assert!(text.contains("fix: set binlog_format=ROW"), "{text}");
    assert!(!text.contains("cdc-secret"), "password leaked:\n{text}");
}

/// `/metrics`, `/ready`, `/health` and `status` (running, then stopped) report what
/// happened: events per topic, connection, retention, runway, verdict.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_health_and_status_report_the_stream() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, setup) = fresh("metrics").await;
    let db = setup.db.clone();
    let port = setup.monitor_port;
    let mut router = setup.start_router();
    wait_http_ok(port, "/ready", Duration::from_secs(30)).await;
    let events: Vec<Ev> = (0..12)
        .map(|i| Ev::new(format!("e-{i}"), TYPES[i % 2], "a", "{}"))
        .collect();
    insert_txn(&mut conn, &db, &events).await;
    conn.query_drop(format!(
        "UPDATE {db}.outbox SET payload='[]' WHERE event_id='e-0'"
    ))
    .await
    .unwrap();
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    assert_eq!(wait_for_count(&topics, 12, Duration::from_secs(30)), 12);
    tokio::time::sleep(Duration::from_secs(2)).await;

    let (code, text) = http_get(port, "/metrics").await;
    assert_eq!(code, 200);
    assert_eq!(
        metric(&text, "outbox_router_events_acked_total"),
        12.0,
        "{text}"
    );
    let order_topic = format!(
        "outbox_router_events_routed_total{{topic=\"{}\"}}",
        setup.topic("Order")
    );
    assert!(
        text.contains(&format!("{order_topic} 6")),
        "per-topic count missing:\n{text}"
    );
    assert!(
        text.contains("outbox_router_events_ignored_total{reason=\"update\"} 1"),
        "{text}"
    );
    assert_eq!(metric(&text, "outbox_router_connected"), 1.0);
    assert_eq!(
        metric(&text, "outbox_router_binlog_retention_seconds"),
        7200.0
    );
    assert!(metric(&text, "outbox_router_retention_runway_seconds") > 0.0);
    assert!(metric(&text, "outbox_router_checkpoint_offset") > 0.0);
    let (code, health) = http_get(port, "/health").await;
    assert_eq!(code, 200);
    assert!(health.contains("\"alive\":true"), "{health}");
    // The container health check asks the same endpoints through the binary itself.
    for args in [&["health"][..], &["health", "--ready"]] {
        let out = setup.cli(args);
        assert!(out.status.success(), "{args:?}: {out:?}");
    }

    let out = setup.cli(&["status", "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["router"], "running", "{st}");
    assert_eq!(st["retention_secs"], 7200);
    assert_eq!(out.status.code(), Some(0), "{st}");

    assert!(router.stop(Duration::from_secs(30)).success());
    let down = setup.cli(&["health"]);
    assert_eq!(
        down.status.code(),
        Some(1),
        "a stopped router is not healthy: {down:?}"
    );
    let out = setup.cli(&["status", "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["router"], "stopped", "{st}");
    assert_eq!(
        out.status.code(),
        Some(1),
        "a stopped router is a warning: {st}"
    );
    let text = String::from_utf8(setup.cli(&["status"]).stdout).unwrap();
    assert!(text.starts_with("WARNING: router stopped"), "{text}");
    assert!(!text.contains("cdc-secret"), "password leaked:\n{text}");
}

/// With a short retention and a checkpoint whose transaction committed long ago, the
/// runway and the warning / critical verdicts are as predicted, and the budget adds up.
#[tokio::test(flavor = "multi_thread")]
async fn retention_runway_is_predicted_from_checkpoint_time() {
    let _settings = SERVER_SETTINGS.write().await;
    let (db, server_id) = unique("runway");
    let mut conn = app_conn().await;
    outbox_db(&mut conn, &db).await;
    let _restore = RestoreGlobal("binlog_expire_logs_seconds", "7200".into());
    conn.query_drop("SET GLOBAL binlog_expire_logs_seconds = 3600")
        .await
        .unwrap();
    let setup = RouterSetup::new(&db, server_id, binlog_position(&mut conn).await);

    // The transaction's binlog timestamp is 2000 s in the past.
    let now: i64 = conn
        .query_first("SELECT UNIX_TIMESTAMP()")
        .await
        .unwrap()
        .unwrap();
    conn.query_drop(format!("SET TIMESTAMP = {}", now - 2000))
        .await
        .unwrap();
    insert_txn(&mut conn, &db, &[Ev::new("old", "Order", "a", "{}")]).await;
    conn.query_drop("SET TIMESTAMP = DEFAULT").await.unwrap();
    let mut router = setup.start_router();
    assert_eq!(
        wait_for_count(&[setup.topic("Order")], 1, Duration::from_secs(30)),
        1
    );
    let status = router.stop(Duration::from_secs(30));
    assert!(status.success(), "{status}:\n{}", router.log());
    // The checkpoint's file is no longer the one being written: its clock is running.
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();

    let out = setup.cli(&["status", "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runway = st["runway_secs"]
        .as_i64()
        .unwrap_or_else(|| panic!("no runway: {st}"));
    assert!(
        (1550..=1600).contains(&runway),
        "runway {runway}, expected about 3600 - 2000: {st}"
    );
    assert_eq!(st["verdict"], "warning", "1600/3600 = 44 % < 50 %: {st}");
    assert!(
        st["reasons"].to_string().contains("retention runway"),
        "{st}"
    );
    assert_eq!(out.status.code(), Some(1));

    let out = setup.cli(&["status", "--detect-hours", "0.5", "--repair-hours", "1"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(
            "budget:          retention 1 h vs detection 0.5 h + repair 1 h = 1.5 h → 0.5 h short"
        ),
        "{text}"
    );

    conn.query_drop("SET GLOBAL binlog_expire_logs_seconds = 2400")
        .await
        .unwrap();
    let out = setup.cli(&["status", "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["verdict"], "critical", "400/2400 = 17 % < 20 %: {st}");
    assert_eq!(out.status.code(), Some(2));

    // Running again, the router follows the rotation: runway is back to the full retention.
    let mut router = setup.start_router();
    wait_http_ok(setup.monitor_port, "/ready", Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, text) = http_get(setup.monitor_port, "/metrics").await;
    assert_eq!(
        metric(&text, "outbox_router_retention_runway_seconds"),
        2400.0,
        "{text}"
    );
    let status = router.stop(Duration::from_secs(30));
    assert!(status.success(), "{status}:\n{}", router.log());
}
