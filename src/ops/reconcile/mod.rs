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
//! fingerprint of its key and value, its topic and counts, and its time (about 170 bytes
//! with the maps' overhead); ids are read again from the table only for the events to be
//! listed.

use std::collections::HashMap;

use mysql_async::prelude::Queryable;
use rdkafka::message::{Headers, Message};

mod report;
mod table_reads;
mod window;

pub use report::{ReconcileOptions, ReconcileReport, LISTED_IDS};
use table_reads::{name_ids, not_in_table, row_times, wait_for_checkpoint, Kind};
use window::{fingerprint, id_hash, Expected, IdHash, Window};

use super::OpsError;
use crate::config::Config;
use crate::pipeline::table::{read_as_records, ParkedRows, TableRows};
use crate::route::Record;
use crate::source::snapshot::RowFilter;
use crate::source::{self, server};

/// How far before the window the topics are read.
const SCAN_SLACK_MS: i64 = 60_000;

/// Compares the window's rows with the topics; see the module doc.
pub async fn reconcile(
    config: &Config,
    opts: &ReconcileOptions,
) -> Result<ReconcileReport, OpsError> {
    let mut conn = source::connect(&config.source).await?;
    server::require_mariadb(&mut conn, server::SnapshotFeature::Reconcile).await?;
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
    let mut rows = TableRows::new(filter.clone(), &snapshot);
    let parking = config.outbox.on_invalid == crate::outbox::OnInvalid::Park;
    if parking {
        rows.parked = ParkedRows::Compare { invalid: 0 };
    }
    let read = read_as_records(config, &mut conn, &mut rows, |r: &Record| {
        let topic = window.topic_index(&r.topic);
        let id = id_hash(&r.event.id.0);
        // A claim-checked record carries the reference to its value, not the value.
        let reference = match (&config.claim_check, r.claim_check) {
            (Some(cc), true) => {
                let value = r.value.as_deref().unwrap_or_default();
                Some(cc.reference(&r.topic, &r.event.id, value).value())
            }
            _ => None,
        };
        window.events.insert(
            id,
            Expected {
                fingerprint: fingerprint(&r.key, reference.as_deref().or(r.value.as_deref())),
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
    let invalid_rows = match rows.parked {
        ParkedRows::Compare { invalid } => invalid,
        _ => 0,
    };
    // Read after the rows: an event parked by then is not missing, it waits.
    let (parked, dropped) = match parking {
        true => parked_fates(config)?,
        false => Default::default(),
    };

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
        invalid_rows,
        ..Default::default()
    };
    // Records carry their commit time (whole seconds, from the binlog) or the row's own
    // time, never before the row was written; a minute earlier is slack for clocks.
    let since_ms = opts.since * 1000;
    let scan_from_ms = (since_ms - SCAN_SLACK_MS).max(0);
    let header = config.route.event_id_header.as_bytes();
    let mut strangers: Vec<(u32, Vec<u8>)> = Vec::new();
    let topics = window.topics.clone();
    let scanned = crate::kafka::scan(
        &config.kafka,
        "reconcile: records read from Kafka (of at most)",
        &topics,
        scan_from_ms,
        |t, m| {
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
        },
    )
    .map_err(OpsError::Kafka)?;
    report.records_scanned = scanned.records;

    // Count, then name: ids are read again from the table for the ones to list.
    let mut kinds: HashMap<IdHash, Kind> = HashMap::new();
    for (id, e) in &window.events {
        let counts = report
            .topics
            .entry(window.topics[e.topic as usize].clone())
            .or_default();
        counts.expected += 1;
        if e.seen == 0 && e.wrong == 0 {
            if parked.contains(id) {
                counts.parked += 1;
                continue;
            }
            if dropped.contains(id) {
                counts.dropped += 1;
                continue;
            }
        }
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

/// The event ids (hashed) the parking topic holds parked now, and those a drop settled.
fn parked_fates(
    config: &Config,
) -> Result<
    (
        std::collections::HashSet<IdHash>,
        std::collections::HashSet<IdHash>,
    ),
    OpsError,
> {
    let read =
        crate::route::parking::read_all(&config.kafka, &config.outbox.parking.topic, |_| false)
            .map_err(|e| OpsError::Pipeline(Box::new(e.into())))?;
    let (parked, dropped) = read.fates();
    let hashed = |ids: std::collections::HashSet<&[u8]>| ids.into_iter().map(id_hash).collect();
    Ok((hashed(parked), hashed(dropped)))
}
