//! `validate`: everything the router needs from the server and Kafka, each problem with
//! how to fix it.

use std::time::Duration;

use mysql_async::prelude::Queryable;

use crate::config::Config;
use crate::position::TableName;
use crate::source::{self, server};

/// One finding.
#[derive(Debug, Clone)]
pub struct Finding {
    /// What was checked.
    pub check: String,
    /// Passed, passed with a warning, or failed.
    pub verdict: Verdict,
    /// What was found.
    pub detail: String,
    /// How to fix it (empty when ok).
    pub fix: String,
}

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to do.
    Ok,
    /// Works, but should be changed (the router runs).
    Warn,
    /// The router cannot run correctly like this.
    Fail,
}

impl Finding {
    fn ok(check: &str, detail: impl Into<String>) -> Self {
        Self {
            check: check.into(),
            verdict: Verdict::Ok,
            detail: detail.into(),
            fix: String::new(),
        }
    }
    fn warn(check: &str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::Warn,
            fix: fix.into(),
            ..Self::ok(check, detail)
        }
    }
    fn fail(check: &str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            verdict: Verdict::Fail,
            fix: fix.into(),
            ..Self::ok(check, detail)
        }
    }
}

/// A warning per secret written into the config file itself.
pub fn inline_secret_findings(config: &Config) -> Vec<Finding> {
    config
        .inline_secrets
        .iter()
        .map(|key| {
            Finding::warn(
                "secrets",
                format!("{key} is written into the config file"),
                "reference it instead: \"${env:VARIABLE}\" or \"${file:/run/secrets/NAME}\"",
            )
        })
        .collect()
}

/// Runs every check; never stops at the first problem.
pub async fn validate(config: &Config) -> Vec<Finding> {
    let mut out = Vec::new();
    match source::connect(&config.source).await {
        Err(e) => out.push(Finding::fail(
            "source connection",
            e.to_string(),
            "check source.host/port/user and the password variable or file",
        )),
        Ok(mut conn) => {
            out.push(Finding::ok(
                "source connection",
                format!("{}:{}", config.source.host, config.source.port),
            ));
            check_server(&mut conn, config, &mut out).await;
            let _ = conn.disconnect().await;
        }
    }
    out.extend(inline_secret_findings(config));
    let (version, features) = crate::kafka::client_features();
    out.push(Finding::ok(
        "kafka client",
        format!("librdkafka {version}, built with {features}"),
    ));
    match crate::kafka::check_reachable(&config.kafka, Duration::from_secs(10)).await {
        Ok(n) => out.push(Finding::ok(
            "kafka",
            format!(
                "{} answered ({n} broker(s))",
                config.kafka.bootstrap_servers
            ),
        )),
        Err(e) => out.push(Finding::fail(
            "kafka",
            format!("{} did not answer: {e}", config.kafka.bootstrap_servers),
            "check kafka.bootstrap_servers and security properties; is the broker up?",
        )),
    }
    out
}

