//! Rows that cannot become records, under each `on_invalid` policy, and config errors.

use std::time::Duration;

use mysql_async::prelude::Queryable;

use crate::util::*;

/// One kind of bad row: schema change first (if any), then the offending INSERT.
struct Case {
    name: &'static str,
    prepare: Option<&'static str>,
    bad_row: &'static str,
    reason: &'static str,
}

const COLS: &str = "(event_id, aggregate_type, aggregate_id, event_type, payload)";

const CASES: &[Case] = &[
    Case {
        name: "null_type",
        prepare: None,
        bad_row: "('bad-1', NULL, 'a', 'X', '{}')",
        reason: "route column \"aggregate_type\" is NULL",
    },
    Case {
        name: "null_key",
        prepare: None,
        bad_row: "('bad-1', 'Order', NULL, 'X', '{}')",
        reason: "key column \"aggregate_id\" is NULL",
    },
    Case {
        name: "empty_topic",
        prepare: None,
        bad_row: "('bad-1', '', 'a', 'X', '{}')",
        reason: "route column \"aggregate_type\" is empty",
    },
    Case {
        name: "illegal_topic",
        prepare: None,
        bad_row: "('bad-1', 'no spaces!', 'a', 'X', '{}')",
        reason: "contains ' '",
    },
    Case {
        name: "too_large",
        prepare: None,
        bad_row: "('bad-1', 'Order', 'a', 'X', REPEAT('x', 8100000))",
        reason: "exceeds the producer's message.max.bytes",
    },
    Case {
        name: "missing_column",
        prepare: Some("ALTER TABLE {t} DROP COLUMN aggregate_id"),
        bad_row: "",
        reason: "mapped column \"aggregate_id\" is missing",
    },
    Case {
        name: "non_utf8_key",
        prepare: Some("ALTER TABLE {t} MODIFY aggregate_id VARBINARY(64) NULL"),
        bad_row: "('bad-1', 'Order', X'FFFE00', 'X', '{}')",
        reason: "key column \"aggregate_id\" is not valid UTF-8",
    },
];

impl Case {
    /// The good rows a policy that goes on delivers: once a column is dropped, every
    /// later row lacks it too, so only the row before the ALTER is good.
    fn good_rows(&self) -> Vec<&'static str> {
        match self.name {
            "missing_column" => vec!["good-1"],
            _ => vec!["good-1", "good-2"],
        }
    }
}

/// The router went on past the bad row and delivered exactly the good ones.
fn assert_went_on(o: &Outcome, case: &Case) {
    assert!(
        o.exit.is_some_and(|e| e.success()),
        "{}: {:?}\n{}",
        case.name,
        o.exit,
        o.log
    );
    assert_eq!(o.delivered, case.good_rows(), "{}", case.name);
}

/// What a run over one case produced.
struct Outcome {
    exit: Option<std::process::ExitStatus>,
    log: String,
    delivered: Vec<String>,
    dead_letters: Vec<Msg>,
    bad_position_file: String,
}

