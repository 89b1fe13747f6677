//! Wiring: source → outbox → route in a reader task, sink → acker → checkpoint in the
//! acker loop, joined by a bounded channel; plus the supervisor that restarts after
//! transient errors.
//!
//! Reading never waits for acknowledgements, but the in-flight window
//! (`pipeline.max_in_flight` records) and the channel bound how far it runs ahead, so
//! when Kafka stalls the binlog stays on the server and memory stays flat. Deliveries
//! complete in any order; an ordered queue releases them in commit order, so the
//! checkpoint only ever covers a contiguous prefix of acknowledged transactions.
//!
//! Beside the run: `control` (the fleet's operator records, followed on the control
//! topic), `pause` (an operator's pause) and `replays` (replays asked from the console,
//! carried out by the leader), and `lookup` (where an event went, for the console).

mod ack;
mod control;
mod error;
mod handoff;
mod invalid;
pub mod lookup;
pub mod pause;
mod preflight;
mod read;
mod refusals;
mod release;
pub mod replays;
mod resume;
mod standby;
mod supervise;
pub(crate) mod table;

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{error, info};

pub use error::PipelineError;
pub(crate) use invalid::InvalidPolicy;
pub use replays::{LeaderDuties, ReplayDone, Replayer};
pub use resume::{fleet_marker, init, record_operator_position, FirstStart, OperatorMove};
pub use supervise::SinkKind;
use supervise::{supervise, Ctx};

use crate::checkpoint::CheckpointStore;
use crate::config::Config;
use crate::monitor::{Metrics, Role};
use crate::outbox::OnInvalid;

/// Runs until `shutdown` fires (Ok) or a non-transient error (Err), restarting from the
/// durable checkpoint with backoff after transient ones.
pub async fn run(
    config: &Config,
    sink_kind: SinkKind,
    shutdown: CancellationToken,
    metrics: Metrics,
    duties: &LeaderDuties,
) -> Result<(), PipelineError> {
    run_as(config, sink_kind, shutdown, metrics, None, duties).await
}

/// A pool's source: leads while `lease` is this instance's, waits while it is not, until
/// `shutdown`; the pool serves the endpoints.
pub async fn run_pooled(
    config: &Config,
    shutdown: CancellationToken,
    metrics: Metrics,
    pooled: Pooled<'_>,
) -> Result<(), PipelineError> {
    run_as(
        config,
        SinkKind::Kafka,
        shutdown,
        metrics,
        Some(pooled),
        pooled.duties,
    )
    .await
}

/// Who decides that a pool's source streams here.
#[derive(Clone, Copy)]
pub struct Pooled<'a> {
    pub lease: &'a crate::ha::Lease,
    pub instance: &'a str,
    pub group: &'a str,
    pub duties: &'a LeaderDuties,
}

