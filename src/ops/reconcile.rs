//! `reconcile`: prove what reached Kafka. The outbox rows of a time window, read in one
//! consistent snapshot and mapped and routed exactly as the router does, are compared
//! by event id with what the routed topics hold from that time on (ListOffsets by
//! timestamp, then every record to the end), not with the router's own bookkeeping.
//!
//! The snapshot's binlog position makes "missing" exact: once the durable checkpoint is
//! at or past it, every row in the snapshot was acknowledged by Kafka, so a row not
//! found is lost, not late. When the checkpoint does not get there within `wait`,
//! rows written after the checkpoint's commit time (minus a grace) count as in flight.
//!
//! Memory is per event of the window, not per byte: a 128-bit hash of its id, a
//! fingerprint of its key and value, its topic and counts, and its time (about 100 bytes
//! with the maps' overhead); ids are read again from the table only for the events to be
//! listed.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use rdkafka::message::{Headers, Message};
use serde::Serialize;

use super::OpsError;
use crate::checkpoint::{Checkpoint, CheckpointStore};
use crate::config::Config;
use crate::pipeline::table::{republish, TableRows};
use crate::position::Position;
use crate::route::Record;
use crate::sink::Sink;
use crate::source::snapshot::RowFilter;
use crate::source::{self, server};

/// Ids listed per kind in a report (all of them are counted); `--republish-missing`
/// sends at most this many per run.
pub const LISTED_IDS: usize = 100_000;

/// The window and how to judge it.
#[derive(Debug, Clone)]
pub struct ReconcileOptions {
    /// Rows written at or after this unix time; with `id_range`, only where the topics
    /// are read from (0: their beginning).
    pub since: i64,
    /// Rows written before this unix time (default: now).
    pub until: Option<i64>,
    /// Rows by event id instead of time (tables without a timestamp column), both ends
    /// included, compared as the column's type.
    pub id_range: Option<(String, String)>,
    /// DATETIME/TIMESTAMP column the window is on, and whose value says how young an
    /// unproven row is.
    pub timestamp_column: String,
    /// How long to wait for the durable checkpoint to pass the snapshot.
    pub wait: Duration,
    /// Unproven rows written this close to the checkpoint's commit time are in flight.
    pub grace: Duration,
    /// Judge by the router's checkpoint (`true`), or — for topics another publisher
    /// fills, such as a polling relay's — by age alone: rows younger than `grace` are in
    /// flight.
    pub by_checkpoint: bool,
}

/// One topic's counts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TopicCounts {
    /// Rows in the window routed to this topic.
    pub expected: u64,
    /// Found exactly once, as routed.
    pub found_once: u64,
    /// Not found, and provably delivered if they were (the checkpoint is past them).
    pub missing: u64,
    /// Not found yet, not provably late either.
    pub in_flight: u64,
    /// Found more than once (same id): allowed by at-least-once, counted.
    pub duplicated: u64,
    /// Found with another topic, key or payload than the row routes to.
    pub misrouted: u64,
    /// Records in the window whose event id is in no outbox row (pruned, or not ours).
    pub not_in_table: u64,
}

/// What reconcile found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReconcileReport {
    /// The window (unix seconds).
    pub since: i64,
    /// End of the window (unix seconds).
    pub until: i64,
    /// Binlog position of the snapshot the rows were read in.
    pub snapshot: String,
    /// The durable checkpoint compared with it (`-` when judged by age).
    pub checkpoint: String,
    /// True when the checkpoint was at or past the snapshot: "missing" is exact.
    pub proven: bool,
    /// Per topic (as routed; the shadow topic's name when comparing with one).
    pub topics: BTreeMap<String, TopicCounts>,
    /// Records read from Kafka.
    pub records_scanned: u64,
    /// Missing event ids (up to `LISTED_IDS`).
    pub missing_ids: Vec<String>,
    /// Misrouted event ids (up to `LISTED_IDS`).
    pub misrouted_ids: Vec<String>,
    /// Duplicated event ids (up to `LISTED_IDS`).
    pub duplicated_ids: Vec<String>,
    /// Event ids not in the table (up to `LISTED_IDS`).
    pub not_in_table_ids: Vec<String>,
}

impl ReconcileReport {
    /// Nothing missing and nothing misrouted.
    pub fn is_clean(&self) -> bool {
        self.topics
            .values()
            .all(|t| t.missing == 0 && t.misrouted == 0)
    }

