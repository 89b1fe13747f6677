//! Exactly-once mode (`[delivery] mode = "exactly-once"`): every crash window of the
//! fault suite, counted by a `read_committed` consumer — 0 lost and 0 duplicates.
//!
//! Cycles per window: `IT_EOS_CYCLES` (default 5; the at-least-once suite runs 20).

use crate::crash::crash_cycles_in;
use crate::util::exactly_once_delivery;

fn cycles() -> usize {
    std::env::var("IT_EOS_CYCLES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(5)
}

async fn exactly_once(name: &str, point: &str, lo: u64, hi: u64) {
    let duplicates = crash_cycles_in(
        name,
        point,
        lo,
        hi,
        Some(&exactly_once_delivery(name, true)),
        cycles(),
    )
    .await;
    assert_eq!(
        duplicates, 0,
        "{point}: a read_committed consumer saw {duplicates} duplicates in exactly-once mode"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_crash_after_read_before_produce() {
    exactly_once("eos_read", "read.before_send", 5, 25).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_crash_after_produce_before_ack() {
    exactly_once("eos_produce", "sink.after_send_before_ack", 5, 25).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_crash_after_ack_before_commit() {
    exactly_once("eos_ack", "ack.before_checkpoint", 5, 25).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_crash_mid_transaction_sends() {
    exactly_once("eos_midtxn", "sink.mid_transaction", 3, 20).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_crash_before_commit() {
    exactly_once("eos_before_commit", "txn.before_commit", 1, 6).await;
}

/// Committed in Kafka, not yet in the local store: the marker is the truth.
#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_crash_after_commit_before_store() {
    exactly_once("eos_after_commit", "txn.after_commit", 1, 6).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_crash_before_store_flush() {
    exactly_once("eos_flush", "checkpoint.before_flush", 1, 6).await;
}
