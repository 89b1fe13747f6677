//! `run`: the pipeline until a signal.

use std::process::ExitCode;

use anyhow::{Context, Result};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::args::SinkArg;
use outbox_router::checkpoint::CheckpointStore;
use outbox_router::config::Config;
use outbox_router::monitor::Metrics;
use outbox_router::pipeline::{self, SinkKind};
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
    if init && !CheckpointStore::exists(&config.checkpoint.dir) {
        CheckpointStore::create(&config.checkpoint.dir)?;
        info!(dir = %config.checkpoint.dir.display(), "run --init: created a new checkpoint store; this first run starts at source.start");
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