    /// Total missing.
    pub fn missing(&self) -> u64 {
        self.topics.values().map(|t| t.missing).sum()
    }
}

/// How far before the window the topics are read.
const SCAN_SLACK_MS: i64 = 60_000;

/// An id as the map keeps it.
type IdHash = u128;

fn id_hash(id: &[u8]) -> IdHash {
    let half = |salt: u8| {
        let mut h = DefaultHasher::new();
        salt.hash(&mut h);
        id.hash(&mut h);
        h.finish()
    };
    (u128::from(half(1)) << 64) | u128::from(half(2))
}

fn fingerprint(key: &[u8], value: Option<&[u8]>) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    value.hash(&mut h);
    h.finish()
}

/// What the table says one event should look like, and what Kafka showed (40 bytes: a
/// million of them is most of the window's memory).
struct Expected {
    /// Key and value.
    fingerprint: u64,
    /// Key alone: a dead letter's value names a binlog position a table read cannot know,
    /// so only its topic and key are compared.
    key: u64,
    /// When the row was written (ms), `i64::MIN` when unknown.
    time_ms: i64,
    topic: u32,
    seen: u16,
    wrong: u16,
    dead_letter: bool,
}

/// The window's events, as routed.
#[derive(Default)]
struct Window {
    events: HashMap<IdHash, Expected>,
    topics: Vec<String>,
    topic_indexes: HashMap<String, u32>,
}

impl Window {
    fn topic_index(&mut self, topic: &str) -> u32 {
        if let Some(i) = self.topic_indexes.get(topic) {
            return *i;
        }
        let i = self.topics.len() as u32;
        self.topics.push(topic.to_string());
        self.topic_indexes.insert(topic.to_string(), i);
        i
    }
}

