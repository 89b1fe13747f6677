//! Monitoring beside the flow: metrics every stage updates, the status verdict (lag,
//! binlog bytes behind, retention runway), and the loopback HTTP endpoints.

mod config;
mod exposition;
mod http;
mod metrics;
mod pool_http;
mod progress;
pub mod retention;
mod role;
mod run_lock;
mod server_clock;
pub mod status;
mod watch;

pub use config::MonitorConfig;
pub use http::serve;
pub use metrics::{
    MetricDef, MetricKind, Metrics, Produced, RestartReason, Snapshot, ABSENT_WHILE_UNKNOWN,
    CATALOG,
};
pub use pool_http::{serve_pool, PoolView};
pub use progress::Progress;
pub use role::Role;
pub use run_lock::{Holder, RunLock};
pub use server_clock::ServerClock;
pub use status::{RouterState, Status, Thresholds, Unobserved, Verdict};
pub use watch::watch;
