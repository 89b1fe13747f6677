//! Debezium Outbox Event Router options, by their Debezium names, against real Kafka.

use mysql_async::prelude::Queryable;
use mysql_async::Conn;

use crate::util::*;

/// An outbox table with Debezium's default column names plus extra columns.
async fn debezium_table(conn: &mut Conn, db: &str) {
    conn.query_drop(format!(
        "CREATE TABLE {db}.dbz_outbox (
            id VARCHAR(64) PRIMARY KEY, aggregatetype VARCHAR(64), aggregateid VARCHAR(64),
            type VARCHAR(64), payload LONGTEXT, created_at DATETIME(3), version INT, shard INT)"
    ))
    .await
    .unwrap();
}

/// Router settings for `db.dbz_outbox` with the given Event Router options.
fn with_options(setup: &mut RouterSetup, options: &[(&str, &str)]) {
    let table = format!("{}.dbz_outbox", setup.db);
    setup.extra_tables.push(table);
    let mut inline: Vec<String> = options
        .iter()
        .map(|(k, v)| format!("{k:?} = {v:?}"))
        .collect();
    if !options.iter().any(|(k, _)| *k == "route.topic.replacement") {
        inline.push(format!(
            "\"route.topic.replacement\" = \"{}.${{routedByValue}}\"",
            setup.topic_prefix
        ));
    }
    setup.outbox_toml = format!("event_router = {{ {} }}\n", inline.join(", "));
}

/// Defaults: an unchanged Debezium outbox table gives the records Debezium gives — the
/// payload as value, the aggregate id as key, header `id`, nothing else.
#[tokio::test(flavor = "multi_thread")]
async fn debezium_defaults_need_no_table_or_consumer_change() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("dbz_defaults").await;
    let db = setup.db.clone();
    debezium_table(&mut conn, &db).await;
    with_options(&mut setup, &[]);
    setup.start_here(&mut conn).await;
    conn.query_drop(format!(
        "INSERT INTO {db}.dbz_outbox (id, aggregatetype, aggregateid, type, payload) VALUES
         ('d-1', 'Order', 'o-1', 'OrderCreated', '{{\"total\": 5}}'), ('d-2', 'Customer', 'c-1', 'Renamed', '\"x\"')"
    ))
    .await
    .unwrap();
    let topics = vec![setup.topic("Order"), setup.topic("Customer")];
    let mut router = setup.start_router();
    drain_and_stop(&mut router, &topics, 2);
    let msgs = read_all(&topics);
    let order = msgs.iter().find(|m| m.id() == "d-1").expect("d-1");
    assert_eq!(order.topic, setup.topic("Order"));
    assert_eq!(order.key, b"o-1");
    assert_eq!(order.payload.as_deref(), Some(&b"{\"total\": 5}"[..]));
    assert_eq!(
        order.headers.keys().collect::<Vec<_>>(),
        vec!["id"],
        "Debezium adds only the id header"
    );
}

/// Kafka's Java producer (Debezium's) puts a key on partition
/// `toPositive(murmur2(key)) % partitions`; librdkafka's own default hashes with CRC32.
/// The same aggregate must land where Debezium put it, or a switch from Debezium would
/// split an aggregate's events over two partitions.
#[tokio::test(flavor = "multi_thread")]
async fn keys_land_on_the_partitions_the_java_producer_picks() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, setup) = fresh("java_partitions").await;
    let events: Vec<Ev> = (0..60)
        .map(|i| Ev::new(format!("p-{i}"), "Order", &format!("order-{i}"), "{}"))
        .collect();
    insert_txn(&mut conn, &setup.db, &events).await;
    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    drain_and_stop(&mut router, &topics, events.len());
    let msgs = read_all(&topics);
    assert_eq!(msgs.len(), events.len());
    let used: std::collections::HashSet<i32> = msgs.iter().map(|m| m.partition).collect();
    assert_eq!(used.len(), 3, "60 keys over the topic's 3 partitions");
    for m in &msgs {
        let java = (java_murmur2(&m.key) & 0x7fff_ffff) % 3;
        assert_eq!(
            m.partition,
            java,
            "key {:?}",
            String::from_utf8_lossy(&m.key)
        );
    }
}

/// `org.apache.kafka.common.utils.Utils.murmur2`.
fn java_murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Printed by Kafka's own `Utils.murmur2` (kafka-clients 4.1.1, in jshell).
const MURMUR2_VECTORS: &[(&str, i32)] = &[
    ("21", -973932308),
    ("foobar", -790332482),
    ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829),
    (
        "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
        -58897971,
    ),
    ("abc", 479470107),
    ("order-17", 1568318961),
    ("", 275646681),
];

