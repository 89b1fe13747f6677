//! Where an event went, by its id: the outbox row (every outbox table is asked), the
//! record it became (topic, key, headers, as the router would route it now), and that
//! record found in Kafka without reading whole topics — the key gives the partition
//! (the producer's murmur2 partitioner, as Java's), the row's time the offset to start
//! from — or on the dead-letter topic. The console's event lookup.

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

use super::table::{read_as_records, TableRows};
use super::PipelineError;
use crate::config::Config;
use crate::route::Record;
use crate::source::snapshot::RowFilter;
use crate::source::{self, server};

/// Records read past the start at most, per partition asked.
const MAX_SCAN: u64 = 200_000;

/// How far before the row's time a search starts: the row's time is the application's
/// clock before its commit, the record's the server's at the commit.
const MARGIN_MS: i64 = 5 * 60 * 1000;

/// How far past the row's time a search goes before it gives up.
const AFTER_MS: i64 = 30 * 60 * 1000;

/// One outbox row of the id, and where its record is.
#[derive(Debug, Clone, Serialize)]
pub struct Found {
    pub table: String,
    pub aggregate_type: Option<String>,
    pub aggregate_id: String,
    pub event_type: Option<String>,
    /// The row's time (the mapped timestamp column), ms since the epoch.
    pub row_time_ms: Option<i64>,
    /// Where its record goes now.
    pub topic: String,
    /// Why the row went to the dead-letter topic, when it cannot be a record.
    pub dead_letter: Option<String>,
    /// The record in Kafka, when found.
    pub record: Option<Located>,
    /// Where it was looked for, and why it was not found.
    pub searched: String,
}

/// A record found in Kafka.
#[derive(Debug, Clone, Serialize)]
pub struct Located {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: Option<i64>,
    /// Headers as text (bytes that are not UTF-8 shown lossily).
    pub headers: BTreeMap<String, String>,
    /// The claim check's object, when the value is one.
    pub claim_check: Option<String>,
}

/// Kafka's default partitioner for keyed records (librdkafka `murmur2_random`, Java's).
pub fn partition_of(key: &[u8], partitions: i32) -> i32 {
    ((murmur2::murmur2(key, murmur2::KAFKA_SEED) & 0x7fff_ffff) % partitions as u32) as i32
}

/// Finds `event_id` in `config`'s outbox tables and in Kafka. No row: `Ok(empty)`.
pub async fn find(config: &Config, event_id: &str) -> Result<Vec<Found>, PipelineError> {
    let mut conn = source::connect(&config.source).await?;
    let flavor = server::flavor(&mut conn).await?;
    let position = server::current_position(&mut conn, flavor).await?;
    let rules = config
        .rules()
        .map_err(crate::pipeline::PipelineError::Rules)?;
    let filter = RowFilter::default().one_of(&rules.event_id, &[event_id.to_string()]);
    let mut rows = TableRows::new(filter, &position);
    let mut records: Vec<Record> = Vec::new();
    read_as_records(config, &mut conn, &mut rows, |r: &Record| {
        records.push(r.clone())
    })
    .await?;
    let partitioner_is_default = config
        .kafka
        .properties
        .get("partitioner")
        .is_none_or(|p| p == "murmur2_random" || p == "murmur2");
    let row_time = rules.timestamp.is_some();
    let kafka = config.kafka.clone();
    let dead_letters = config.outbox.dead_letter_topic.clone();
    let (header, id) = (config.route.event_id_header.clone(), event_id.to_string());
    let found = tokio::task::spawn_blocking(move || {
        records
            .iter()
            .map(|r| {
                let id = (header.as_str(), id.as_str());
                locate(
                    &kafka,
                    r,
                    id,
                    row_time,
                    partitioner_is_default,
                    &dead_letters,
                )
            })
            .collect::<Vec<Found>>()
    })
    .await
    .map_err(|e| PipelineError::TaskFailed {
        task: "event lookup",
        reason: e.to_string(),
    })?;
    Ok(found)
}

