//! The acknowledgement path against a sink whose acknowledgements the test releases:
//! the checkpoint only ever names the end of a prefix of acknowledged transactions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::checkpoint::{Checkpoint, CheckpointStore};
use crate::config::Config;
use crate::monitor::Metrics;
use crate::outbox::EventId;
use crate::position::Position;
use crate::position::TableName;
use crate::route::{EventRef, Record};
use crate::sink::scripted::{Call, ScriptedSink};

fn config(extra: &str) -> Config {
    let text = format!(
        "[source]\nuser = \"cdc\"\nserver_id = 7\n[outbox]\ntables = [\"shop.outbox\"]\n\
         [checkpoint]\ndir = \"/unused\"\n[pipeline]\nshutdown_timeout_secs = 5\n{extra}"
    );
    Config::parse(&text, std::path::Path::new("test.toml")).unwrap()
}

fn at(offset: u64) -> Position {
    format!("mysql-bin.000001:{offset}").parse().unwrap()
}

/// A batch of `records` records ending at `offset` (`complete`: it ends a binlog
/// transaction), committed on the server just now.
fn batch(offset: u64, records: usize, complete: bool) -> Batch {
    Batch {
        commit_time_ms: crate::checkpoint::now_ms(),
        ..backlog_batch(offset, records, complete)
    }
}

/// The same from a backlog: committed on the server a minute ago.
fn backlog_batch(offset: u64, records: usize, complete: bool) -> Batch {
    let table = Arc::new(TableName {
        database: "shop".into(),
        table: "outbox".into(),
    });
    Batch {
        end: at(offset),
        delivered_through: None,
        commit_time_ms: crate::checkpoint::now_ms() - 60_000,
        records: (0..records)
            .map(|i| Record {
                topic: "t".into(),
                key: b"k".to_vec(),
                value: Some(b"{}".to_vec()),
                headers: Vec::new(),
                timestamp_ms: 0,
                partition: None,
                event: EventRef {
                    table: table.clone(),
                    position: format!("mysql-bin.000001:{offset}"),
                    id: EventId(format!("{offset}-{i}").into_bytes()),
                    aggregate_type: None,
                    trace: None,
                },
                claim_check: false,
                trace: None,
            })
            .collect(),
        invalid: Vec::new(),
        settled: None,
        routed_at: Instant::now(),
        complete,
    }
}

/// The acker and what the test holds of it.
struct Harness {
    _dir: tempfile::TempDir,
    store: CheckpointStore,
    metrics: Metrics,
    sink: ScriptedSink,
    config: Config,
}

impl Harness {
    fn new(transactional: bool, extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::create(dir.path()).unwrap();
        Self {
            _dir: dir,
            store,
            metrics: Metrics::default(),
            sink: ScriptedSink::new(transactional),
            config: config(extra),
        }
    }

    /// Runs the acker from a checkpoint at offset 4 while `script` feeds it.
    async fn run<F: std::future::Future<Output = ()>>(
        &self,
        script: impl FnOnce(mpsc::Sender<Batch>) -> F,
    ) -> Result<(), PipelineError> {
        let sink = self.sink.clone();
        let prefix = Prefix::new(
            &self.store,
            &Checkpoint::new(at(4), 0),
            Duration::from_millis(1),
            &self.metrics,
        );
        let (tx, rx) = mpsc::channel(16);
        let stop = CancellationToken::new();
        let acked = acknowledge(
            &sink,
            rx,
            &stop,
            prefix,
            &self.config.pipeline,
            &self.config.delivery,
        );
        let (result, ()) = tokio::join!(acked, script(tx));
        result
    }

    /// The written checkpoint's offset once it is `offset`; fails after a second.
    async fn checkpoint_reaches(&self, offset: u64) {
        for _ in 0..200 {
            if self.written() == Some(offset) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("checkpoint {:?}, expected {offset}", self.written());
    }

    /// The written checkpoint stays at `offset` (checked after a while).
    async fn checkpoint_stays(&self, offset: Option<u64>) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(self.written(), offset);
    }

