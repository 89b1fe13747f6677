//! `run`: the pipeline until a signal.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::args::SinkArg;
use crate::checkpoint::CheckpointStore;
use crate::config::Config;
use crate::monitor::{Metrics, RunLock};
use crate::pipeline::{self, FirstStart, SinkKind};

/// Streams until SIGINT/SIGTERM; `init` creates a missing checkpoint store first.
pub(super) async fn run(config: Config, sink: SinkArg, init: bool) -> Result<ExitCode> {
    let config = std::sync::Arc::new(config);
    // First: a stop asked during the start (an orchestrator's, a test's) is a stop.
    let shutdown = CancellationToken::new();
    cancel_on_signal(shutdown.clone());
    for key in &config.inline_secrets {
        warn!(key = %key, "a secret is written into the config file: reference it as \"${{env:VARIABLE}}\" or \"${{file:PATH}}\"");
    }
    if matches!(sink, SinkArg::Kafka) {
        // Before `--init` creates anything: a property this build cannot honour stops here.
        crate::kafka::check_properties(&config.kafka)
            .map_err(anyhow::Error::msg)
            .context("kafka.properties")?;
    }
    if init {
        let bound = Duration::from_secs(config.pipeline.shutdown_timeout_secs);
        let work = {
            let config = config.clone();
            tokio::spawn(async move { first_start(&config).await })
        };
        match crate::stop::until_stopped(work, &shutdown, bound).await {
            Some(done) => done.context("run --init")??,
            None => return Ok(ExitCode::SUCCESS),
        }
    }
    let shared = config.clone();
    let config = &*config;
    // From here on `status` calls this router starting, not stopped. Taken beside a
    // store that exists: a start refused for a missing one leaves nothing behind.
    let metrics = Metrics::default();
    let dir = &config.checkpoint.dir;
    match CheckpointStore::exists(dir).then(|| RunLock::take(dir)) {
        None => {}
        Some(Ok(lock)) => drop(tokio::spawn(lock.follow(metrics.router_state()))),
        Some(Err(e)) => {
            warn!(dir = %dir.display(), error = %e, "cannot hold the store's run lock: `status` calls this router stopped unless its endpoint answers")
        }
    }
    let sink = match sink {
        SinkArg::Kafka => SinkKind::Kafka,
        SinkArg::Stdout => SinkKind::Stdout,
        SinkArg::Null => SinkKind::Null,
    };
    // The endpoints answer until the pipeline has drained (a stop of its own).
    let monitor_stop = CancellationToken::new();
    let _monitor_stopped = monitor_stop.clone().drop_guard();
    start_monitor(shared, sink, &metrics, monitor_stop).await?;
    let mut duties = leader_duties();
    if sink == SinkKind::Kafka {
        duties.tracing = crate::monitor::traces::Tracing::start(
            &config.monitor.tracing,
            &config.ha.instance_name(),
        )
        .map_err(anyhow::Error::msg)
        .context("monitor.tracing")?;
    }
    let ran = pipeline::run(config, sink, shutdown, metrics, &duties).await;
    if let Some(tracing) = &duties.tracing {
        // The last events' spans, before the process ends.
        tracing.flush(Duration::from_secs(5)).await;
    }
    ran?;
    Ok(ExitCode::SUCCESS)
}

/// `--init`: creates a missing store where a first start is allowed and records the
/// first start on Kafka (exactly-once, or `checkpoint.name`); refuses where a position
/// may have existed. Said loudly: a first start happens once.
async fn first_start(config: &Config) -> Result<()> {
    let dir = &config.checkpoint.dir;
    let init = pipeline::init(config).await.context("run --init")?;
    let topic = &config.delivery.checkpoint_topic;
    let name = match config.delivery.exactly_once() {
        true => config.delivery.transactional_id.as_str(),
        false => config.checkpoint.name.as_deref().unwrap_or_default(),
    };
    if init.store_created {
        match (config.delivery.exactly_once(), &init.recorded) {
            (true, _) => {
                info!(dir = %dir.display(), "run --init: created a new checkpoint store (exactly-once: a cache of the commit marker on Kafka)")
            }
            (false, None) => {
                warn!(dir = %dir.display(), "run --init: created a new checkpoint store; this first run starts at source.start (set checkpoint.name so that a lost store is refused instead of starting over)")
            }
            (false, Some(_)) => {
                warn!(dir = %dir.display(), "run --init: created a new checkpoint store; this first run starts at source.start")
            }
        }
    }
    match init.recorded {
        Some(FirstStart::Recorded) => warn!(topic, name, start = ?config.source.start, "run --init: recorded this router's first start on the checkpoint topic; an init that finds no store after this refuses to start over"),
        Some(FirstStart::AlreadyRecorded) => warn!(topic, name, "run --init: the first exactly-once start was already recorded and nothing has committed since: starting where it was recorded"),
        Some(FirstStart::HasMarker | FirstStart::HasStore) | None => {}
    }
    Ok(())
}

