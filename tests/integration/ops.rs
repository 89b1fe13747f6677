//! Operator commands on the real servers: prune.

use std::collections::HashSet;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::util::*;

/// A user with what `prune` needs and no more (SELECT, DELETE, INSERT for archives).
fn pruner_user(setup: &mut RouterSetup) {
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
async fn insert_aged(conn: &mut Conn, db: &str, prefix: &str, n: usize, age_days: u32) {
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
    let (mut conn, mut setup) = fresh("replay").await;
    let db = setup.db.clone();
    let topic = setup.topic("Order");
    let audit_topic = format!("{}.audit", setup.topic_prefix);
    setup.extra_toml = format!("[ops]\naudit_topic = \"{audit_topic}\"\n");
    let mut router = setup.start_router();
    let events: Vec<Ev> = (0..30)
        .map(|i| {
            Ev::new(
                format!("r-{i:02}"),
                "Order",
                &format!("o{}", i % 3),
                format!("{{\"n\":{i}}}"),
            )
        })
        .collect();
    for chunk in events.chunks(10) {
        insert_txn(&mut conn, &db, chunk).await;
    }
    assert_eq!(
        wait_for_count(std::slice::from_ref(&topic), 30, Duration::from_secs(60)),
        30
    );

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
    let started = std::time::Instant::now();
    let printed = stdout_ok(
        &setup.cli(&[
            "replay",
            "--aggregate-id",
            "o1",
            "--rate",
            "20",
            "--reason",
            "consumer lost its state",
            "--by",
            "alice",
        ]),
        "replay",
    );
    assert!(
        started.elapsed() >= Duration::from_millis(450),
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