#[test]
fn murmur2_matches_kafka_utils() {
    for (s, expected) in MURMUR2_VECTORS {
        assert_eq!(java_murmur2(s.as_bytes()), *expected, "{s}");
    }
}

/// Additional placements (header with alias, envelope, partition), JSON expansion inside
/// the envelope and the timestamp column.
#[tokio::test(flavor = "multi_thread")]
async fn placements_envelope_expansion_partition_and_timestamp() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("dbz_envelope").await;
    let db = setup.db.clone();
    debezium_table(&mut conn, &db).await;
    with_options(
        &mut setup,
        &[
            (
                "table.fields.additional.placement",
                "type:header:eventType,type:envelope:eventType,version:envelope,shard:partition",
            ),
            ("table.expand.json.payload", "true"),
            ("table.field.event.timestamp", "created_at"),
        ],
    );
    setup.start_here(&mut conn).await;
    conn.query_drop(format!(
        "INSERT INTO {db}.dbz_outbox VALUES
         ('e-1', 'Order', 'o-1', 'OrderCreated', '{{\"total\": 5, \"items\": [1, 2]}}', '2024-02-29 12:30:01.250', 3, 2),
         ('e-2', 'Order', 'o-2', 'OrderNoted', 'not json', '2024-03-01 00:00:00.000', 1, 1)"
    ))
    .await
    .unwrap();
    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    let log = drain_and_stop(&mut router, &topics, 2);
    let msgs = read_all(&topics);
    // Once, under the full suite, e-1 was not read back: its 2024 timestamp had put it
    // past the broker's time retention, which deleted it (scripts/services now keeps
    // records forever). What Kafka holds and the router's log say which it is.
    let e1 = msgs
        .iter()
        .find(|m| m.id() == "e-1")
        .unwrap_or_else(|| panic!("e-1 not read back; Kafka holds {msgs:?}\n{log}"));
    assert_eq!(e1.partition, 2, "partition placement");
    assert_eq!(
        e1.headers.get("eventType").map(Vec::as_slice),
        Some(&b"OrderCreated"[..])
    );
    assert_eq!(e1.timestamp_ms, Some(1_709_209_801_250), "timestamp column");
    let v: serde_json::Value = serde_json::from_slice(e1.payload.as_deref().unwrap()).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"payload": {"total": 5, "items": [1, 2]}, "eventType": "OrderCreated", "version": 3})
    );
    let e2 = msgs.iter().find(|m| m.id() == "e-2").expect("e-2");
    assert_eq!(e2.partition, 1);
    let v: serde_json::Value = serde_json::from_slice(e2.payload.as_deref().unwrap()).unwrap();
    assert_eq!(
        v["payload"], "not json",
        "a payload that is not JSON stays a string"
    );
}

/// Topic regex (matching and not), tombstones for empty payloads, and
/// `table.field.additional.missing = ignore`.
#[tokio::test(flavor = "multi_thread")]
async fn topic_regex_tombstones_and_missing_additional_columns() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("dbz_regex").await;
    let db = setup.db.clone();
    debezium_table(&mut conn, &db).await;
    let prefix = setup.topic_prefix.clone();
    let replacement = format!("{prefix}.${{routedByValue}}");
    with_options(
        &mut setup,
        &[
            ("route.topic.regex", "(?<routedByValue>[a-z]+)_v[0-9]+"),
            ("route.topic.replacement", replacement.as_str()),
            ("route.tombstone.on.empty.payload", "true"),
            ("table.fields.additional.placement", "no_such_column:header"),
            ("table.field.additional.missing", "ignore"),
        ],
    );
    setup.start_here(&mut conn).await;
    let passthrough = format!("{prefix}.raw");
    conn.query_drop(format!(
        "INSERT INTO {db}.dbz_outbox (id, aggregatetype, aggregateid, type, payload) VALUES
         ('r-1', 'order_v2', 'o-1', 'X', '{{}}'), ('r-2', '{passthrough}', 'o-2', 'X', '{{}}'), ('r-3', 'order_v3', 'o-1', 'X', '')"
    ))
    .await
    .unwrap();
    let topics = vec![format!("{prefix}.order"), passthrough.clone()];
    let mut router = setup.start_router();
    drain_and_stop(&mut router, &topics, 3);
    let msgs = read_all(&topics);
    let topic_of = |id: &str| {
        msgs.iter()
            .find(|m| m.id() == id)
            .map(|m| m.topic.clone())
            .unwrap()
    };
    assert_eq!(
        topic_of("r-1"),
        format!("{prefix}.order"),
        "regex group routes"
    );
    assert_eq!(
        topic_of("r-2"),
        passthrough,
        "no match: the value is the topic"
    );
    let tomb = msgs.iter().find(|m| m.id() == "r-3").unwrap();
    assert_eq!(tomb.payload, None, "empty payload becomes a tombstone");
}