/// Good event, the bad row, good event; runs the router under `policy`.
async fn run_case(case: &Case, policy: &str) -> Outcome {
    let (db, server_id) = unique(&format!("bad_{}_{}", case.name, policy.replace('-', "")));
    let mut conn = app_conn().await;
    outbox_db(&mut conn, &db).await;
    let table = format!("{db}.outbox");
    let mut setup = RouterSetup::new(&db, server_id, binlog_position(&mut conn).await);
    let dlq = format!("{}.dlq", setup.topic_prefix);
    setup.outbox_toml = format!("on_invalid = \"{policy}\"\ndead_letter_topic = \"{dlq}\"\n");
    conn.query_drop(format!(
        "INSERT INTO {table} {COLS} VALUES ('good-1', 'Order', 'a', 'X', '{{}}')"
    ))
    .await
    .unwrap();
    if let Some(sql) = case.prepare {
        conn.query_drop(sql.replace("{t}", &table)).await.unwrap();
    }
    let (file, _) = binlog_position(&mut conn).await;
    if case.name == "missing_column" {
        conn.query_drop(format!(
            "INSERT INTO {table} (event_id, aggregate_type, event_type, payload) VALUES ('bad-1', 'Order', 'X', '{{}}')"
        ))
        .await
        .unwrap();
        conn.query_drop(format!(
            "INSERT INTO {table} (event_id, aggregate_type, event_type, payload) VALUES ('good-2', 'Order', 'X', '{{}}')"
        ))
        .await
        .unwrap();
    } else {
        conn.query_drop(format!(
            "INSERT INTO {table} {COLS} VALUES {}",
            case.bad_row
        ))
        .await
        .unwrap();
        conn.query_drop(format!(
            "INSERT INTO {table} {COLS} VALUES ('good-2', 'Order', 'a', 'X', '{{}}')"
        ))
        .await
        .unwrap();
    }

    let topic = setup.topic("Order");
    let mut router = setup.start_router();
    let exit = if policy == "fail" {
        router.wait(Duration::from_secs(60))
    } else {
        let good = case.good_rows().len() as i64;
        wait_for_count(std::slice::from_ref(&topic), good, Duration::from_secs(60));
        if policy == "dead-letter" {
            wait_for_count(
                std::slice::from_ref(&dlq),
                3 - good,
                Duration::from_secs(30),
            );
        } else {
            // Give the skipped rows time to pass through before stopping.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        Some(router.stop(Duration::from_secs(30)))
    };
    Outcome {
        exit,
        log: router.log(),
        delivered: read_all(&[topic]).iter().map(Msg::id).collect(),
        dead_letters: read_all(&[dlq]),
        bad_position_file: file,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_rows_fail_by_default_naming_event_position_and_reason() {
    let _settings = SERVER_SETTINGS.read().await;
    for case in CASES {
        let o = run_case(case, "fail").await;
        let exit = o
            .exit
            .unwrap_or_else(|| panic!("{}: router did not stop\n{}", case.name, o.log));
        assert!(!exit.success(), "{}: exit {exit}\n{}", case.name, o.log);
        assert!(
            o.log.contains("event id bad-1"),
            "{}: event id not named\n{}",
            case.name,
            o.log
        );
        assert!(
            o.log.contains(case.reason),
            "{}: reason not given\n{}",
            case.name,
            o.log
        );
        assert!(
            o.log
                .contains(&format!("at binlog {}:", o.bad_position_file)),
            "{}: position not named\n{}",
            case.name,
            o.log
        );
        assert_eq!(
            o.delivered,
            vec!["good-1"],
            "{}: nothing after the bad row may pass",
            case.name
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_rows_dead_lettered_with_raw_row_reason_and_event_id() {
    let _settings = SERVER_SETTINGS.read().await;
    for case in CASES {
        let o = run_case(case, "dead-letter").await;
        assert_went_on(&o, case);
        let dead = 3 - case.good_rows().len();
        assert_eq!(
            o.dead_letters.len(),
            dead,
            "{}: dead letters {:?}",
            case.name,
            o.dead_letters
        );
        // Dead letters are keyed by event id, so they spread over the topic's
        // partitions and are read back in no particular order.
        let mut ids: Vec<String> = o.dead_letters.iter().map(Msg::id).collect();
        ids.sort_unstable();
        let expected: &[&str] = if dead == 2 {
            &["bad-1", "good-2"]
        } else {
            &["bad-1"]
        };
        assert_eq!(
            ids, expected,
            "{}: dead letters keep the event id header",
            case.name
        );
        let d = o.dead_letters.iter().find(|d| d.id() == "bad-1").unwrap();
        let v: serde_json::Value = serde_json::from_slice(d.payload.as_deref().unwrap()).unwrap();
        assert!(
            v["reason"].as_str().unwrap().contains(case.reason),
            "{}: {v}",
            case.name
        );
        assert!(
            v["position"]
                .as_str()
                .unwrap()
                .starts_with(&o.bad_position_file),
            "{}: {v}",
            case.name
        );
        assert_eq!(v["event_id"], "bad-1", "{}: {v}", case.name);
        assert_eq!(
            v["row"]["event_id"], "bad-1",
            "{}: raw row missing: {v}",
            case.name
        );
        assert!(o.log.contains("dead-letter"), "{}", case.name);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_rows_skipped_are_logged_and_counted() {
    let _settings = SERVER_SETTINGS.read().await;
    for case in CASES {
        let o = run_case(case, "skip").await;
        assert_went_on(&o, case);
        assert!(o.dead_letters.is_empty(), "{}", case.name);
        assert!(
            o.log.contains("invalid outbox row skipped"),
            "{}: not logged\n{}",
            case.name,
            o.log
        );
        assert!(
            o.log.contains("event id bad-1") && o.log.contains(case.reason),
            "{}\n{}",
            case.name,
            o.log
        );
    }
}

/// Config mistakes stop the router at start, naming the file, the line and the fix.
#[tokio::test(flavor = "multi_thread")]
async fn config_errors_name_file_line_and_fix() {
    let (_conn, mut setup) = fresh("config").await;
    setup.outbox_toml = "bogus_key = 1\n".into();
    let out = setup.cli(&["validate"]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("router.toml") && err.contains("line") && err.contains("bogus_key"),
        "{err}"
    );

    setup.outbox_toml = "on_invalid = 3\n".into();
    let err = String::from_utf8_lossy(&setup.cli(&["validate"]).stderr).to_string();
    assert!(err.contains("line") && err.contains("on_invalid"), "{err}");

    setup.outbox_toml = String::new();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-router"))
        .arg("--config")
        .arg(setup.config_path())
        .args(["run", "--init"])
        .env_remove("IT_CDC_PASSWORD")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("IT_CDC_PASSWORD") && err.contains("not set"),
        "{err}"
    );
    // The database password is read when a command connects: one that reads only the
    // local store runs where the variable is not set.
    let init = setup.cli(&["checkpoint", "init"]);
    assert!(init.status.success(), "{init:?}");
    let show = std::process::Command::new(env!("CARGO_BIN_EXE_outbox-router"))
        .arg("--config")
        .arg(setup.config_path())
        .args(["checkpoint", "show"])
        .env_remove("IT_CDC_PASSWORD")
        .output()
        .unwrap();
    assert!(
        show.status.success(),
        "checkpoint show needs no password: {}",
        String::from_utf8_lossy(&show.stderr)
    );
}

/// A usage error exits 64 (EX_USAGE), never 2, which `status` keeps for CRITICAL as
/// monitoring plugins read it; help still exits 0.
#[test]
fn usage_errors_exit_64_and_help_0() {
    let bad = std::process::Command::new(router_bin())
        .args(["--config", "x.toml", "status", "--no-such-flag"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(64), "{bad:?}");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--no-such-flag"));
    let help = std::process::Command::new(router_bin())
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(help.status.code(), Some(0), "{help:?}");
}

/// Shell completions and the man page come from the clap definitions, without a config.
#[test]
fn completions_and_man_page_are_generated() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(router_bin())
            .args(args)
            .env_remove("OUTBOX_ROUTER_CONFIG")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let bash = run(&["completions", "bash"]);
    assert!(
        bash.contains("outbox-router") && bash.contains("reconcile"),
        "{bash}"
    );
    let zsh = run(&["completions", "zsh"]);
    assert!(zsh.contains("#compdef outbox-router"), "{zsh}");
    let man = run(&["man"]);
    assert!(
        man.contains(".TH outbox-router") && man.contains("checkpoint"),
        "{man}"
    );
}

/// An unroutable row stops the router with a message naming event id and position;
/// events before it are delivered, the checkpoint stays before it.
#[tokio::test(flavor = "multi_thread")]
async fn unroutable_row_stops_with_position_and_event_id() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, setup) = fresh("unroutable").await;
    let db = setup.db.clone();
    let good: Vec<Ev> = (0..5)
        .map(|i| Ev::new(format!("g-{i}"), "Order", "a", "{}"))
        .collect();
    insert_txn(&mut conn, &db, &good).await;
    let before_bad = binlog_position(&mut conn).await;
    conn.query_drop(format!(
        "INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('bad-1', NULL, 'a', 'X', '{{}}')"
    ))
    .await
    .unwrap();
    let after_bad = binlog_position(&mut conn).await;
    insert_txn(&mut conn, &db, &[Ev::new("after-1", "Order", "a", "{}")]).await;

    let mut router = setup.start_router();
    let log = router.expect_failure("an unroutable row");
    assert!(
        log.contains("bad-1"),
        "error does not name the event id:\n{log}"
    );
    assert!(
        log.contains(&format!("{}.outbox", db)),
        "error does not name the table:\n{log}"
    );
    assert!(
        log.contains(&before_bad.0),
        "error does not name the binlog file:\n{log}"
    );
    // Other tests commit in between, so the checkpoint may pass their transactions, but
    // never the bad one.
    let cp = setup.checkpoint().unwrap();
    assert!(
        cp.0 == before_bad.0 && cp.1 >= before_bad.1,
        "checkpoint {cp:?} is before the good events' end {before_bad:?}"
    );
    assert!(
        cp.0 == after_bad.0 && cp.1 < after_bad.1,
        "checkpoint {cp:?} is past the bad transaction ending at {after_bad:?}"
    );
    let msgs = read_all(&[setup.topic("Order")]);
    let ids: Vec<String> = msgs.iter().map(Msg::id).collect();
    assert_eq!(ids, vec!["g-0", "g-1", "g-2", "g-3", "g-4"]);
}