    fn written(&self) -> Option<u64> {
        self.metrics.checkpoint().map(|c| c.position.offset)
    }

    async fn sent(&self, n: usize) {
        for _ in 0..200 {
            if self.sink.sent() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("{} batch(es) sent, expected {n}", self.sink.sent());
    }
}

#[tokio::test]
async fn the_checkpoint_follows_the_acknowledged_prefix_only() {
    let h = Harness::new(false, "");
    let s = &h;
    let result = h
        .run(|tx| async move {
            for end in [10, 20, 30] {
                tx.send(batch(end, 2, true)).await.unwrap();
            }
            s.sent(3).await;
            // Later transactions acknowledged first move nothing.
            s.sink.ack(2);
            s.sink.ack(1);
            s.checkpoint_stays(None).await;
            s.sink.ack(0);
            s.checkpoint_reaches(30).await;
            drop(tx);
        })
        .await;
    result.unwrap();
    assert_eq!(h.store.load().unwrap().unwrap().position, at(30));
    assert_eq!(h.metrics.snapshot().events_acked, 6);
}

#[tokio::test]
async fn a_streamed_part_moves_nothing_until_its_transaction_ends() {
    let h = Harness::new(false, "");
    let s = &h;
    let result = h
        .run(|tx| async move {
            tx.send(batch(10, 1, true)).await.unwrap();
            // (A part's end is its transaction's start; a later one shows it is unused.)
            tx.send(batch(40, 3, false)).await.unwrap();
            tx.send(batch(50, 3, true)).await.unwrap();
            s.sent(3).await;
            s.sink.ack(0);
            s.checkpoint_reaches(10).await;
            s.sink.ack(1);
            s.checkpoint_stays(Some(10)).await;
            s.sink.ack(2);
            s.checkpoint_reaches(50).await;
            drop(tx);
        })
        .await;
    result.unwrap();
}

#[tokio::test]
async fn a_failed_delivery_stops_at_the_last_acknowledged_prefix() {
    let h = Harness::new(false, "");
    let s = &h;
    let result = h
        .run(|tx| async move {
            for end in [10, 20, 30] {
                tx.send(batch(end, 1, true)).await.unwrap();
            }
            s.sent(3).await;
            s.sink.ack(0);
            s.sink.ack(2);
            s.sink.fail(1);
        })
        .await;
    assert!(matches!(result, Err(PipelineError::Sink(_))), "{result:?}");
    // What is behind the failure waits for its re-send; the checkpoint stays before it.
    assert!(h.sink.calls().contains(&Call::Abandon));
    assert_eq!(h.store.load().unwrap().unwrap().position, at(10));
}

#[tokio::test]
async fn exactly_once_commits_whole_binlog_transactions_with_their_checkpoint() {
    let h = Harness::new(true, &exactly_once(2, 60_000, 60_000));
    let s = &h;
    let result = h
        .run(|tx| async move {
            // 1 + 1 records: full, at a boundary → commits. Then a large transaction
            // in parts: full long before its end, but commits only after its last part.
            tx.send(batch(10, 1, true)).await.unwrap();
            tx.send(batch(20, 1, true)).await.unwrap();
            s.sent(2).await;
            s.sink.ack(0);
            s.checkpoint_stays(None).await;
            s.sink.ack(1);
            s.checkpoint_reaches(20).await;
            for part in 0..3 {
                tx.send(batch(20, 2, false)).await.unwrap();
                s.sent(3 + part).await;
                s.sink.ack(2 + part);
            }
            s.checkpoint_stays(Some(20)).await;
            tx.send(batch(90, 1, true)).await.unwrap();
            s.sent(6).await;
            s.sink.ack(5);
            s.checkpoint_reaches(90).await;
            drop(tx);
        })
        .await;
    result.unwrap();
    assert_eq!(
        commits(&h.sink),
        [Some(20), Some(90)],
        "{:?}",
        h.sink.calls()
    );
    // Every send happened inside a transaction the acker had begun.
    let calls = h.sink.calls();
    let begins = calls.iter().filter(|c| **c == Call::Begin).count();
    assert_eq!(begins, 2, "{calls:?}");
    assert_eq!(h.metrics.snapshot().events_acked, 9);
}

/// The Kafka transactions' markers (their checkpoints' offsets), in commit order.
fn commits(sink: &ScriptedSink) -> Vec<Option<u64>> {
    sink.calls()
        .iter()
        .filter_map(|c| match c {
            Call::Commit(marker) => Some(marker.as_ref().map(|m| m.position.offset)),
            _ => None,
        })
        .collect()
}

/// Exactly-once settings: transactions of `records` records / `ms` when caught up,
/// `backlog_ms` while a backlog is read.
fn exactly_once(records: usize, ms: u64, backlog_ms: u64) -> String {
    format!(
        "[delivery]\nmode = \"exactly-once\"\ntransactional_id = \"t\"\ncheckpoint_topic = \"c\"\n\
         commit_max_records = {records}\ncommit_max_ms = {ms}\ncommit_backlog_ms = {backlog_ms}\n"
    )
}

/// Feeds 40 binlog transactions of one record, 10 ms apart, acknowledging each;
/// returns the Kafka transactions' markers.
async fn feed_40(h: &Harness, batch: fn(u64, usize, bool) -> Batch) -> Vec<Option<u64>> {
    let result = h
        .run(|tx| async move {
            for i in 0..40 {
                tx.send(batch(10 * (i + 1), 1, true)).await.unwrap();
                h.sent(i as usize + 1).await;
                h.sink.ack(i as usize);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            h.checkpoint_reaches(400).await;
            drop(tx);
        })
        .await;
    result.unwrap();
    commits(&h.sink)
}

#[tokio::test]
async fn exactly_once_keeps_a_transaction_open_while_a_backlog_is_read() {
    // Each binlog transaction fills a Kafka transaction (one record); read from a
    // backlog, they share one until it is as old as a backlog allows (300 ms: 10-20
    // of them at the pace fed).
    let h = Harness::new(true, &exactly_once(1, 50, 300));
    let commits = feed_40(&h, backlog_batch).await;
    assert!((1..=8).contains(&commits.len()), "{commits:?}");
    assert_eq!(commits.last(), Some(&Some(400)));
    // Caught up (committed on the server just now), each commits alone.
    let h = Harness::new(true, &exactly_once(1, 50, 300));
    assert_eq!(feed_40(&h, batch).await.len(), 40);
}

#[tokio::test]
async fn exactly_once_commits_when_the_backlog_reader_goes_quiet() {
    // A backlog's last transactions are as old as the rest; that nothing follows them
    // is what says the reader caught up.
    let h = Harness::new(true, &exactly_once(1, 50, 60_000));
    commits_a_backlog_of_two_once_acknowledged(&h).await;
}

/// Two backlog transactions read, both acknowledged, then the reader goes quiet: one
/// commit, at the second.
async fn commits_a_backlog_of_two_once_acknowledged(h: &Harness) {
    let s = h;
    let result = h
        .run(|tx| async move {
            tx.send(backlog_batch(10, 1, true)).await.unwrap();
            tx.send(backlog_batch(20, 1, true)).await.unwrap();
            s.sent(2).await;
            s.sink.ack(0);
            s.sink.ack(1);
            s.checkpoint_reaches(20).await;
            drop(tx);
        })
        .await;
    result.unwrap();
    assert_eq!(commits(&h.sink), [Some(20)], "{:?}", h.sink.calls());
}

#[tokio::test]
async fn exactly_once_commits_a_backlog_s_end_once_it_is_acknowledged() {
    // Caught-up transactions may stay open 5 s here: a backlog's last one commits once
    // its records are acknowledged and the reader stays quiet, not 5 s later.
    let h = Harness::new(true, &exactly_once(1_000, 5_000, 60_000));
    let started = std::time::Instant::now();
    commits_a_backlog_of_two_once_acknowledged(&h).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "committed after {:?}",
        started.elapsed()
    );
}
