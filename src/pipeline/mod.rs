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
//! Beside the run: `pause` (an operator's pause, followed on the control topic) and
//! `lookup` (where an event went, for the console).

mod ack;
mod error;
mod handoff;
mod invalid;
pub mod lookup;
pub mod pause;
mod preflight;
mod read;
mod refusals;
mod release;
mod resume;
mod standby;
mod supervise;
pub(crate) mod table;

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{error, info};

pub use error::PipelineError;
pub(crate) use invalid::InvalidPolicy;
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
) -> Result<(), PipelineError> {
    run_as(config, sink_kind, shutdown, metrics, None).await
}

/// A pool's source: leads while `lease` is this instance's, waits while it is not, until
/// `shutdown`; the pool serves the endpoints.
pub async fn run_pooled(
    config: &Config,
    shutdown: CancellationToken,
    metrics: Metrics,
    pooled: Pooled<'_>,
) -> Result<(), PipelineError> {
    run_as(config, SinkKind::Kafka, shutdown, metrics, Some(pooled)).await
}

/// Who decides that a pool's source streams here.
#[derive(Clone, Copy)]
pub struct Pooled<'a> {
    pub lease: &'a crate::ha::Lease,
    pub instance: &'a str,
    pub group: &'a str,
}

async fn run_as(
    config: &Config,
    sink_kind: SinkKind,
    shutdown: CancellationToken,
    metrics: Metrics,
    pooled: Option<Pooled<'_>>,
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
    let pause_stop = CancellationToken::new();
    let _pause_stop = pause_stop.clone().drop_guard();
    let pauses = config
        .monitor
        .control_topic()
        .filter(|_| sink_kind == SinkKind::Kafka)
        .map(|topic| {
            pause::Pauses::follow(&config.kafka, topic, &config.console_name(), pause_stop)
        });
    let ctx = Ctx {
        config,
        store: &store,
        sink_kind,
        shutdown: &shutdown,
        metrics: &metrics,
        lock: None,
        streaming: None,
        pauses: pauses.as_ref(),
    };
    let supervised = async {
        if let Some(Pooled {
            lease,
            instance,
            group,
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