fn locate(
    kafka: &crate::kafka::KafkaConfig,
    r: &Record,
    id: (&str, &str),
    row_time: bool,
    default_partitioner: bool,
    dead_letters: &str,
) -> Found {
    // A dead letter's time is when it was read, not the row's: its topic is read from
    // the start (dead-letter topics are small; `MAX_SCAN` bounds it).
    let dead_letter = !dead_letters.is_empty() && &*r.topic == dead_letters;
    let since = (row_time && !dead_letter).then_some(r.timestamp_ms);
    let mut searched = Vec::new();
    let mut record = search(
        kafka,
        &r.topic,
        &r.key,
        r.partition,
        id,
        since,
        default_partitioner,
        &mut searched,
    );
    if record.is_none() && !dead_letters.is_empty() && !dead_letter {
        record = search(
            kafka,
            dead_letters,
            &r.key,
            None,
            id,
            since,
            false,
            &mut searched,
        );
    }
    Found {
        table: r.event.table.to_string(),
        aggregate_type: r.event.aggregate_type.as_deref().map(str::to_string),
        // A dead letter is keyed by its event id: its row's aggregate is not known here.
        aggregate_id: match dead_letter {
            true => String::new(),
            false => String::from_utf8_lossy(&r.key).into_owned(),
        },
        event_type: r
            .headers
            .iter()
            .find(|(k, _)| k == "eventType" || k == "type")
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned()),
        row_time_ms: since,
        topic: r.topic.to_string(),
        dead_letter: dead_letter.then(|| {
            r.headers
                .iter()
                .find(|(k, _)| k == "reason")
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        }),
        record,
        searched: searched.join("; "),
    }
}

/// Looks for the record with event id `id` on `topic`: the key's partition (or every
/// one), from `since` − margin (or the start) up to `since` + 30 min, `MAX_SCAN`
/// records at most each.
#[allow(clippy::too_many_arguments)]
fn search(
    kafka: &crate::kafka::KafkaConfig,
    topic: &str,
    key: &[u8],
    explicit: Option<i32>,
    (id_header, id): (&str, &str),
    since: Option<i64>,
    by_key: bool,
    searched: &mut Vec<String>,
) -> Option<Located> {
    let mut c = crate::kafka::consumer_config(kafka);
    c.set("group.id", "outbox-router-lookup")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("allow.auto.create.topics", "false")
        .set("isolation.level", "read_committed");
    let consumer: BaseConsumer<crate::kafka::Reader> = c
        .create_with_context(crate::kafka::Reader("event lookup"))
        .ok()?;
    let timeout = Duration::from_secs(10);
    let md = consumer.fetch_metadata(Some(topic), timeout).ok()?;
    let count = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .map_or(0, |t| t.partitions().len() as i32);
    if count == 0 {
        searched.push(format!("{topic}: no such topic"));
        return None;
    }
    let partitions: Vec<i32> = match (explicit, by_key && !key.is_empty()) {
        (Some(p), _) => vec![p],
        (None, true) => vec![partition_of(key, count)],
        (None, false) => (0..count).collect(),
    };
    let mut tpl = TopicPartitionList::new();
    for p in &partitions {
        let start = since.map_or(Offset::Beginning, |t| Offset::Offset(t - MARGIN_MS));
        tpl.add_partition_offset(topic, *p, start).ok()?;
    }
    // Times to offsets: the first record at or after the time (or the end).
    if since.is_some() {
        tpl = consumer.offsets_for_times(tpl, timeout).ok()?;
    }
    consumer.assign(&tpl).ok()?;
    let until = since.map(|t| t + AFTER_MS);
    let (mut read, mut ended) = (0u64, 0usize);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut past: std::collections::HashSet<i32> = Default::default();
    while ended + past.len() < partitions.len()
        && read < MAX_SCAN * partitions.len() as u64
        && Instant::now() < deadline
    {
        let m = match consumer.poll(Duration::from_millis(500)) {
            None => continue,
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => {
                ended += 1;
                continue;
            }
            Some(Err(_)) => continue,
            Some(Ok(m)) => m,
        };
        read += 1;
        if let (Some(until), Some(ts)) = (until, m.timestamp().to_millis()) {
            if ts > until {
                past.insert(m.partition());
            }
        }
        let Some(headers) = m.headers() else { continue };
        let matches = headers
            .iter()
            .any(|h| h.key == id_header && h.value == Some(id.as_bytes()));
        if !matches {
            continue;
        }
        let headers: BTreeMap<String, String> = headers
            .iter()
            .map(|h| {
                (
                    h.key.to_string(),
                    h.value
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                        .unwrap_or_default(),
                )
            })
            .collect();
        let claim_check = headers
            .iter()
            .find(|(k, _)| k.contains("claim"))
            .map(|(_, v)| v.clone());
        let located = Located {
            topic: topic.to_string(),
            partition: m.partition(),
            offset: m.offset(),
            timestamp_ms: m.timestamp().to_millis(),
            headers,
            claim_check,
        };
        crate::kafka::close_in_background(consumer);
        return Some(located);
    }
    let how = match since {
        Some(_) => format!(
            "from {} min before the row's time to {} min after",
            MARGIN_MS / 60_000,
            AFTER_MS / 60_000
        ),
        None => "from the start (no timestamp column is mapped)".into(),
    };
    searched.push(format!(
        "{topic} partition(s) {partitions:?}: {read} record(s) read {how}, not there"
    ));
    crate::kafka::close_in_background(consumer);
    None
}

