//! Taking publication over from a polling relay under write load: shadow mode beside the
//! relay, the cutover at the relay's watermark, and the back-out to polling.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio::task::JoinHandle;

use crate::util::*;

/// A background loop that stops when asked and returns how many rows it handled.
struct Looping {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<usize>,
}

impl Looping {
    async fn stop(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.await.unwrap()
    }
}

/// The application: transactions of 5 outbox rows, back to back.
fn writer(db: &str, first: usize) -> Looping {
    let stop = Arc::new(AtomicBool::new(false));
    let (db, halt) = (db.to_string(), stop.clone());
    let handle = tokio::spawn(async move {
        let mut conn = app_conn().await;
        let mut n = first;
        while !halt.load(Ordering::SeqCst) {
            let events: Vec<Ev> = (n..n + 5)
                .map(|i| {
                    Ev::new(
                        format!("h-{i:06}"),
                        "Order",
                        &format!("o{}", i % 7),
                        format!("{{\"n\":{i}}}"),
                    )
                })
                .collect();
            insert_txn(&mut conn, &db, &events).await;
            n += 5;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        n - first
    });
    Looping { stop, handle }
}

/// A polling relay as teams run them: unsent rows in order, produced with the same id
/// header and key, then marked sent. It stops between rounds: whatever it did not mark
/// is past its watermark (`sent = 0`).
fn relay(db: &str, topic: &str) -> Looping {
    let stop = Arc::new(AtomicBool::new(false));
    let (db, topic, halt) = (db.to_string(), topic.to_string(), stop.clone());
    let handle = tokio::spawn(async move {
        let mut conn = app_conn().await;
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", kafka_bootstrap())
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .create()
            .unwrap();
        let mut published = 0;
        while !halt.load(Ordering::SeqCst) {
            let rows: Vec<(String, String, String)> = conn
                .query(format!(
                    "SELECT event_id, aggregate_id, payload FROM {db}.outbox WHERE sent = 0 ORDER BY seq LIMIT 200"
                ))
                .await
                .unwrap();
            if rows.is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            let sends = rows.iter().map(|(id, key, payload)| {
                let headers = OwnedHeaders::new().insert(Header {
                    key: "id",
                    value: Some(id.as_str()),
                });
                producer.send(
                    FutureRecord::to(&topic)
                        .key(key)
                        .payload(payload)
                        .headers(headers),
                    Duration::from_secs(30),
                )
            });
            for sent in futures::future::join_all(sends).await {
                sent.expect("relay produce");
            }
            let ids: Vec<String> = rows.iter().map(|(id, ..)| format!("'{id}'")).collect();
            conn.query_drop(format!(
                "UPDATE {db}.outbox SET sent = 1 WHERE event_id IN ({})",
                ids.join(",")
            ))
            .await
            .unwrap();
            published += rows.len();
        }
        published
    });
    Looping { stop, handle }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

async fn outbox_ids(conn: &mut mysql_async::Conn, db: &str, condition: &str) -> HashSet<String> {
    conn.query::<String, _>(format!(
        "SELECT event_id FROM {db}.outbox WHERE {condition}"
    ))
    .await
    .unwrap()
    .into_iter()
    .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn polling_relay_hands_over_at_its_watermark_with_shadow_and_back_out() {
    let _settings = SERVER_SETTINGS.read().await;
    let (mut conn, mut setup) = fresh("handover").await;
    let db = setup.db.clone();
    conn.query_drop(format!(
        "ALTER TABLE {db}.outbox ADD sent TINYINT NOT NULL DEFAULT 0, ADD seq BIGINT NOT NULL AUTO_INCREMENT UNIQUE KEY"
    ))
    .await
    .unwrap();
    // A first start's own position would be "now": only the watermark covers the rows
    // the relay left.
    setup.start = "latest".into();
    setup.source_toml =
        "snapshot = { watermark = \"sent = 0\" }\nsnapshot_order_by = [\"seq\"]\n".into();
    let live = setup.topic("Order");
    let shadow = format!("shadow.{live}");

    // The relay publishes, the application writes.
    let writing = writer(&db, 0);
    let relaying = relay(&db, &live);
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Shadow: the router publishes the same events to its own topics.
    let mut shadow_router = setup.start_router_with(&[], &["--shadow", "--init"]);
    // Its first record follows its snapshot: rows written from now on it streams.
    wait_for_count(std::slice::from_ref(&shadow), 1, Duration::from_secs(60));
    let since = unix_now() + 1;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let window = [
        "--since".to_string(),
        since.to_string(),
        "--until".into(),
        (since + 2).to_string(),
    ];
    let mut args: Vec<&str> = vec!["reconcile", "--against-shadow", "--grace", "1s", "--json"];
    args.extend(window.iter().map(String::as_str));
    let out = setup.cli(&args);
    let both: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(out.status.success(), "a channel missed events: {both:#}");
    let (l, s) = (
        &both["live"]["topics"][&live],
        &both["shadow"]["topics"][&shadow],
    );
    assert!(
        l["found_once"].as_u64().unwrap() > 0 && l["found_once"] == s["found_once"],
        "{both:#}"
    );
    assert_eq!(both["shadow"]["proven"], true, "{both:#}");
    assert!(shadow_router.stop(Duration::from_secs(30)).success());
    let live_now = read_all(std::slice::from_ref(&live));
    assert!(
        live_now.iter().all(|m| !m.headers.contains_key("type")),
        "the shadow wrote to a live topic"
    );

    // The cutover: the relay stops at its watermark, the router starts there.
    let relayed = relaying.stop().await;
    let mut router = setup.start_router();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let written = writing.stop().await;
    let all_ids = outbox_ids(&mut conn, &db, "TRUE").await;
    assert_eq!(all_ids.len(), written);
    drain_and_stop(&mut router, std::slice::from_ref(&live), written);
    let records = read_all(std::slice::from_ref(&live));
    let mut copies: HashMap<String, Vec<&Msg>> = HashMap::new();
    for m in &records {
        copies.entry(m.id()).or_default().push(m);
    }
    let arrived: HashSet<String> = copies.keys().cloned().collect();
    let lost: Vec<&String> = all_ids.difference(&arrived).collect();
    assert!(lost.is_empty(), "lost at the cutover: {lost:?}");
    for (id, c) in &copies {
        assert!(
            c.iter()
                .all(|m| m.key == c[0].key && m.payload == c[0].payload),
            "{id}: copies differ"
        );
    }
    let by_router = records
        .iter()
        .filter(|m| m.headers.contains_key("type"))
        .count();
    println!(
        "handover: {written} rows, relay published {relayed}, router {by_router}, duplicates {}",
        records.len() - arrived.len()
    );
    assert!(relayed > 0 && by_router > 0);

    // The back-out: the router's events since the cutover again, from the outbox.
    let past_watermark = outbox_ids(&mut conn, &db, "sent = 0").await;
    let printed = setup.cli(&[
        "replay",
        "--since-watermark",
        "--rate",
        "5000",
        "--reason",
        "back to polling",
    ]);
    assert!(printed.status.success(), "{printed:?}");
    let replayed: HashSet<String> = read_all(std::slice::from_ref(&live))
        .iter()
        .filter(|m| m.headers.contains_key("replay"))
        .map(Msg::id)
        .collect();
    assert_eq!(
        replayed, past_watermark,
        "replay --since-watermark selected other rows"
    );
    // Polling again, with the application writing: nothing lost.
    let writing = writer(&db, written);
    let relaying = relay(&db, &live);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let more = writing.stop().await;
    let total = written + more;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !outbox_ids(&mut conn, &db, "sent = 0").await.is_empty()
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    relaying.stop().await;
    let arrived: HashSet<String> = read_all(std::slice::from_ref(&live))
        .iter()
        .map(Msg::id)
        .collect();
    let all_ids = outbox_ids(&mut conn, &db, "TRUE").await;
    assert_eq!(all_ids.len(), total);
    let lost: Vec<&String> = all_ids.difference(&arrived).collect();
    assert!(lost.is_empty(), "lost at the back-out: {lost:?}");
}
