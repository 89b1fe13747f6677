//! Monitoring beside the flow: counters every stage updates.

mod counters;

pub use counters::{Counters, Snapshot};
