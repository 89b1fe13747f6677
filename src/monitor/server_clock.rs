//! The source server's clock as seen from this host. Binlog commit times come from the
//! server; lag and the exactly-once backlog test compare them with "now", which must be
//! the server's too: a database clock seconds behind this host's made a caught-up stream
//! look like a backlog (5-second transactions for `read_committed` readers) and lag read
//! high by the difference.

use std::sync::atomic::{AtomicI64, Ordering};

use crate::checkpoint::now_ms;

/// This host's clock plus the server's offset from it, measured at each connect.
#[derive(Default)]
pub struct ServerClock {
    offset_ms: AtomicI64,
}

impl ServerClock {
    /// The server said `server_ms` between this host's `sent_ms` and `answered_ms`:
    /// it read its clock about half way.
    pub fn measured(&self, sent_ms: i64, server_ms: i64, answered_ms: i64) {
        let local = sent_ms + (answered_ms - sent_ms) / 2;
        self.offset_ms.store(server_ms - local, Ordering::Relaxed);
    }

    /// The server's clock now (this host's until a connect measured the offset).
    pub fn now_ms(&self) -> i64 {
        now_ms() + self.offset_ms.load(Ordering::Relaxed)
    }

    /// How far the server's clock is ahead of this host's (negative: behind).
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_is_taken_half_way_through_the_round_trip() {
        let clock = ServerClock::default();
        clock.measured(1_000, 61_010, 1_020);
        assert_eq!(clock.offset_ms(), 60_000);
        let ahead = clock.now_ms() - now_ms();
        assert!((59_990..=60_010).contains(&ahead), "{ahead}");
        clock.measured(10_000, 5_000, 10_000);
        assert_eq!(clock.offset_ms(), -5_000);
    }
}
