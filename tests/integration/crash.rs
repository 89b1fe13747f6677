//! Crash at each failure window (fault-injection points compiled in with the
//! `failpoints` feature), restart, repeat; then count what reached Kafka.

use std::time::Duration;

use crate::util::*;

/// Crash/restart cycles per point: 20 (the minimum), fewer where CI sets
/// `IT_CRASH_CYCLES` to stay within its time.
fn cycles() -> usize {
    std::env::var("IT_CRASH_CYCLES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(20)
}
/// Events in the stream at the start; more are written whenever the router catches up
/// before the crash point fires.
const EVENTS: usize = 10_000;
/// Events added when the router caught up between crashes.
const MORE: usize = 2_000;

/// Writes events `from..to` in transactions of mixed sizes (1 to 100 rows).
pub(crate) async fn write_mixed(db: &str, from: usize, to: usize, keys: usize) {
    write_mixed_at(mariadb_port(), db, from, to, keys).await
}

/// `write_mixed` on the server at `port`.
pub(crate) async fn write_mixed_at(port: u16, db: &str, from: usize, to: usize, keys: usize) {
    const SIZES: [usize; 6] = [1, 5, 20, 50, 3, 100];
    let mut conn = app_conn_at(port).await;
    let (mut seq, mut i) = (from, 0);
    let total = to;
    while seq < total {
        let size = SIZES[i % SIZES.len()].min(total - seq);
        let events: Vec<Ev> = (seq..seq + size)
            .map(|s| {
                Ev::new(
                    format!("s-{s}"),
                    TYPES[s % 3],
                    &format!("k-{}", s % keys),
                    format!("{{\"seq\":{s}}}"),
                )
            })
            .collect();
        insert_txn(&mut conn, db, &events).await;
        seq += size;
        i += 1;
    }
}

/// A small deterministic generator: crash after a varying number of hits.
struct Lcg(u64);

impl Lcg {
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        lo + (self.0 >> 33) % (hi - lo + 1)
    }
}

/// Runs the router with a crash point armed after `lo..=hi` hits, `cycles()` times, then a
/// clean run; checks 0 lost, duplicates identical, per-key order; returns duplicates.
async fn crash_cycles(name: &str, point: &str, lo: u64, hi: u64) -> usize {
    crash_cycles_in(name, point, lo, hi, None, cycles()).await
}

/// `crash_cycles` with `delivery` settings (TOML of a `[delivery]` section) and a
/// number of cycles.
pub(crate) async fn crash_cycles_in(
    name: &str,
    point: &str,
    lo: u64,
    hi: u64,
    delivery: Option<&str>,
    cycles: usize,
) -> usize {
    let _settings = SERVER_SETTINGS.read().await;
    let (_conn, mut setup) = fresh(name).await;
    let db = setup.db.clone();
    setup.flush_interval_ms = 20;
    setup.delivery(delivery);
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();
    write_mixed(&db, 0, EVENTS, 50).await;
    let mut events = EVENTS;

    let mut rng = Lcg(u64::from(setup.server_id));
    let mut crashes = 0;
    while crashes < cycles {
        let spec = format!("{point}={}*off->return", rng.between(lo, hi));
        let mut router = setup.start_router_env(&[("FAILPOINTS", spec.as_str())]);
        loop {
            if let Some(status) = router.wait(Duration::from_secs(3)) {
                let log = router.log();
                assert!(
                    !status.success() && log.contains(&format!("failpoint {point}")),
                    "{status}:\n{log}"
                );
                crashes += 1;
                break;
            }
            // Caught up before the point fired: the stream goes on.
            assert!(
                events < EVENTS * 5,
                "{point}: never fired\n{}",
                router.log()
            );
            write_mixed(&db, events, events + MORE, 50).await;
            events += MORE;
        }
    }
    let mut router = setup.start_router();
    drain_and_stop(&mut router, &topics, events);
    let duplicates = check_stream(&topics, events);
    println!(
        "crash point {point}: cycles={crashes} events={events} lost=0 duplicates={duplicates}"
    );
    duplicates
}

/// Transaction read from the binlog, not yet handed to Kafka.
#[tokio::test(flavor = "multi_thread")]
async fn crash_after_read_before_produce() {
    crash_cycles("crash_read", "read.before_send", 5, 25).await;
}

/// Records handed to the producer, not yet acknowledged.
#[tokio::test(flavor = "multi_thread")]
async fn crash_after_produce_before_ack() {
    crash_cycles("crash_produce", "sink.after_send_before_ack", 5, 25).await;
}

/// Acknowledged by Kafka, checkpoint not yet written: the duplicates window.
#[tokio::test(flavor = "multi_thread")]
async fn crash_after_ack_before_checkpoint() {
    crash_cycles("crash_ack", "ack.before_checkpoint", 5, 25).await;
}

/// Checkpoint written to the store but not flushed to disk.
#[tokio::test(flavor = "multi_thread")]
async fn crash_after_checkpoint_write_before_flush() {
    crash_cycles("crash_flush", "checkpoint.before_flush", 1, 6).await;
}

/// Some records of a multi-row transaction handed to the producer, the rest not.
#[tokio::test(flavor = "multi_thread")]
async fn crash_mid_transaction_sends() {
    crash_cycles("crash_midtxn", "sink.mid_transaction", 3, 20).await;
}
