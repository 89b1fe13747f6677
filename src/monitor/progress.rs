//! What the running router holds and has not yet delivered: every transaction from the
//! moment the reader has routed it until Kafka acknowledged it, wherever it waits
//! (the channel, topic creation, the producer). Lag, in-flight records and readiness
//! are read from here, not from the durable checkpoint alone, so a stalled first
//! delivery is visible the moment it stalls.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::checkpoint::now_ms;

/// A routed transaction not yet acknowledged.
#[derive(Debug, Clone, Copy)]
struct Held {
    commit_time_ms: i64,
    records: usize,
}

#[derive(Debug, Default)]
struct State {
    /// In commit order: the acker completes transactions in the order they were read.
    held: VecDeque<Held>,
    records: usize,
    /// Since when undelivered work has waited without an acknowledgement. Kept across
    /// pipeline restarts: what was held is read again from the checkpoint, and a broker
    /// that fails every attempt must not look fresh after each one.
    waiting_since: Option<Instant>,
}

/// Shared between the reader, the acker, the sink's delivery callback and the monitor.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    state: Arc<Mutex<State>>,
    /// Wall-clock ms of the last record Kafka acknowledged (0: none yet), updated per
    /// record by the delivery callback: a large transaction is progressing while its
    /// records arrive, long before the whole of it is acknowledged.
    last_delivery_ms: Arc<AtomicI64>,
}

impl Progress {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The reader routed a transaction of `records` records.
    pub fn routed(&self, commit_time_ms: i64, records: usize) {
        let mut s = self.state();
        if s.held.is_empty() && s.waiting_since.is_none() {
            s.waiting_since = Some(Instant::now());
        }
        s.held.push_back(Held {
            commit_time_ms,
            records,
        });
        s.records += records;
    }

    /// The oldest held transaction was acknowledged (all its records).
    pub fn acknowledged(&self) {
        let mut s = self.state();
        if let Some(h) = s.held.pop_front() {
            s.records -= h.records;
        }
        s.waiting_since = (!s.held.is_empty()).then(Instant::now);
    }

    /// One record acknowledged by Kafka (called from the delivery callback).
    pub fn delivered(&self) {
        self.last_delivery_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// The pipeline restarts: what it held is gone from memory (it is read again).
    pub fn restarted(&self) {
        let mut s = self.state();
        s.held.clear();
        s.records = 0;
    }

    /// Records routed and not yet acknowledged.
    pub fn records(&self) -> usize {
        self.state().records
    }

    /// Commit time of the oldest transaction held, if any.
    pub fn oldest_commit_ms(&self) -> Option<i64> {
        self.state().held.front().map(|h| h.commit_time_ms)
    }

    /// How long undelivered work has waited with neither a whole transaction nor a
    /// single record acknowledged; zero when nothing waits.
    pub fn stalled_for(&self) -> Duration {
        let Some(since) = self.state().waiting_since else {
            return Duration::ZERO;
        };
        let waited = since.elapsed();
        let last = self.last_delivery_ms.load(Ordering::Relaxed);
        if last == 0 {
            return waited;
        }
        let since_delivery = Duration::from_millis((now_ms() - last).max(0) as u64);
        waited.min(since_delivery)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_until_acknowledged_in_order() {
        let p = Progress::default();
        assert_eq!(p.stalled_for(), Duration::ZERO);
        p.routed(1_000, 3);
        p.routed(2_000, 0);
        p.routed(3_000, 2);
        assert_eq!((p.records(), p.oldest_commit_ms()), (5, Some(1_000)));
        p.acknowledged();
        assert_eq!((p.records(), p.oldest_commit_ms()), (2, Some(2_000)));
        p.acknowledged();
        p.acknowledged();
        assert_eq!((p.records(), p.oldest_commit_ms()), (0, None));
        assert_eq!(p.stalled_for(), Duration::ZERO);
    }

    #[test]
    fn a_restart_does_not_make_a_stall_look_fresh() {
        let p = Progress::default();
        p.routed(1_000, 1);
        std::thread::sleep(Duration::from_millis(30));
        p.restarted();
        assert_eq!(p.records(), 0);
        p.routed(1_000, 1);
        assert!(p.stalled_for() >= Duration::from_millis(30));
        p.acknowledged();
        assert_eq!(p.stalled_for(), Duration::ZERO);
    }

    #[test]
    fn a_record_delivered_is_progress() {
        let p = Progress::default();
        p.routed(1_000, 1_000_000);
        std::thread::sleep(Duration::from_millis(30));
        p.delivered();
        assert!(p.stalled_for() < Duration::from_millis(30));
    }
}