/// `table.op.invalid.behavior = fatal` stops on an UPDATE; the default missing-column rule
/// (`error`) makes a row without a placed column invalid.
#[tokio::test(flavor = "multi_thread")]
async fn invalid_operation_fatal_and_missing_additional_column_error() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("dbz_fatal").await;
    let db = setup.db.clone();
    debezium_table(&mut conn, &db).await;
    with_options(&mut setup, &[("table.op.invalid.behavior", "fatal")]);
    setup.start_here(&mut conn).await;
    conn.query_drop(format!("INSERT INTO {db}.dbz_outbox (id, aggregatetype, aggregateid, payload) VALUES ('u-1', 'Order', 'o', '{{}}')"))
        .await
        .unwrap();
    conn.query_drop(format!(
        "UPDATE {db}.dbz_outbox SET payload = '[]' WHERE id = 'u-1'"
    ))
    .await
    .unwrap();
    let mut router = setup.start_router();
    let log = router.expect_failure("a fatal UPDATE");
    assert!(log.contains("table.op.invalid.behavior = fatal"), "{log}");
    assert_eq!(
        read_all(&[setup.topic("Order")]).len(),
        1,
        "the insert before it is delivered"
    );

    let (mut conn, mut setup) = fresh("dbz_missing").await;
    let db = setup.db.clone();
    debezium_table(&mut conn, &db).await;
    with_options(
        &mut setup,
        &[(
            "table.fields.additional.placement",
            "no_such_column:envelope",
        )],
    );
    setup.start_here(&mut conn).await;
    conn.query_drop(format!("INSERT INTO {db}.dbz_outbox (id, aggregatetype, aggregateid, payload) VALUES ('m-1', 'Order', 'o', '{{}}')"))
        .await
        .unwrap();
    let mut router = setup.start_router();
    let log = router.expect_failure("a missing placed column");
    assert!(
        log.contains("no_such_column") && log.contains("event id m-1"),
        "{log}"
    );
}

/// `tracing.span.context.field`: a W3C trace context in the row (bare `traceparent`, or
/// Debezium's properties text) travels as `traceparent` / `tracestate` headers; a row
/// without one, or with an unreadable one, still goes out, without them (and the latter
/// is logged).
#[tokio::test(flavor = "multi_thread")]
async fn trace_context_column_is_propagated_as_w3c_headers() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("dbz_tracing").await;
    let db = setup.db.clone();
    debezium_table(&mut conn, &db).await;
    conn.query_drop(format!(
        "ALTER TABLE {db}.dbz_outbox ADD trace_ctx TEXT NULL"
    ))
    .await
    .unwrap();
    with_options(&mut setup, &[("tracing.span.context.field", "trace_ctx")]);
    setup.start_here(&mut conn).await;
    let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let properties = format!(
        "#Tue Dec 01 10:00:00 UTC 2026\ntraceparent={parent}\ntracestate=rojo\\=00f067aa0ba902b7\n"
    );
    conn.exec_drop(
        format!(
            "INSERT INTO {db}.dbz_outbox (id, aggregatetype, aggregateid, type, payload, trace_ctx) VALUES
             ('t-bare', 'Order', 'o-1', 'X', '{{}}', ?), ('t-props', 'Order', 'o-1', 'X', '{{}}', ?),
             ('t-none', 'Order', 'o-1', 'X', '{{}}', NULL), ('t-bad', 'Order', 'o-1', 'X', '{{}}', 'not a context')"
        ),
        (parent, properties),
    )
    .await
    .unwrap();
    let topics = vec![setup.topic("Order")];
    let mut router = setup.start_router();
    let log = drain_and_stop(&mut router, &topics, 4);
    let msgs = read_all(&topics);
    let header = |id: &str, name: &str| {
        let m = msgs.iter().find(|m| m.id() == id).expect(id);
        m.headers
            .get(name)
            .map(|v| String::from_utf8(v.clone()).unwrap())
    };
    assert_eq!(header("t-bare", "traceparent").as_deref(), Some(parent));
    assert_eq!(header("t-bare", "tracestate"), None);
    assert_eq!(header("t-props", "traceparent").as_deref(), Some(parent));
    assert_eq!(
        header("t-props", "tracestate").as_deref(),
        Some("rojo=00f067aa0ba902b7")
    );
    assert_eq!(header("t-none", "traceparent"), None);
    assert_eq!(header("t-bad", "traceparent"), None);
    assert!(
        log.contains("trace context not propagated") && log.contains("t-bad"),
        "{log}"
    );
}
