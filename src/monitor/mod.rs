//! Monitoring beside the flow: metrics every stage updates, the status verdict (lag,
//! binlog bytes behind, retention runway), the fleet's reports, and the monitor
//! server (probes, `/metrics`, the console and its API), loopback by default.

mod config;
pub mod control;
mod exposition;
pub mod fleet;
mod metrics;
mod progress;
pub mod retention;
mod role;
mod run_lock;
mod served;
pub mod server;
mod server_clock;
pub mod status;
pub mod traces;
mod watch;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use config::MonitorConfig;
pub use metrics::{
    ConsoleFigures, MetricDef, MetricKind, Metrics, Produced, RestartReason, Snapshot,
    ABSENT_WHILE_UNKNOWN, CATALOG,
};
pub use progress::Progress;
pub use role::Role;
pub use run_lock::{Holder, RunLock};
pub use served::{Served, Shape};
pub use server_clock::ServerClock;
pub use status::{RouterState, Status, Thresholds, Unobserved, Verdict};
pub use watch::watch;

use crate::kafka::KafkaConfig;

/// Starts what watches this instance from outside: its reports to the fleet's status
/// topic (when `kafka` is given and the topic is on), the board that reads everyone's,
/// and the monitor server on `monitor.listen` (unless `off`), until `stop`. Binding
/// errors are returned at once.
pub async fn start(
    config: &MonitorConfig,
    kafka: Option<&KafkaConfig>,
    served: Arc<Served>,
    desk: server::Desk,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let board = Arc::new(fleet::Board::default());
    let topic = kafka.zip(config.status_topic());
    if let Some((kafka, topic)) = topic {
        board.follow(kafka, topic, stop.clone());
    }
    let control = kafka.zip(config.control_topic());
    if let Some((kafka, topic)) = control {
        board.follow_control(kafka, topic, stop.clone());
    }
    let reporter = fleet::Reporter {
        instance: served.instance().to_string(),
        group: served.group().map(str::to_string),
        interval_secs: config.interval_secs,
    };
    fleet::publish(topic, reporter, served.clone(), board.clone(), stop.clone());
    if let Some(addr) = config.listen_addr() {
        let setup = server::ConsoleSetup {
            served,
            board,
            status_topic: topic.map(|(_, t)| t.to_string()),
            control: control.map(|(k, t)| (k.clone(), t.to_string())),
            desk,
            credentials: &config.credentials,
            tls: config.tls.as_ref(),
        };
        server::serve(addr, setup, stop).await?;
    }
    Ok(())
}
