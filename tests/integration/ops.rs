//! Operator commands on the real servers: prune, replay and audit, reconcile.

use std::collections::HashSet;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

use crate::util::*;

/// A user with what `prune` needs and no more (SELECT, DELETE, INSERT for archives).
pub(crate) fn pruner_user(setup: &mut RouterSetup) {
    root_sql(
        "CREATE USER IF NOT EXISTS 'pruner'@'%' IDENTIFIED BY 'pruner-secret'; \
         GRANT SELECT, DELETE, INSERT ON *.* TO 'pruner'@'%';",
    );
    let secret = setup.dir.path().join("pruner.password");
    std::fs::write(&secret, "pruner-secret\n").unwrap();
    setup.extra_toml = format!(
        "[ops]\nuser = \"pruner\"\npassword_file = \"{}\"\n",
        secret.display()
    );
}

/// Inserts `n` rows `{prefix}-{i}` written `age_days` ago, `per_txn` to a transaction.
pub(crate) async fn insert_aged(conn: &mut Conn, db: &str, prefix: &str, n: usize, age_days: u32) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(50) {
        let values: Vec<String> = chunk
            .iter()
            .map(|i| {
                format!(
                    "('{prefix}-{i}', 'Order', 'o{}', 'Placed', '{{}}', NOW(6) - INTERVAL {age_days} DAY)",
                    i % 7
                )
            })
            .collect();
        conn.query_drop(format!(
            "INSERT INTO {db}.outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at) VALUES {}",
            values.join(", ")
        ))
        .await
        .unwrap();
    }
}

async fn ids_in(conn: &mut Conn, table: &str) -> HashSet<String> {
    conn.query::<String, _>(format!("SELECT event_id FROM {table}"))
        .await
        .unwrap()
        .into_iter()
        .collect()
}

fn with_prefix(ids: &HashSet<String>, prefix: &str) -> usize {
    ids.iter().filter(|i| i.starts_with(prefix)).count()
}