/// The console's event lookup over the sources this instance knows (a pool's, as they
/// are added and removed), rate-limited by the console.
#[derive(Default)]
pub struct EventLookup {
    sources: RwLock<BTreeMap<String, Configured>>,
}

/// A source's settings, however its owner holds them.
pub type Configured = std::sync::Arc<dyn AsRef<Config> + Send + Sync>;

impl EventLookup {
    pub fn insert(&self, name: &str, config: Configured) {
        self.sources
            .write()
            .expect("lookup sources")
            .insert(name.to_string(), config);
    }

    pub fn remove(&self, name: &str) {
        self.sources.write().expect("lookup sources").remove(name);
    }

    /// The settings of `name`, when it is configured here.
    pub fn config_of(&self, name: &str) -> Result<Configured, String> {
        self.sources
            .read()
            .expect("lookup sources")
            .get(name)
            .cloned()
            .ok_or_else(|| format!("source {name:?} is not configured on this instance"))
    }
}

impl crate::monitor::server::Lookup for EventLookup {
    fn find<'a>(
        &'a self,
        source: &'a str,
        event_id: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<serde_json::Value, String>> {
        Box::pin(async move {
            let config = self.config_of(source)?;
            let found = find(config.as_ref().as_ref(), event_id)
                .await
                .map_err(|e| crate::cause_chain(&anyhow::Error::from(e)))?;
            Ok(serde_json::to_value(found).unwrap_or_default())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_go_to_the_partitions_java_and_librdkafka_choose() {
        // librdkafka's unit test values (rdmurmur2.c), which are Java's.
        assert_eq!(murmur2::murmur2(b"kafka", murmur2::KAFKA_SEED), 0xd067cf64);
        assert_eq!(
            murmur2::murmur2(b"giberish123456789", murmur2::KAFKA_SEED),
            0x8f552b0c
        );
        assert_eq!(murmur2::murmur2(b"", murmur2::KAFKA_SEED), 0x106e08d9);
        assert_eq!(
            partition_of(b"kafka", 12),
            ((0xd067cf64u32 & 0x7fff_ffff) % 12) as i32
        );
    }
}
