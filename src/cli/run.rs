//! `run`: the pipeline until a signal.

use std::process::ExitCode;

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::args::SinkArg;
use outbox_router::checkpoint::CheckpointStore;
use outbox_router::config::Config;
use outbox_router::monitor::Metrics;
use outbox_router::pipeline::{self, FirstStart, SinkKind};
use outbox_router::sink::KafkaSink;

/// Streams until SIGINT/SIGTERM; `init` creates a missing checkpoint store first.
pub(super) async fn run(config: &Config, sink: SinkArg, init: bool) -> Result<ExitCode> {
    for key in &config.inline_secrets {
        warn!(key = %key, "a secret is written into the config file: reference it as \"${{env:VARIABLE}}\" or \"${{file:PATH}}\"");
    }
    if matches!(sink, SinkArg::Kafka) {
        // Before `--init` creates anything: a property this build cannot honour stops here.
        KafkaSink::check_properties(&config.kafka).context("kafka.properties")?;
    }
    if init {
        first_start(config).await?;
    }
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let sink = match sink {
        SinkArg::Kafka => SinkKind::Kafka,
        SinkArg::Stdout => SinkKind::Stdout,
        SinkArg::Null => SinkKind::Null,
    };
    pipeline::run(config, sink, shutdown, Metrics::default()).await?;
    Ok(ExitCode::SUCCESS)
}

/// `--init`: creates a missing store and, in exactly-once mode, records the first start
/// on the checkpoint topic where no position exists anywhere (refusing where one may
/// have existed). Both are said loudly: a first start happens once.
async fn first_start(config: &Config) -> Result<()> {
    let dir = &config.checkpoint.dir;
    if !CheckpointStore::exists(dir) {
        CheckpointStore::create(dir)?;
        match config.delivery.exactly_once() {
            true => {
                info!(dir = %dir.display(), "run --init: created a new checkpoint store (exactly-once: a cache of the commit marker on Kafka)")
            }
            false => {
                warn!(dir = %dir.display(), "run --init: created a new checkpoint store; this first run starts at source.start")
            }
        }
    }
    if !config.delivery.exactly_once() {
        return Ok(());
    }
    let store = CheckpointStore::peek(dir)?;
    let delivery = &config.delivery;
    let (topic, id) = (&delivery.checkpoint_topic, &delivery.transactional_id);
    match pipeline::record_first_start(config, store.as_ref())
        .await
        .context("run --init")?
    {
        FirstStart::Recorded => warn!(topic, transactional_id = id, start = ?config.source.start, "run --init: no commit marker, stored position or trace of one exists: recorded the first exactly-once start on the checkpoint topic; this run starts at source.start"),
        FirstStart::AlreadyRecorded => warn!(topic, transactional_id = id, "run --init: the first exactly-once start was already recorded and nothing has committed since: starting at source.start"),
        FirstStart::HasMarker | FirstStart::HasStore => {}
    }
    Ok(())
}

/// Cancels `shutdown` at the first SIGINT or SIGTERM.
pub(super) async fn cancel_on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => info!("SIGINT: finishing what is in flight, then stopping"),
        _ = term.recv() => info!("SIGTERM: finishing what is in flight, then stopping"),
    }
    shutdown.cancel();
}