fn stdout_ok(out: &std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn prune_deletes_only_rows_the_checkpoint_has_passed() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("prune").await;
    let db = setup.db.clone();
    let table = format!("{db}.outbox");
    let topic = setup.topic("Order");

    insert_aged(&mut conn, &db, "old", 300, 8).await;
    insert_aged(&mut conn, &db, "young", 200, 0).await;
    let mut router = setup.start_router();
    assert_eq!(
        wait_for_count(std::slice::from_ref(&topic), 500, Duration::from_secs(60)),
        500
    );

    // The streaming user's credentials are not used to delete.
    let out = setup.cli(&["prune", "--older-than", "7d"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ops.user"));
    pruner_user(&mut setup);

    // A transaction with old-looking rows stays open while prune runs: not in its
    // snapshots, so not deleted, though its timestamps qualify.
    let mut long = app_conn().await;
    let mut open = long.start_transaction(Default::default()).await.unwrap();
    open.query_drop(format!(
        "INSERT INTO {table} (event_id, aggregate_type, aggregate_id, event_type, payload, created_at) VALUES ('open-1', 'Order', 'o1', 'Placed', '{{}}', NOW(6) - INTERVAL 9 DAY)"
    ))
    .await
    .unwrap();

    let out = setup.cli(&[
        "prune",
        "--older-than",
        "7d",
        "--batch",
        "70",
        "--rate",
        "5000",
    ]);
    let printed = stdout_ok(&out, "prune");
    assert!(
        printed.contains("deleted 300 row(s) in 5 batch(es)"),
        "{printed}"
    );
    let left = ids_in(&mut conn, &table).await;
    assert_eq!(
        (with_prefix(&left, "old"), with_prefix(&left, "young")),
        (0, 200)
    );
    open.commit().await.unwrap();

    // Rows committed after the checkpoint (the router is stopped): none deleted, and
    // prune says why.
    assert!(router.stop(Duration::from_secs(30)).success());
    insert_aged(&mut conn, &db, "late", 100, 8).await;
    let out = setup.cli(&["prune", "--older-than", "7d", "--wait", "2s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "prune deleted undelivered rows?");
    assert!(stderr.contains("not all provably delivered"), "{stderr}");
    let left = ids_in(&mut conn, &table).await;
    assert_eq!(with_prefix(&left, "late") + with_prefix(&left, "open"), 101);

    // Delivered now: a dry run counts them, then an archiving prune moves them.
    let mut router = setup.start_router();
    assert_eq!(
        wait_for_count(std::slice::from_ref(&topic), 601, Duration::from_secs(60)),
        601
    );
    let printed = stdout_ok(
        &setup.cli(&["prune", "--older-than", "7d", "--dry-run"]),
        "dry run",
    );
    assert!(printed.contains("would delete 101 row(s)"), "{printed}");
    assert_eq!(ids_in(&mut conn, &table).await.len(), 301);
    conn.query_drop(format!("CREATE TABLE {db}.outbox_archive LIKE {table}"))
        .await
        .unwrap();
    let printed = stdout_ok(
        &setup.cli(&["prune", "--older-than", "7d", "--archive", "outbox_archive"]),
        "archive",
    );
    assert!(
        printed.contains("deleted 101 row(s) in 1 batch(es), 101 archived"),
        "{printed}"
    );
    let archived = ids_in(&mut conn, &format!("{db}.outbox_archive")).await;
    assert_eq!(
        (
            with_prefix(&archived, "late"),
            with_prefix(&archived, "open")
        ),
        (100, 1)
    );
    assert_eq!(ids_in(&mut conn, &table).await.len(), 200);

    // The router went on through the DELETEs and published none of them.
    insert_aged(&mut conn, &db, "after", 10, 0).await;
    drain_and_stop(&mut router, std::slice::from_ref(&topic), 611);
    let all = read_all(std::slice::from_ref(&topic));
    let distinct: HashSet<String> = all.iter().map(Msg::id).collect();
    assert_eq!((all.len(), distinct.len()), (611, 611));
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_resends_the_selection_with_its_ids_throttled_and_audited() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("replay").await;
    let db = setup.db.clone();
    let topic = setup.topic("Order");
    let audit_topic = format!("{}.audit", setup.topic_prefix);
    setup.extra_toml = format!("[ops]\naudit_topic = \"{audit_topic}\"\n");
    let mut router = setup.start_router();
    deliver(&mut conn, &db, &topic, "r", 30, 3, 10).await;

    let out = setup.cli(&["replay", "--reason", "no selection"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing selected"));

    // A dry run lists, sends nothing and audits nothing.
    let listed = stdout_ok(
        &setup.cli(&[
            "replay",
            "--event-id",
            "r-03,r-04",
            "--reason",
            "look",
            "--dry-run",
        ]),
        "dry run",
    );
    assert_eq!(
        listed.lines().filter(|l| l.starts_with("r-0")).count(),
        2,
        "{listed}"
    );
    assert!(listed.contains(&format!("r-03\t{topic}\to0")), "{listed}");

    // Aggregate o1 (10 events) at 20/s, beside the running router.
    // Not on a terminal, progress is log lines (here after every step).
    let started = std::time::Instant::now();
    let replayed_out = setup.cli_env(
        &[
            "replay",
            "--aggregate-id",
            "o1",
            "--rate",
            "4",
            "--reason",
            "consumer lost its state",
            "--by",
            "alice",
        ],
        &[("OUTBOX_ROUTER_PROGRESS_SECS", "0")],
    );
    let printed = stdout_ok(&replayed_out, "replay");
    let log = String::from_utf8_lossy(&replayed_out.stderr);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("progress")).collect();
    assert!(
        lines.len() >= 3
            && lines
                .iter()
                .all(|l| l.contains("total=Some(10)") && l.contains("per_sec="))
            && lines.iter().any(|l| l.contains("eta_secs=Some("))
            && lines.last().unwrap().contains("done=10"),
        "progress lines: {lines:#?}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(2000),
        "not throttled"
    );
    assert!(printed.contains("completed — 10 record(s)"), "{printed}");
    insert_txn(&mut conn, &db, &[Ev::new("r-live", "Order", "o1", "{}")]).await;
    drain_and_stop(&mut router, std::slice::from_ref(&topic), 31);

    let all = read_all(std::slice::from_ref(&topic));
    assert_eq!(all.len(), 41, "30 first deliveries, 10 replayed, 1 live");
    let (replayed, first): (Vec<&Msg>, Vec<&Msg>) =
        all.iter().partition(|m| m.headers.contains_key("replay"));
    assert_eq!(replayed.len(), 10);
    let replay_ids: HashSet<&[u8]> = replayed
        .iter()
        .map(|m| m.headers["replay"].as_slice())
        .collect();
    assert_eq!(
        replay_ids.len(),
        1,
        "one replay id on every replayed record"
    );
    for r in &replayed {
        let original = first
            .iter()
            .find(|m| m.id() == r.id())
            .expect("replayed an existing event");
        assert_eq!(
            (&r.key, &r.payload, r.partition),
            (&original.key, &original.payload, original.partition),
            "{} replayed unlike its first delivery",
            r.id()
        );
        assert_eq!(r.key, b"o1");
    }

    // The trail: one replay, who, why, what, how many; started and its outcome.
    let listing = stdout_ok(&setup.cli(&["audit"]), "audit");
    assert_eq!(listing.lines().count(), 1, "{listing}");
    assert!(
        listing.contains("replay by alice: 10 record(s)"),
        "{listing}"
    );
    assert!(
        listing.contains("reason: consumer lost its state"),
        "{listing}"
    );
    assert!(listing.contains("\"aggregate_id\":\"o1\""), "{listing}");
    let json = stdout_ok(&setup.cli(&["audit", "--json"]), "audit --json");
    let entries: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let outcomes: Vec<&str> = entries
        .iter()
        .map(|e| e["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["started", "completed"]);
    let replay_id = std::str::from_utf8(replay_ids.into_iter().next().unwrap()).unwrap();
    assert_eq!(entries[1]["id"], replay_id);
    assert_eq!(
        (
            entries[1]["first_event_id"].as_str(),
            entries[1]["last_event_id"].as_str()
        ),
        (Some("r-01"), Some("r-28"))
    );
    // The same two entries on the audit topic, keyed by the replay id.
    let on_topic = read_all(&[audit_topic]);
    assert_eq!(on_topic.len(), 2);
    assert!(on_topic.iter().all(|m| m.key == replay_id.as_bytes()));
}

/// Writes `n` events `{prefix}-000…` (zero-padded to n's width) over `aggregates`
/// aggregates, `per_txn` to a transaction, and waits until `topic` holds them all.
async fn deliver(
    conn: &mut Conn,
    db: &str,
    topic: &str,
    prefix: &str,
    n: usize,
    aggregates: usize,
    per_txn: usize,
) {
    let width = (n - 1).to_string().len();
    let events: Vec<Ev> = (0..n)
        .map(|i| {
            Ev::new(
                format!("{prefix}-{i:0width$}"),
                "Order",
                &format!("o{}", i % aggregates),
                format!("{{\"n\":{i}}}"),
            )
        })
        .collect();
    for chunk in events.chunks(per_txn) {
        insert_txn(conn, db, chunk).await;
    }
    let topics = [topic.to_string()];
    assert_eq!(
        wait_for_count(&topics, n as i64, Duration::from_secs(60)),
        n as i64
    );
}

/// Produces a record with event id header `id` to `topic`, as a stranger would.
async fn produce(topic: &str, id: &str, key: &[u8], payload: Option<&[u8]>) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .unwrap();
    let mut record = FutureRecord::to(topic)
        .key(key)
        .headers(OwnedHeaders::new().insert(Header {
            key: "id",
            value: Some(id),
        }));
    if let Some(p) = payload {
        record = record.payload(p);
    }
    producer
        .send(record, Duration::from_secs(30))
        .await
        .unwrap();
}

/// `reconcile --json`'s report and exit status.
fn reconcile(setup: &RouterSetup, args: &[&str]) -> (bool, serde_json::Value) {
    let mut all = vec!["reconcile", "--json"];
    all.extend_from_slice(args);
    let out = setup.cli(&all);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "reconcile printed no report ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), report)
}

fn ids(report: &serde_json::Value, kind: &str) -> Vec<String> {
    let mut ids: Vec<String> = report[kind]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn reconcile_finds_exactly_the_holes_made_and_republishes_them() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, setup) = fresh("reconcile").await;
    let db = setup.db.clone();
    let topic = setup.topic("Order");
    let since = unix_secs_ago(60);
    let mut router = setup.start_router();
    deliver(&mut conn, &db, &topic, "c", 200, 10, 20).await;
    let (clean, report) = reconcile(&setup, &["--since", &since]);
    assert!(clean, "{report:#}");
    assert_eq!(report["topics"][&topic]["found_once"], 200, "{report:#}");
    assert_eq!(report["proven"], true);
    // By event id, for tables without a timestamp column.
    let (clean, report) = reconcile(&setup, &["--id-range", "c-000..c-049"]);
    assert!(clean, "{report:#}");
    assert_eq!(report["topics"][&topic]["expected"], 50, "{report:#}");
    assert_eq!(report["topics"][&topic]["found_once"], 50, "{report:#}");

    // Holes: the first 4 records of one partition deleted from Kafka.
    let first = read_all(std::slice::from_ref(&topic));
    let partition = first[0].partition;
    let mut deleted: Vec<String> = first
        .iter()
        .filter(|m| m.partition == partition && m.offset < 4)
        .map(Msg::id)
        .collect();
    deleted.sort();
    assert_eq!(deleted.len(), 4);
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .unwrap();
    let mut upto = TopicPartitionList::new();
    upto.add_partition_offset(&topic, partition, Offset::Offset(4))
        .unwrap();
    let result = admin
        .delete_records(&upto, &AdminOptions::new())
        .await
        .unwrap();
    assert!(
        result.elements().iter().all(|e| e.error().is_ok()),
        "{result:?}"
    );
    // A duplicate, a misrouted copy (payload changed), a record that is no row's.
    let copy = first.iter().find(|m| m.id() == "c-150").unwrap();
    produce(&topic, "c-150", &copy.key, copy.payload.as_deref()).await;
    produce(&topic, "c-151", b"o1", Some(b"{\"n\":-1}")).await;
    produce(&topic, "stranger-1", b"o1", Some(b"{}")).await;

    let (clean, report) = reconcile(&setup, &["--since", &since]);
    assert!(!clean, "holes not seen: {report:#}");
    let counts = &report["topics"][&topic];
    assert_eq!(ids(&report, "missing_ids"), deleted, "{report:#}");
    assert_eq!(ids(&report, "duplicated_ids"), ["c-150"], "{report:#}");
    assert_eq!(ids(&report, "misrouted_ids"), ["c-151"], "{report:#}");
    assert_eq!(
        ids(&report, "not_in_table_ids"),
        ["stranger-1"],
        "{report:#}"
    );
    assert_eq!(
        (
            counts["expected"].as_u64(),
            counts["found_once"].as_u64(),
            counts["in_flight"].as_u64()
        ),
        (Some(200), Some(194), Some(0)),
        "{report:#}"
    );

    // Republished with their ids and audited; then nothing is missing.
    let out = setup.cli(&[
        "reconcile",
        "--since",
        &since,
        "--republish-missing",
        "--reason",
        "records deleted in test",
    ]);
    assert!(!out.status.success(), "the state found was not clean");
    assert!(String::from_utf8_lossy(&out.stderr).contains("republished 4 missing event(s)"));
    let (_, report) = reconcile(&setup, &["--since", &since]);
    assert_eq!(
        ids(&report, "missing_ids"),
        Vec::<String>::new(),
        "{report:#}"
    );
    let again: Vec<String> = read_all(std::slice::from_ref(&topic))
        .iter()
        .filter(|m| m.headers.contains_key("replay"))
        .map(Msg::id)
        .collect();
    let mut again = again;
    again.sort();
    assert_eq!(again, deleted);
    let audit = stdout_ok(&setup.cli(&["audit"]), "audit");
    assert!(
        audit.contains("republish by") && audit.contains("4 record(s)"),
        "{audit}"
    );

    // Rows the router has not delivered (it is stopped) are in flight, not missing.
    assert!(router.stop(Duration::from_secs(30)).success());
    insert_txn(&mut conn, &db, &[Ev::new("c-late", "Order", "o1", "{}")]).await;
    let (_, report) = reconcile(&setup, &["--since", &since, "--wait", "1s"]);
    assert_eq!(report["proven"], false, "{report:#}");
    assert_eq!(report["topics"][&topic]["in_flight"], 1, "{report:#}");
    assert_eq!(
        ids(&report, "missing_ids"),
        Vec::<String>::new(),
        "{report:#}"
    );
}

/// `checkpoint reset` does what its help says in each mode: at-least-once, the next run
/// starts at `source.start` (what was delivered comes again, same event ids);
/// exactly-once, the commit marker still holds the position, so the next run resumes
/// there (nothing again, nothing skipped).
#[tokio::test(flavor = "multi_thread")]
async fn checkpoint_reset_starts_over_at_least_once_and_keeps_the_marker_exactly_once() {
    let help = String::from_utf8(
        std::process::Command::new(router_bin())
            .args(["checkpoint", "reset", "--help"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        help.contains("at-least-once: the next run starts at source.start")
            && help.contains("exactly-once: the commit marker on Kafka still holds the position"),
        "{help}"
    );
    let _settings = SERVER_SETTINGS.read().await;
    for exactly_once in [false, true] {
        let (mut conn, mut setup) = fresh(if exactly_once {
            "reset_eos"
        } else {
            "reset_alo"
        })
        .await;
        let db = setup.db.clone();
        if exactly_once {
            setup.delivery(Some(&exactly_once_delivery(&db, false)));
        }
        let topics = [setup.topic("Order")];
        let batch = |from: usize| -> Vec<Ev> {
            (from..from + 10)
                .map(|i| Ev::new(format!("reset-{i}"), "Order", "a", "{}"))
                .collect()
        };
        // Records read back committed (offsets would count transaction markers too).
        let read_until = |n: usize| {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                let ids: Vec<String> = read_all(&topics).iter().map(Msg::id).collect();
                if ids.len() >= n || std::time::Instant::now() > deadline {
                    return ids;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
        };
        insert_txn(&mut conn, &db, &batch(0)).await;
        let mut router = setup.start_router_with(&[], &["--init"]);
        assert_eq!(read_until(10).len(), 10, "{}", router.log());
        assert!(
            router.stop(Duration::from_secs(30)).success(),
            "{}",
            router.log()
        );

        let out = setup.cli(&["checkpoint", "reset", "--yes"]);
        assert!(out.status.success(), "{out:?}");
        insert_txn(&mut conn, &db, &batch(10)).await;
        let mut router = setup.start_router();
        let expected: usize = if exactly_once { 20 } else { 30 };
        read_until(expected);
        // Time for anything more than expected to arrive.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let log = router.log();
        assert!(router.stop(Duration::from_secs(30)).success(), "{log}");
        let ids: Vec<String> = read_all(&topics).iter().map(Msg::id).collect();
        let distinct: HashSet<&String> = ids.iter().collect();
        assert_eq!(
            distinct.len(),
            20,
            "every event, exactly_once={exactly_once}: {log}"
        );
        assert_eq!(
            ids.len(),
            expected,
            "exactly_once={exactly_once}: records after the reset:\n{log}"
        );
    }
}
