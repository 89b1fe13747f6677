//! A stream of numbered events (`s-0`, `s-1`, …, payload `{"seq": N}`) written over a
//! few aggregate ids, and the check that every one arrived once and in per-key order.

use std::collections::HashSet;

use super::*;

pub const TYPES: [&str; 3] = ["Order", "Payment", "User"];

/// Writes `batches` transactions of `size` events over `keys` aggregate ids; the payload
/// carries a global sequence number so per-key commit order can be checked.
pub async fn write_stream(
    db: String,
    first_batch: usize,
    batches: usize,
    size: usize,
    keys: usize,
) {
    let mut conn = app_conn().await;
    for b in first_batch..first_batch + batches {
        let events: Vec<Ev> = (0..size)
            .map(|i| {
                let seq = b * size + i;
                Ev::new(
                    format!("s-{seq}"),
                    TYPES[seq % 3],
                    &format!("k-{}", seq % keys),
                    format!("{{\"seq\":{seq}}}"),
                )
            })
            .collect();
        insert_txn(&mut conn, &db, &events).await;
    }
}

fn seq_of(m: &Msg) -> u64 {
    let v: serde_json::Value = serde_json::from_slice(m.payload.as_deref().unwrap()).unwrap();
    v["seq"].as_u64().unwrap()
}

/// Lost, duplicate and order checks over everything in the topics of the local broker;
/// returns duplicates.
pub fn check_stream(topics: &[String], expected: usize) -> usize {
    Kafka::local().check_stream(topics, expected)
}

impl Kafka {
    /// Lost, duplicate and order checks over everything in the topics; returns
    /// duplicates.
    pub fn check_stream(&self, topics: &[String], expected: usize) -> usize {
        check_messages(&self.read_all(topics), expected)
    }
}

/// `check_stream` over messages already read (their values resolved, for a claim
/// check).
pub fn check_messages(msgs: &[Msg], expected: usize) -> usize {
    let mut first: HashMap<String, &Msg> = HashMap::new();
    let mut duplicates = 0;
    for m in msgs {
        match first.get(&m.id()) {
            None => {
                first.insert(m.id(), m);
            }
            Some(orig) => {
                duplicates += 1;
                assert_eq!(
                    (&orig.key, &orig.payload, &orig.topic),
                    (&m.key, &m.payload, &m.topic),
                    "duplicate {} differs",
                    m.id()
                );
            }
        }
    }
    let lost: Vec<usize> = (0..expected)
        .filter(|s| !first.contains_key(&format!("s-{s}")))
        .collect();
    assert!(
        lost.is_empty(),
        "{} events lost, first: {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    assert_eq!(first.len(), expected, "unexpected extra event ids");
    // Per key, first occurrences in partition order must follow commit (seq) order.
    let mut seen: HashSet<String> = HashSet::new();
    let mut last_seq: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut by_partition: Vec<&Msg> = msgs.iter().collect();
    by_partition
        .sort_by(|a, b| (&a.topic, a.partition, a.offset).cmp(&(&b.topic, b.partition, b.offset)));
    for m in by_partition {
        if !seen.insert(m.id()) {
            continue;
        }
        let seq = seq_of(m);
        let key = [m.topic.as_bytes(), b"/", &m.key].concat();
        if let Some(prev) = last_seq.insert(key, seq) {
            assert!(
                prev < seq,
                "key {:?} on {}: seq {seq} arrived after {prev}",
                String::from_utf8_lossy(&m.key),
                m.topic
            );
        }
    }
    println!(
        "events={expected} messages={} lost=0 duplicates={duplicates}",
        msgs.len()
    );
    duplicates
}