/// Compares the window's rows with the topics; see the module doc.
pub async fn reconcile(
    config: &Config,
    opts: &ReconcileOptions,
) -> Result<ReconcileReport, OpsError> {
    let mut conn = source::connect(&config.source).await?;
    let until = match opts.until {
        Some(u) => u,
        None => server::now_ms(&mut conn).await? / 1000 + 1,
    };
    let filter = match &opts.id_range {
        Some((low, high)) => {
            RowFilter::default().between(&config.outbox.columns.event_id, low, high)
        }
        None => RowFilter::default()
            .since(&opts.timestamp_column, opts.since)
            .until(&opts.timestamp_column, until),
    };
    let dead_letters = config.outbox.dead_letter_topic.as_str();

    // The rows, in one snapshot.
    let snapshot = server::consistent_snapshot(&mut conn)
        .await?
        .ok_or(OpsError::SnapshotUnsupported)?;
    // With its GTID state, a checkpoint taken on another server (a failover) compares.
    let snapshot = server::with_gtid_at(&mut conn, snapshot).await;
    let mut window = Window::default();
    let mut row_time_ms = row_times(config, &mut conn, &filter, &opts.timestamp_column).await?;
    // Sized once: growing a map of a million entries holds the old and the new at once.
    window.events.reserve(row_time_ms.len());
    let rows = TableRows::new(filter.clone(), &snapshot);
    let read = republish(config, &mut conn, &rows, &Sink::Null, |r: &Record| {
        let topic = window.topic_index(&r.topic);
        let id = id_hash(&r.event.id.0);
        window.events.insert(
            id,
            Expected {
                fingerprint: fingerprint(&r.key, r.value.as_deref()),
                key: fingerprint(&r.key, None),
                time_ms: row_time_ms.remove(&id).unwrap_or(i64::MIN),
                topic,
                seen: 0,
                wrong: 0,
                dead_letter: &*r.topic == dead_letters,
            },
        );
    })
    .await;
    drop(row_time_ms);
    let _ = conn.query_drop("COMMIT").await;
    read.map_err(|e| OpsError::Pipeline(Box::new(e)))?;

    // Every row in the snapshot is acknowledged once the checkpoint is past it.
    let server_id = server::server_id(&mut conn).await?;
    let (checkpoint, in_flight_from_ms) = if opts.by_checkpoint {
        let cp = wait_for_checkpoint(config, &snapshot, server_id, opts.wait).await?;
        let from = cp.commit_time_ms - opts.grace.as_millis() as i64;
        (Some(cp), from)
    } else {
        let now = server::now_ms(&mut conn).await?;
        (None, now - opts.grace.as_millis() as i64)
    };
    let proven = checkpoint
        .as_ref()
        .is_some_and(|cp| cp.includes(&snapshot, server_id) == Some(true));

    let mut report = ReconcileReport {
        since: opts.since,
        until,
        snapshot: snapshot.file_offset(),
        checkpoint: checkpoint
            .as_ref()
            .map_or_else(|| "-".into(), |cp| cp.position.file_offset()),
        proven,
        ..Default::default()
    };
    // Records carry their commit time (whole seconds, from the binlog) or the row's own
    // time, never before the row was written; a minute earlier is slack for clocks.
    let since_ms = opts.since * 1000;
    let scan_from_ms = (since_ms - SCAN_SLACK_MS).max(0);
    let header = config.route.event_id_header.as_bytes();
    let mut strangers: Vec<(u32, Vec<u8>)> = Vec::new();
    let topics = window.topics.clone();
    let scanned = crate::sink::scan(&config.kafka, &topics, scan_from_ms, |t, m| {
        let t = t as u32;
        let Some(id) = m
            .headers()
            .and_then(|h| h.iter().find(|h| h.key.as_bytes() == header))
            .and_then(|h| h.value)
        else {
            return;
        };
        let key = m.key().unwrap_or_default();
        match window.events.get_mut(&id_hash(id)) {
            Some(e) => {
                let same = e.topic == t
                    && match e.dead_letter {
                        false => e.fingerprint == fingerprint(key, m.payload()),
                        true => e.key == fingerprint(key, None),
                    };
                if same {
                    e.seen = e.seen.saturating_add(1);
                } else {
                    e.wrong = e.wrong.saturating_add(1);
                }
            }
            None => {
                let in_window = m
                    .timestamp()
                    .to_millis()
                    .is_some_and(|ts| (since_ms..until * 1000).contains(&ts));
                // By id range the window has no time: records outside it are other rows'.
                if in_window && opts.id_range.is_none() && strangers.len() < LISTED_IDS {
                    strangers.push((t, id.to_vec()));
                }
            }
        }
    })
    .map_err(OpsError::Sink)?;
    report.records_scanned = scanned.records;

    // Count, then name: ids are read again from the table for the ones to list.
    let mut kinds: HashMap<IdHash, Kind> = HashMap::new();
    for (id, e) in &window.events {
        let counts = report
            .topics
            .entry(window.topics[e.topic as usize].clone())
            .or_default();
        counts.expected += 1;
        let kind = match (e.seen, e.wrong) {
            // Without a time for the row (no timestamp column), unproven is in flight.
            (0, 0) if !proven && (e.time_ms == i64::MIN || e.time_ms >= in_flight_from_ms) => {
                counts.in_flight += 1;
                continue;
            }
            (0, 0) => {
                counts.missing += 1;
                Kind::Missing
            }
            (_, w) if w > 0 => {
                counts.misrouted += 1;
                Kind::Misrouted
            }
            (1, _) => {
                counts.found_once += 1;
                continue;
            }
            _ => {
                counts.duplicated += 1;
                Kind::Duplicated
            }
        };
        kinds.insert(*id, kind);
    }
    if !kinds.is_empty() {
        name_ids(config, &filter, &snapshot, &kinds, &mut report).await?;
    }
    let not_in_table = not_in_table(config, &strangers).await?;
    for (t, id) in not_in_table {
        report
            .topics
            .entry(window.topics[t as usize].clone())
            .or_default()
            .not_in_table += 1;
        if report.not_in_table_ids.len() < LISTED_IDS {
            report
                .not_in_table_ids
                .push(crate::outbox::EventId(id).to_string());
        }
    }
    Ok(report)
}

