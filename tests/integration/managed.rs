//! The retention runway on managed servers (issue #24): Amazon RDS and Aurora keep
//! binlogs by `binlog retention hours` (`mysql.rds_show_configuration`), not by the
//! server's variables, and purge them within minutes while it is NULL. No managed server
//! is reachable here: the local MariaDB gets the procedures in the shape AWS documents
//! (name, value, description rows), which is what the router reads on RDS.

use crate::util::*;

/// Creates the RDS configuration procedures; drops them again when dropped.
struct RdsProcedures;

impl RdsProcedures {
    fn create(hours: Option<u32>) -> Self {
        let value = hours.map_or("NULL".to_string(), |h| format!("'{h}'"));
        root_sql(&format!(
            "DROP TABLE IF EXISTS mysql.it_rds_configuration; \
             CREATE TABLE mysql.it_rds_configuration (name VARCHAR(100) PRIMARY KEY, value VARCHAR(100), description VARCHAR(300)); \
             INSERT INTO mysql.it_rds_configuration VALUES \
               ('binlog retention hours', {value}, 'binlog retention hours specifies the duration in hours before binary logs are automatically deleted.'), \
               ('source delay', '0', 'source delay specifies replication delay in seconds between current instance and its master.'), \
               ('target delay', '0', 'target delay specifies replication delay in seconds between current instance and its future read-replica.'); \
             DROP PROCEDURE IF EXISTS mysql.rds_show_configuration; \
             CREATE PROCEDURE mysql.rds_show_configuration() SELECT name, value, description FROM mysql.it_rds_configuration; \
             DROP PROCEDURE IF EXISTS mysql.rds_set_configuration; \
             CREATE PROCEDURE mysql.rds_set_configuration(IN setting VARCHAR(100), IN new_value INT) UPDATE mysql.it_rds_configuration SET value = new_value WHERE name = setting; \
             GRANT EXECUTE ON PROCEDURE mysql.rds_show_configuration TO 'cdc'@'%'"
        ));
        RdsProcedures
    }
}

impl Drop for RdsProcedures {
    fn drop(&mut self) {
        root_sql(
            "DROP PROCEDURE IF EXISTS mysql.rds_show_configuration; \
             DROP PROCEDURE IF EXISTS mysql.rds_set_configuration; \
             DROP TABLE IF EXISTS mysql.it_rds_configuration",
        );
    }
}

fn output(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Before, the router read `binlog_expire_logs_seconds` (2 h here) on RDS and reported
/// hours of runway while RDS's NULL `binlog retention hours` purges within minutes.
#[tokio::test(flavor = "multi_thread")]
async fn rds_retention_hours_govern_the_runway() {
    let _settings = SERVER_SETTINGS.write().await;
    let (_, mut setup) = fresh("rds").await;

    assert!(setup.cli(&["checkpoint", "init"]).status.success());
    let plain = output(&setup.cli(&["status"]));
    assert!(plain.contains("binlog_expire_logs_seconds"), "{plain}");

    let _rds = RdsProcedures::create(None);
    let out = setup.cli(&["validate"]);
    let text = output(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains(
            "FAIL  binlog retention: Amazon RDS / Aurora `binlog retention hours` is NULL"
        ) && text.contains("fix: CALL mysql.rds_set_configuration('binlog retention hours', 168)"),
        "{text}"
    );
    let out = setup.cli(&["status"]);
    let text = output(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("binlog retention: Amazon RDS"), "{text}");

    // A router running there counts the setting among the server's problems (which
    // alerts watch) once it has looked, and shows no runway left.
    let mut router = setup.start_router();
    let mut body = String::new();
    for _ in 0..100 {
        if let Some((_, b)) = try_http_get(setup.monitor_port, "/metrics").await {
            body = b;
            if body
                .lines()
                .any(|l| l == "outbox_router_server_settings_problems 1")
            {
                break;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for line in [
        "outbox_router_server_settings_problems 1",
        "outbox_router_retention_runway_seconds 0",
        "outbox_router_binlog_retention_seconds 0",
    ] {
        assert!(
            body.lines().any(|l| l == line),
            "{line}:\n{body}\n{}",
            router.log()
        );
    }
    assert!(router.stop(std::time::Duration::from_secs(30)).success());

    root_sql("CALL mysql.rds_set_configuration('binlog retention hours', 168)");
    let text = output(&setup.cli(&["validate"]));
    assert!(
        text.contains("ok    binlog retention: 168.0 h by Amazon RDS / Aurora"),
        "{text}"
    );
    let text = output(&setup.cli(&["status"]));
    assert!(
        text.contains("604800 s") && text.contains("Amazon RDS"),
        "{text}"
    );

    // Shorter than the operator's detection + repair budget: validate says so.
    root_sql("CALL mysql.rds_set_configuration('binlog retention hours', 1)");
    setup.monitor_toml = "detect_hours = 2\nrepair_hours = 4\n".into();
    let text = output(&setup.cli(&["validate"]));
    assert!(
        text.contains("FAIL  binlog retention: 1.0 h by Amazon RDS")
            && text.contains("less than monitor.detect_hours + repair_hours = 6.0 h"),
        "{text}"
    );
}
