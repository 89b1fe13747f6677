//! The retention runway on managed servers (issue #24): Amazon RDS and Aurora keep
//! binlogs by `binlog retention hours` (`mysql.rds_show_configuration`), not by the
//! server's variables, and purge them within minutes while it is NULL. No managed server
//! is reachable here: the local MariaDB gets the procedures in the shape AWS documents
//! (name, value, description rows), which is what the router reads on RDS, and an
//! RDS-shaped MariaDB (`scripts/services up rds`: its basedir under /rdsdbbin/) is what a
//! least-privilege user sees of RDS.

use crate::util::*;

/// Creates the RDS configuration procedures; drops them again when dropped.
struct RdsProcedures {
    instance: &'static str,
}

impl RdsProcedures {
    fn create(hours: Option<u32>) -> Self {
        Self::create_on("mariadb", hours, "'cdc'@'%'")
    }

    /// On the server in `.local/INSTANCE`, EXECUTE granted to `grantee` (none: "").
    fn create_on(instance: &'static str, hours: Option<u32>, grantee: &str) -> Self {
        let value = hours.map_or("NULL".to_string(), |h| format!("'{h}'"));
        let grant = match grantee {
            "" => String::new(),
            who => format!("; GRANT EXECUTE ON PROCEDURE mysql.rds_show_configuration TO {who}"),
        };
        root_sql_on(instance, &format!(
            "DROP TABLE IF EXISTS mysql.it_rds_configuration; \
             CREATE TABLE mysql.it_rds_configuration (name VARCHAR(100) PRIMARY KEY, value VARCHAR(100), description VARCHAR(300)); \
             INSERT INTO mysql.it_rds_configuration VALUES \
               ('binlog retention hours', {value}, 'binlog retention hours specifies the duration in hours before binary logs are automatically deleted.'), \
               ('source delay', '0', 'source delay specifies replication delay in seconds between current instance and its master.'), \
               ('target delay', '0', 'target delay specifies replication delay in seconds between current instance and its future read-replica.'); \
             DROP PROCEDURE IF EXISTS mysql.rds_show_configuration; \
             CREATE PROCEDURE mysql.rds_show_configuration() SELECT name, value, description FROM mysql.it_rds_configuration; \
             DROP PROCEDURE IF EXISTS mysql.rds_set_configuration; \
             CREATE PROCEDURE mysql.rds_set_configuration(IN setting VARCHAR(100), IN new_value INT) UPDATE mysql.it_rds_configuration SET value = new_value WHERE name = setting\
             {grant}"
        ));
        RdsProcedures { instance }
    }
}

impl Drop for RdsProcedures {
    fn drop(&mut self) {
        root_sql_on(
            self.instance,
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

    // Shorter than the operator's detection + repair budget: validate warns (a risk,
    // not a fault: the router works).
    root_sql("CALL mysql.rds_set_configuration('binlog retention hours', 1)");
    setup.monitor_toml = "detect_hours = 2\nrepair_hours = 4\n".into();
    let text = output(&setup.cli(&["validate"]));
    assert!(
        text.contains("warn  binlog retention: 1.0 h by Amazon RDS")
            && text.contains("no problem found; 1 warning(s) above")
            && text.contains("less than monitor.detect_hours + repair_hours = 6.0 h"),
        "{text}"
    );
}

/// On RDS a careful DBA grants the router `REPLICATION SLAVE, BINLOG MONITOR` and
/// `SELECT` on the outbox's database only: `information_schema.ROUTINES` then hides
/// `mysql.rds_show_configuration`, and the router used to decide it was not on RDS and
/// print `ok    binlog retention: 2.0 h by binlog_expire_logs_seconds` while RDS's NULL
/// setting purges within minutes. RDS is told by its basedir now; the setting it cannot
/// read is "unknown" with the GRANT that fixes it: validate fails, status warns, the
/// runway and retention gauges are absent — never "ok".
#[tokio::test(flavor = "multi_thread")]
async fn rds_with_a_least_privilege_user_is_unknown_never_ok() {
    const RDS: &str = "mariadb-rds";
    let _settings = SERVER_SETTINGS.read().await;
    services("up", "rds");
    let rds_port = mariadb_port() + 2;
    let (db, server_id) = unique("rds_min");
    let mut conn = app_conn_at(rds_port).await;
    outbox_db(&mut conn, &db).await;
    let user = format!("cdc_{server_id}");
    root_sql_on(
        RDS,
        &format!(
            "CREATE USER '{user}'@'%' IDENTIFIED BY 'cdc-secret'; \
             GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{user}'@'%'; \
             GRANT SELECT ON {db}.* TO '{user}'@'%'"
        ),
    );
    let _rds = RdsProcedures::create_on(RDS, None, "");
    let mut setup = RouterSetup::new(&db, server_id, binlog_position(&mut conn).await);
    setup.source_port = rds_port;
    setup.source_toml = format!("user = \"{user}\"\n");

    let out = setup.cli(&["validate"]);
    let text = output(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        !text.contains("ok    binlog retention"),
        "a retention nobody could read was called ok:\n{text}"
    );
    assert!(
        text.contains("FAIL  binlog retention: unknown: Amazon RDS / Aurora `binlog retention hours` cannot be read by this user")
            && text.contains("GRANT EXECUTE ON PROCEDURE mysql.rds_show_configuration"),
        "{text}"
    );

    assert!(setup.cli(&["checkpoint", "init"]).status.success());
    let out = setup.cli(&["status"]);
    let text = output(&out);
    assert_eq!(out.status.code(), Some(1), "unknown is a warning:\n{text}");
    assert!(
        text.contains("retention:       unknown (cannot be read)")
            && text.contains("runway:          unknown (the retention cannot be read)")
            && text.contains("GRANT EXECUTE"),
        "{text}"
    );

    // The running router publishes no runway it cannot know.
    let mut router = setup.start_router();
    let mut body = String::new();
    for _ in 0..100 {
        if let Some((200, b)) = try_http_get(setup.monitor_port, "/status").await {
            body = b;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let st: serde_json::Value = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("/status: {e}: {body}\n{}", router.log()));
    assert_eq!(st["retention_unknown"], true, "{st}");
    assert_eq!(st["verdict"], "warning", "{st}");
    let (_, metrics) = http_get(setup.monitor_port, "/metrics").await;
    for absent in [
        "outbox_router_retention_runway_seconds ",
        "outbox_router_binlog_retention_seconds ",
    ] {
        assert!(
            !metrics.lines().any(|l| l.starts_with(absent)),
            "{absent}present:\n{metrics}"
        );
    }
    assert!(router.stop(std::time::Duration::from_secs(30)).success());

    // Granted, the real setting shows: NULL purges within minutes.
    root_sql_on(
        RDS,
        &format!("GRANT EXECUTE ON PROCEDURE mysql.rds_show_configuration TO '{user}'@'%'"),
    );
    let text = output(&setup.cli(&["validate"]));
    assert!(
        text.contains(
            "FAIL  binlog retention: Amazon RDS / Aurora `binlog retention hours` is NULL"
        ),
        "{text}"
    );
    root_sql_on(RDS, &format!("DROP USER '{user}'@'%'"));
}