/// When each row of the window was written (ms since the epoch, by the timestamp
/// column), read in the same snapshot; empty when the tables have no such column.
async fn row_times(
    config: &Config,
    conn: &mut mysql_async::Conn,
    filter: &RowFilter,
    column: &str,
) -> Result<HashMap<IdHash, i64>, OpsError> {
    use crate::source::snapshot::quote_ident;
    let mut times = HashMap::new();
    let (condition, params) = filter.sql();
    for table in server::matching_tables(conn, &config.table_patterns()).await? {
        let sql = format!(
            "SELECT {id}, CAST(UNIX_TIMESTAMP({ts}) * 1000 AS SIGNED) FROM {db}.{t}{condition}",
            id = quote_ident(&config.outbox.columns.event_id),
            ts = quote_ident(column),
            db = quote_ident(&table.database),
            t = quote_ident(&table.table),
        );
        let failed = |source| source::SourceError::Query {
            query: "SELECT outbox row times",
            source,
        };
        // Streamed: a million rows never sit in a result buffer.
        let read = match conn.exec_iter(sql, params.clone()).await {
            Ok(mut result) => {
                result
                    .for_each(|row| {
                        if let Ok((id, Some(t))) =
                            mysql_async::from_row_opt::<(Vec<u8>, Option<i64>)>(row)
                        {
                            times.insert(id_hash(&id), t);
                        }
                    })
                    .await
            }
            Err(e) => Err(e),
        };
        match read {
            Ok(()) => {}
            // 1054: no such column — the table has no time to judge by.
            Err(mysql_async::Error::Server(e)) if e.code == 1054 => {}
            Err(source) => return Err(failed(source).into()),
        }
    }
    Ok(times)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Missing,
    Misrouted,
    Duplicated,
}

/// The durable checkpoint, once at or past `snapshot` or after `wait`.
async fn wait_for_checkpoint(
    config: &Config,
    snapshot: &Position,
    server_id: u32,
    wait: Duration,
) -> Result<Checkpoint, OpsError> {
    let dir = &config.checkpoint.dir;
    let started = Instant::now();
    loop {
        let checkpoint = CheckpointStore::peek(dir)?.ok_or_else(|| OpsError::NoCheckpoint {
            dir: dir.display().to_string(),
        })?;
        super::same_server(&checkpoint, snapshot, server_id)?;
        let past = checkpoint.includes(snapshot, server_id) == Some(true);
        if past || started.elapsed() >= wait {
            return Ok(checkpoint);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Fills the report's id lists by reading the window's rows again.
async fn name_ids(
    config: &Config,
    filter: &RowFilter,
    snapshot: &Position,
    kinds: &HashMap<IdHash, Kind>,
    report: &mut ReconcileReport,
) -> Result<(), OpsError> {
    let mut conn = source::connect(&config.source).await?;
    let rows = TableRows::new(filter.clone(), snapshot);
    republish(config, &mut conn, &rows, &Sink::Null, |r| {
        let list = match kinds.get(&id_hash(&r.event.id.0)) {
            Some(Kind::Missing) => &mut report.missing_ids,
            Some(Kind::Misrouted) => &mut report.misrouted_ids,
            Some(Kind::Duplicated) => &mut report.duplicated_ids,
            None => return,
        };
        if list.len() < LISTED_IDS {
            list.push(r.event.id.to_string());
        }
    })
    .await
    .map_err(|e| OpsError::Pipeline(Box::new(e)))?;
    Ok(())
}

/// Of records whose id is not in the window, those whose id is in no outbox row at all
/// (a row written just before the window commits in it: that one is not a stranger).
async fn not_in_table(
    config: &Config,
    strangers: &[(u32, Vec<u8>)],
) -> Result<Vec<(u32, Vec<u8>)>, OpsError> {
    if strangers.is_empty() {
        return Ok(Vec::new());
    }
    let mut conn = source::connect(&config.source).await?;
    let column = &config.outbox.columns.event_id;
    let tables = server::matching_tables(&mut conn, &config.table_patterns()).await?;
    let quote = |s: &str| format!("`{}`", s.replace('`', "``"));
    let mut known = std::collections::HashSet::new();
    for chunk in strangers.chunks(1000) {
        let ids: Vec<mysql_async::Value> = chunk.iter().map(|(_, id)| id.clone().into()).collect();
        for table in &tables {
            let sql = format!(
                "SELECT {c} FROM {d}.{t} WHERE {c} IN ({marks})",
                c = quote(column),
                d = quote(&table.database),
                t = quote(&table.table),
                marks = vec!["?"; ids.len()].join(", ")
            );
            let found: Vec<Vec<u8>> =
                conn.exec(sql, ids.clone())
                    .await
                    .map_err(|source| source::SourceError::Query {
                        query: "SELECT event ids not in the window",
                        source,
                    })?;
            known.extend(found);
        }
    }
    Ok(strangers
        .iter()
        .filter(|(_, id)| !known.contains(id))
        .cloned()
        .collect())
}