async fn run_as(
    config: &Config,
    sink_kind: SinkKind,
    shutdown: CancellationToken,
    metrics: Metrics,
    pooled: Option<Pooled<'_>>,
    duties: &LeaderDuties,
) -> Result<(), PipelineError> {
    // A dry run starts where the real checkpoint is but never writes it: the next real
    // run must not skip what was only printed.
    let (store, scratch) = match sink_kind {
        SinkKind::Kafka => (CheckpointStore::open(&config.checkpoint.dir)?, None),
        SinkKind::Stdout | SinkKind::Null => {
            let (store, dir) = CheckpointStore::scratch_copy_of(&config.checkpoint.dir)?;
            info!(real = %config.checkpoint.dir.display(), scratch = %dir.display(), "dry run: checkpoints go to a scratch store, the real one is left as it is");
            (store, Some(dir))
        }
    };
    // Shown on /status from the first moment; which position a run starts from is
    // `resume::start_position`'s decision, read afresh at every (re)start.
    if let Some(cp) = store.load()? {
        metrics.set_checkpoint(&cp);
    }
    metrics.set_ready_max_stall(Duration::from_secs(config.monitor.ready_max_stall_secs));
    if config.outbox.on_invalid == OnInvalid::DeadLetter {
        metrics.expect_dead_letters(&config.outbox.dead_letter_topic);
    }
    if let Some(tracing) = duties
        .tracing
        .as_ref()
        .filter(|_| sink_kind == SinkKind::Kafka)
    {
        // Only a leader (or a single router) streams: the role its spans carry.
        let role = match pooled.is_some() || config.ha.enabled {
            true => "leader",
            false => "single",
        };
        metrics.trace_with(tracing.for_source(
            &config.console_name(),
            role,
            metrics.trace_spans("exported"),
            metrics.trace_spans("dropped"),
        ));
    }
    // Not a child of `shutdown`: the endpoints answer until the pipeline has drained.
    let monitor_stop = CancellationToken::new();
    // Whatever ends this function (a panic too), the monitor's followers of Kafka
    // topics stop: the runtime waits for their threads before the process can exit.
    let _monitor_stopped = monitor_stop.clone().drop_guard();
    // Tests hold a start here (`sleep(MS)`) to see what `status` says meanwhile.
    fail::fail_point!("pipeline.before_first_observation");
    let watcher = crate::monitor::watch(
        &config.source,
        &config.monitor,
        metrics.clone(),
        monitor_stop.clone(),
    );
    // Followed from the start, by leader and standby alike: an instance that takes
    // over knows at once whether the source is paused. A dry run is never paused.
    let pauses = config
        .monitor
        .control_topic()
        .filter(|_| sink_kind == SinkKind::Kafka)
        .map(|topic| pause::Pauses::follow(&config.kafka, topic, &config.console_name()));
    // Carried out while leading (`supervise` runs only then), on the same topic.
    let replays = match (config.monitor.control_topic(), &duties.replayer) {
        (Some(topic), Some(replayer)) if sink_kind == SinkKind::Kafka => {
            let instance = pooled.map_or_else(|| config.ha.instance_name(), |p| p.instance.into());
            Some(replays::Replays::follow(
                &config.kafka,
                topic,
                &config.console_name(),
                &instance,
                replayer.clone(),
            ))
        }
        _ => None,
    };
    let ctx = Ctx {
        config,
        store: &store,
        sink_kind,
        shutdown: &shutdown,
        metrics: &metrics,
        lock: None,
        streaming: None,
        pauses: pauses.as_ref(),
        replays: replays.as_ref(),
    };
    let supervised = async {
        if let Some(Pooled {
            lease,
            instance,
            group,
            ..
        }) = pooled
        {
            return standby::alternate(&ctx, lease, instance, group).await;
        }
        match config.ha.enabled && sink_kind == SinkKind::Kafka {
            true => standby::lead_when_elected(&ctx).await,
            false => {
                metrics.set_role(Role::Single, None);
                supervise(&ctx).await
            }
        }
    };
    // One deadline over every wait of a stop (drains, admin calls, ListOffsets, marker
    // reads, reconnects): each has its own timeout, some longer than the operator's.
    let stop_timeout = Duration::from_secs(config.pipeline.shutdown_timeout_secs);
    let stop_deadline = async {
        shutdown.cancelled().await;
        tokio::time::sleep(stop_timeout + STOP_GRACE).await;
    };
    let result = tokio::select! {
        r = supervised => r,
        _ = watcher => Err(PipelineError::TaskFailed { task: "monitor", reason: "it returned".into() }),
        _ = stop_deadline => {
            error!(secs = config.pipeline.shutdown_timeout_secs, "stop did not finish in time: abandoning the waits still open; the checkpoint is the last durable one, what was not acknowledged is read again on the next start");
            Err(PipelineError::StopTimedOut { secs: config.pipeline.shutdown_timeout_secs })
        }
    };
    monitor_stop.cancel();
    if let Some(dir) = scratch {
        drop(store);
        let _ = std::fs::remove_dir_all(dir);
    }
    result
}

/// Beyond `pipeline.shutdown_timeout_secs`, for the acker's own drain deadline (which
/// says what it abandoned) to fire first.
const STOP_GRACE: Duration = Duration::from_secs(2);
