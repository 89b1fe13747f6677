//! Missing topics created through the admin client by pattern rules; outbox tables
//! chosen by pattern across databases.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::util::*;

/// An admin client of the local broker.
pub(crate) fn admin() -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn topics_created_by_rule_and_tables_matched_by_pattern() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("topics").await;
    let db = setup.db.clone();
    for tenant in ["a", "b"] {
        outbox_db(&mut conn, &format!("{db}_t{tenant}")).await;
    }
    setup.extra_tables.push(format!("{db}_t*.outbox"));
    let prefix = setup.topic_prefix.clone();
    setup.extra_toml = format!(
        "[[kafka.topics.rule]]\npattern = \"{prefix}.Order\"\npartitions = 5\nconfig = {{ \"retention.ms\" = \"3600000\" }}\n"
    );
    setup.start_here(&mut conn).await;
    for tenant in ["a", "b"] {
        insert_txn(
            &mut conn,
            &format!("{db}_t{tenant}"),
            &[Ev::new(format!("{tenant}-1"), "Order", tenant, "{}")],
        )
        .await;
    }
    // A table outside the pattern is not read.
    outbox_db(&mut conn, &format!("{db}_other")).await;
    conn.query_drop(format!(
        "INSERT INTO {db}_other.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('x-1', 'Order', 'x', 'X', '{{}}')"
    ))
    .await
    .unwrap();

    let topic = setup.topic("Order");
    let mut router = setup.start_router();
    drain_and_stop(&mut router, std::slice::from_ref(&topic), 2);
    let ids: Vec<String> = read_all(std::slice::from_ref(&topic))
        .iter()
        .map(Msg::id)
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(
        ids.contains(&"a-1".to_string()) && ids.contains(&"b-1".to_string()),
        "{ids:?}"
    );

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .unwrap();
    let md = consumer
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .unwrap();
    assert_eq!(
        md.topics()[0].partitions().len(),
        5,
        "partitions from the rule"
    );
    let admin = admin();
    let configs = admin
        .describe_configs([&ResourceSpecifier::Topic(&topic)], &AdminOptions::new())
        .await
        .unwrap();
    let resource = configs.into_iter().next().unwrap().unwrap();
    let retention = resource.get("retention.ms").and_then(|e| e.value.clone());
    assert_eq!(
        retention.as_deref(),
        Some("3600000"),
        "topic config from the rule"
    );
    assert!(router.log().contains("created topic"), "{}", router.log());
}

/// `source.snapshot = "initial"`: rows already in the outbox are published from one
/// consistent snapshot, and streaming continues from exactly its position.
#[tokio::test(flavor = "multi_thread")]
async fn initial_snapshot_then_stream_without_gap_or_overlap() {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, mut setup) = fresh("snapshot").await;
    let db = setup.db.clone();
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    write_stream(db.clone(), 0, 20, 50, 20).await;
    // created_at orders statements; event ids order rows within one multi-row INSERT.
    setup.source_toml =
        "snapshot = \"initial\"\nsnapshot_order_by = [\"created_at\", \"event_id\"]\n".into();
    // Writes go on while the snapshot is taken.
    let writer = tokio::spawn(write_stream(db.clone(), 20, 20, 50, 20));
    let mut router = setup.start_router();
    writer.await.unwrap();
    let total = 40 * 50;
    let log = drain_and_stop(&mut router, &topics, total);
    assert!(log.contains("initial snapshot published"), "{log}");
    let duplicates = check_stream(&topics, total);
    assert_eq!(
        duplicates, 0,
        "a consistent snapshot neither misses nor repeats"
    );
}

/// A record the broker refuses (over the topic's own `max.message.bytes`, which the
/// router cannot know) stops the router naming that event, not its neighbour; once the
/// topic takes it, a restart delivers it and the rest of its transaction: the checkpoint
/// had not passed it.
#[tokio::test(flavor = "multi_thread")]
async fn record_refused_by_the_broker_stops_the_router_naming_the_event() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("refused").await;
    let prefix = setup.topic_prefix.clone();
    setup.extra_toml = format!(
        "[[kafka.topics.rule]]\npattern = \"{prefix}.Big\"\npartitions = 1\nconfig = {{ \"max.message.bytes\" = \"512\" }}\n"
    );
    setup.start_here(&mut conn).await;
    insert_txn(&mut conn, &setup.db, &[Ev::new("ok-1", "Order", "a", "{}")]).await;
    // Not compressible: lz4 would take a run of one letter under the limit.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let noise: String = (0..4000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect();
    let big = format!("{{\"pad\":\"{noise}\"}}");
    insert_txn(
        &mut conn,
        &setup.db,
        &[
            Ev::new("small-2", "Order", "b", "{}"),
            Ev::new("big-3", "Big", "b", big),
            Ev::new("small-4", "Order", "b", "{}"),
        ],
    )
    .await;
    let topics = [setup.topic("Order"), setup.topic("Big")];
    let mut router = setup.start_router();
    let log = router.expect_failure("a record over the topic's max.message.bytes");
    assert!(log.contains("did not acknowledge event big-3"), "{log}");
    assert!(log.contains(&topics[1]), "{log}");
    let ids = |topics: &[String]| read_all(topics).iter().map(Msg::id).collect::<Vec<_>>();
    assert!(ids(&topics).contains(&"ok-1".to_string()));
    assert!(!ids(&topics).contains(&"big-3".to_string()));

    let admin = admin();
    let raise =
        AlterConfig::new(ResourceSpecifier::Topic(&topics[1])).set("max.message.bytes", "1048588");
    for r in admin
        .alter_configs([&raise], &AdminOptions::new())
        .await
        .unwrap()
    {
        r.unwrap();
    }
    // The controller accepts the change before the broker applies it: a busy broker
    // still refused the record with the old limit.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let described = admin
            .describe_configs(
                [&ResourceSpecifier::Topic(&topics[1])],
                &AdminOptions::new(),
            )
            .await
            .unwrap();
        let resource = described.into_iter().next().unwrap().unwrap();
        let limit = resource
            .get("max.message.bytes")
            .and_then(|e| e.value.clone());
        if limit.as_deref() == Some("1048588") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "limit still {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut router = setup.start_router();
    drain_and_stop(&mut router, &topics, 4);
    let ids = ids(&topics);
    for id in ["ok-1", "small-2", "big-3", "small-4"] {
        assert!(ids.contains(&id.to_string()), "{id} missing: {ids:?}");
    }
    assert_eq!(ids.iter().filter(|i| *i == "big-3").count(), 1, "{ids:?}");
}
