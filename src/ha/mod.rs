//! Hot standby: which of several instances with the same config streams. Leadership is
//! ownership of the one partition of a lock topic in a Kafka consumer group; the
//! transactional producer of exactly-once mode fences a leader that lost it, so a paused
//! or cut-off old leader can never make anything visible again.

mod config;
mod leader;
mod lock;

pub use config::HaConfig;
pub use leader::leader_of;
pub use lock::{Lease, Lock, LockError, LockGroup};