async fn check_server(conn: &mut mysql_async::Conn, config: &Config, out: &mut Vec<Finding>) {
    match server::settings_problems(conn).await {
        Ok(problems) if problems.is_empty() => out.push(Finding::ok(
            "binlog settings",
            "log_bin=ON binlog_format=ROW binlog_row_image=FULL binlog_row_metadata=FULL",
        )),
        Ok(problems) => {
            for p in problems {
                out.push(Finding::fail("binlog settings", p.what, p.fix));
            }
        }
        Err(e) => out.push(Finding::fail(
            "binlog settings",
            e.to_string(),
            "grant the user access to global variables",
        )),
    }
    match server::variable(conn, "server_id").await {
        Ok(Some(id)) if id == config.source.server_id.to_string() => out.push(Finding::fail(
            "server_id",
            format!("source.server_id {id} equals the server's own server_id"),
            "pick a server_id no other server or replica in the topology uses",
        )),
        Ok(_) => out.push(Finding::ok(
            "server_id",
            format!("replica id {}", config.source.server_id),
        )),
        Err(e) => out.push(Finding::fail("server_id", e.to_string(), "")),
    }
    check_retention(conn, config, out).await;
    check_archive(conn, config, out).await;
    // MariaDB only; the router decodes compressed events, so this is information.
    if let Ok(Some(on)) = server::variable(conn, "log_bin_compress").await {
        let on = on == "1" || on.eq_ignore_ascii_case("ON");
        out.push(Finding::ok(
            "binlog compression",
            match on {
                true => "log_bin_compress=ON: compressed QUERY and rows events are decoded",
                false => "log_bin_compress=OFF",
            },
        ));
    }
    check_grants(conn, out).await;
    match server::outbox_tables(conn, &config.table_patterns()).await {
        Ok(tables) if tables.hidden_by_filters.is_empty() => out.push(Finding::ok(
            "binlog filters",
            "no binlog filter hides an outbox database",
        )),
        Ok(tables) => out.push(Finding::fail(
            "binlog filters",
            tables.hidden_by_filters.join("; "),
            "remove binlog_do_db / binlog_ignore_db for the outbox databases and restart the server",
        )),
        Err(e) => out.push(Finding::fail("binlog filters", e.to_string(), "")),
    }
    for name in &config.outbox.tables {
        let pattern = crate::pattern::Pattern::new(name);
        if !pattern.is_wildcard() {
            match TableName::parse(name) {
                Ok(t) => check_table(conn, config, &t, out).await,
                Err(e) => out.push(Finding::fail(
                    "outbox table",
                    e,
                    "name tables as database.table",
                )),
            }
            continue;
        }
        match server::matching_tables(conn, std::slice::from_ref(&pattern)).await {
            Ok(tables) if tables.is_empty() => out.push(Finding::fail(
                &format!("outbox tables {name}"),
                "no table matches (or no SELECT privilege on them)",
                "create one, or fix the pattern",
            )),
            Ok(tables) => {
                for t in tables {
                    check_table(conn, config, &t, out).await;
                }
            }
            Err(e) => out.push(Finding::fail(
                &format!("outbox tables {name}"),
                e.to_string(),
                "",
            )),
        }
    }
}

async fn check_grants(conn: &mut mysql_async::Conn, out: &mut Vec<Finding>) {
    let grants: Vec<String> = match conn.query("SHOW GRANTS").await {
        Ok(g) => g,
        Err(e) => return out.push(Finding::fail("privileges", e.to_string(), "")),
    };
    let all = grants.join("\n").to_ascii_uppercase();
    let has = |p: &str| all.contains("ALL PRIVILEGES ON *.*") || all.contains(p);
    let mut missing = Vec::new();
    if !has("REPLICATION SLAVE") {
        missing.push("REPLICATION SLAVE");
    }
    if !(has("BINLOG MONITOR") || has("REPLICATION CLIENT") || has("SUPER")) {
        missing.push("REPLICATION CLIENT (MariaDB: BINLOG MONITOR)");
    }
    if missing.is_empty() {
        out.push(Finding::ok("privileges", "replication privileges present"));
    } else {
        out.push(Finding::fail(
            "privileges",
            format!("missing {}", missing.join(", ")),
            "GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO <user> (MariaDB: REPLICATION SLAVE, BINLOG MONITOR), plus SELECT on the outbox tables",
        ));
    }
}