/// Cancels `shutdown` at the first SIGINT or SIGTERM. The handlers are in place when
/// this returns (a signal from then on stops cleanly, never by the default action);
/// the wait runs on its own task.
pub(super) fn cancel_on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return;
    };
    tokio::spawn(async move {
        tokio::select! {
            _ = int.recv() => info!("SIGINT: finishing what is in flight, then stopping"),
            _ = term.recv() => info!("SIGTERM: finishing what is in flight, then stopping"),
        }
        shutdown.cancel();
    });
}

/// `run` with a pool file: this instance's part of the pool until a signal.
pub(super) async fn pool(
    path: &std::path::Path,
    source: Option<&str>,
    sink: SinkArg,
    init: bool,
    shadow: bool,
) -> Result<ExitCode> {
    let shutdown = CancellationToken::new();
    cancel_on_signal(shutdown.clone());
    if let Some(name) = source {
        anyhow::bail!("run --source {name}: a pool's sources run in the pool, led where its group assigns them; run without --source (operator commands take --source)");
    }
    if shadow || !matches!(sink, SinkArg::Kafka) {
        anyhow::bail!("a pool runs with the Kafka sink and without --shadow: run one source's file on its own for a dry run or a shadow");
    }
    let sources = std::sync::Arc::new(crate::pipeline::lookup::EventLookup::default());
    crate::pool::run(
        path,
        init,
        shutdown,
        sources.clone(),
        desk(sources),
        leader_duties(),
    )
    .await?;
    Ok(ExitCode::SUCCESS)
}

/// The monitor server and the fleet's reports for this router: its one source, its
/// event lookup. A dry run reports to no fleet.
async fn start_monitor(
    shared: std::sync::Arc<Config>,
    sink: SinkKind,
    metrics: &Metrics,
    stop: CancellationToken,
) -> Result<()> {
    let config = &*shared;
    let name = config.console_name();
    let served = crate::monitor::Served::single(
        config.ha.instance_name(),
        config.fleet_lock().map(|l| l.group),
        &name,
        metrics.clone(),
    );
    let kafka = (sink == SinkKind::Kafka).then_some(&config.kafka);
    let sources = std::sync::Arc::new(crate::pipeline::lookup::EventLookup::default());
    sources.insert(&name, std::sync::Arc::new(shared.clone()));
    let desk = match kafka {
        Some(_) => desk(sources),
        None => crate::monitor::server::Desk::default(),
    };
    crate::monitor::start(
        &config.monitor,
        kafka,
        std::sync::Arc::new(served),
        desk,
        stop,
    )
    .await
    .with_context(|| {
        format!(
            "cannot listen on monitor.listen = {}",
            config.monitor.listen
        )
    })
}

/// What a leader carries out for the fleet: the replays asked on the control topic.
fn leader_duties() -> pipeline::LeaderDuties {
    pipeline::LeaderDuties {
        replayer: Some(std::sync::Arc::new(crate::ops::console::LeaderReplay)),
        tracing: None,
    }
}

/// The console's event lookup, replay counts, parked aggregates and dead letters over
/// `sources`.
fn desk(
    sources: std::sync::Arc<crate::pipeline::lookup::EventLookup>,
) -> crate::monitor::server::Desk {
    let replay = crate::ops::console::ConsoleReplay {
        sources: sources.clone(),
    };
    let parking = crate::ops::console::ConsoleParking {
        sources: sources.clone(),
    };
    let dead_letters = crate::ops::console::ConsoleDeadLetters {
        sources: sources.clone(),
    };
    crate::monitor::server::Desk {
        dead_letters: Some(std::sync::Arc::new(dead_letters)),
        lookup: Some(sources),
        replay: Some(std::sync::Arc::new(replay)),
        parking: Some(std::sync::Arc::new(parking)),
    }
}
