//! The dead letters of a source, newest first: what `outbox.on_invalid = "dead-letter"`
//! sent to `outbox.dead_letter_topic`, as a `read_committed` consumer reads the topic
//! (the fleet's record, whichever instance wrote them), with the table, binlog position,
//! event id and reason each one carries in its headers.

use serde::Serialize;

use super::OpsError;
use crate::config::Config;

/// How far back the list reads.
pub const WINDOW_DAYS: i64 = 7;

/// At most this many (the newest) are kept.
pub const KEPT: usize = 10_000;

/// One dead letter, where it is and why it is there.
#[derive(Debug, Clone, Serialize)]
pub struct DeadLetter {
    pub partition: i32,
    pub offset: i64,
    pub timestamp_ms: Option<i64>,
    pub event_id: Option<String>,
    pub table: Option<String>,
    pub position: Option<String>,
    pub reason: Option<String>,
    /// The claim check's object, when the value went to the bucket.
    pub claim_check: Option<String>,
}

/// The newest dead letters of the last `WINDOW_DAYS` (at most `KEPT`), newest first.
pub fn recent(config: &Config) -> Result<Vec<DeadLetter>, OpsError> {
    let topic = config.outbox.dead_letter_topic.clone();
    let id_header = config.route.event_id_header.as_str();
    let since = crate::checkpoint::now_ms() - WINDOW_DAYS * 24 * 3600 * 1000;
    let mut out: Vec<DeadLetter> = Vec::new();
    let newest_first = |all: &mut Vec<DeadLetter>| {
        all.sort_by_key(|d| std::cmp::Reverse((d.timestamp_ms, d.offset)));
        all.truncate(KEPT);
    };
    crate::kafka::scan(
        &config.kafka,
        "dead letters read",
        &[topic],
        since,
        |_, m| {
            use rdkafka::message::{Headers, Message};
            let header = |name: &str| {
                m.headers().and_then(|h| {
                    h.iter()
                        .find(|x| x.key == name)
                        .and_then(|x| x.value)
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                })
            };
            let claim_check = m.headers().and_then(|h| {
                h.iter()
                    .find(|x| x.key.contains("claim"))
                    .and_then(|x| x.value)
                    .map(|v| String::from_utf8_lossy(v).into_owned())
            });
            out.push(DeadLetter {
                partition: m.partition(),
                offset: m.offset(),
                timestamp_ms: m.timestamp().to_millis(),
                event_id: header(id_header),
                table: header("table"),
                position: header("position"),
                reason: header("reason"),
                claim_check,
            });
            if out.len() >= 2 * KEPT {
                newest_first(&mut out);
            }
        },
    )?;
    newest_first(&mut out);
    Ok(out)
}