async fn check_table(
    conn: &mut mysql_async::Conn,
    config: &Config,
    t: &TableName,
    out: &mut Vec<Finding>,
) {
    let check = format!("outbox table {t}");
    let cols: Vec<String> = match conn
        .exec(
            "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
            (&t.database, &t.table),
        )
        .await
    {
        Ok(c) => c,
        Err(e) => return out.push(Finding::fail(&check, e.to_string(), "grant SELECT on the table")),
    };
    if cols.is_empty() {
        return out.push(Finding::fail(
            &check,
            "table not found (or no SELECT privilege on it)",
            format!("create it, or GRANT SELECT ON {t} TO <user>"),
        ));
    }
    let m = &config.outbox.columns;
    let required = [&m.event_id, &m.aggregate_type, &m.aggregate_id, &m.payload];
    let missing: Vec<&str> = required
        .into_iter()
        .chain(m.timestamp.as_ref())
        .filter(|c| !cols.iter().any(|have| have == *c))
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        out.push(Finding::ok(&check, format!("columns {}", cols.join(", "))));
    } else {
        out.push(Finding::fail(
            &check,
            format!(
                "mapped column(s) {} not in the table (it has {})",
                missing.join(", "),
                cols.join(", ")
            ),
            "fix [outbox.columns] in the config or add the columns",
        ));
    }
}

/// The retention that governs the server (a managed platform's own setting where it has
/// one) against the operator's detection + repair budget.
/// `source.archive_dir`: which files it holds, and whether they reach the server's oldest
/// file without a gap (else a purge past the checkpoint cannot be bridged from it).
async fn check_archive(conn: &mut mysql_async::Conn, config: &Config, out: &mut Vec<Finding>) {
    const CHECK: &str = "binlog archive";
    let Some(dir) = &config.source.archive_dir else {
        return;
    };
    let Ok(Some(oldest)) = server::binary_logs(conn)
        .await
        .map(|l| l.into_iter().next())
    else {
        return;
    };
    let archive = match source::Archive::open(dir, &oldest.file) {
        Ok(a) => a,
        Err(e) => {
            return out.push(Finding::fail(
                CHECK,
                e.to_string(),
                "check source.archive_dir",
            ))
        }
    };
    let Some((first, last, missing)) = archive.span() else {
        return out.push(Finding::warn(
            CHECK,
            format!("{} holds no {}.* files", dir.display(), oldest.file.base()),
            "copy the server's binlog files there (or run mariadb-binlog --raw --stop-never into it)",
        ));
    };
    let reaches = last.index() + 1 >= oldest.file.index();
    let detail = format!(
        "{} holds {first} to {last}; the server's oldest is {}",
        dir.display(),
        oldest.file
    );
    if !missing.is_empty() || !reaches {
        let gap = if reaches {
            format!(
                "missing: {}",
                missing
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            format!("nothing between {last} and {}", oldest.file)
        };
        out.push(Finding::warn(CHECK, format!("{detail}; {gap}"), "a purge past the checkpoint can only be bridged by a complete range: keep copying every file"));
    } else {
        out.push(Finding::ok(CHECK, detail));
    }
}

async fn check_retention(conn: &mut mysql_async::Conn, config: &Config, out: &mut Vec<Finding>) {
    const CHECK: &str = "binlog retention";
    let retention = match crate::monitor::retention::retention(conn).await {
        Ok(r) => r,
        Err(e) => return out.push(Finding::fail(CHECK, e.to_string(), "")),
    };
    if let Some(problem) = retention.problem {
        let (what, fix) = problem.split_once("; fix: ").unwrap_or((&problem, ""));
        return out.push(Finding::fail(CHECK, what, fix));
    }
    let t = config.monitor.thresholds(None, None);
    let budget = t.detect_secs.zip(t.repair_secs).map(|(d, r)| d + r);
    let hours = |s: u64| format!("{:.1} h", s as f64 / 3600.0);
    match (retention.kept.secs(), budget) {
        (None, _) => out.push(Finding::ok(
            CHECK,
            format!("binlogs never expire ({})", retention.setting),
        )),
        // A risk, not a fault: the router works, and `status` warns the same.
        (Some(secs), Some(need)) if secs < need => out.push(Finding::warn(
            CHECK,
            format!(
                "{} by {}, less than monitor.detect_hours + repair_hours = {}",
                hours(secs),
                retention.setting,
                hours(need)
            ),
            "keep binlogs longer than it takes to notice a stopped router and repair it",
        )),
        (Some(secs), _) => out.push(Finding::ok(
            CHECK,
            format!("{} by {}", hours(secs), retention.setting),
        )),
    }
}
