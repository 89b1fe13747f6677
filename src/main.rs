//! The `outbox-router` command line. Library code does the work; this file parses
//! arguments, sets up logging and signals, and turns errors into exit codes.
//!
//! Exit codes: 0 success, 1 error (the message says what and where), 2 usage error,
//! 3 the checkpoint's binlog was purged (run `recover`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;
use tracing::info;

use outbox_router::checkpoint::{Checkpoint, CheckpointStore};
use outbox_router::config::Config;
use outbox_router::monitor::Metrics;
use outbox_router::monitor::Status;
use outbox_router::pipeline::{self, PipelineError, SinkKind};
use outbox_router::recover::{recover, RecoverOptions};
use outbox_router::source;

/// glibc's malloc spent about 40 % of the router's CPU in profiles (binlog rows and Kafka
/// records are many small, short-lived allocations); mimalloc serves them from
/// thread-local pages. Built with `no_thp`: its eagerly committed arenas otherwise sit on
/// transparent huge pages and triple the resident set.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit code when the checkpoint's binlog file is gone from the server.
const EXIT_PURGED: u8 = 3;
/// `status` exit code when it cannot tell (Nagios UNKNOWN).
const EXIT_UNKNOWN: u8 = 3;
use outbox_router::source::Position;

#[derive(Parser)]
#[command(
    name = "outbox-router",
    version,
    about = "Transactional outbox → Kafka, from the MySQL / MariaDB binlog"
)]
struct Cli {
    /// Configuration file (TOML).
    #[arg(
        short,
        long,
        env = "OUTBOX_ROUTER_CONFIG",
        default_value = "outbox-router.toml",
        global = true
    )]
    config: PathBuf,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Stream the binlog and publish outbox events until SIGINT/SIGTERM.
    Run {
        /// Where records go: kafka, or stdout (JSON lines) for a dry run.
        #[arg(long, value_enum, default_value_t = SinkArg::Kafka)]
        sink: SinkArg,
        /// Create the checkpoint store when it does not exist (a first start). Without
        /// it a missing store is an error: a lost volume must not start over silently.
        #[arg(long)]
        init: bool,
    },
    /// Check server settings, privileges, outbox columns and Kafka; exit 1 on any problem.
    Validate,
    /// After a purge (exit code 3): re-publish outbox rows that may have committed after
    /// the checkpoint, with their original event ids, and move the checkpoint to now.
    Recover {
        /// DATETIME/TIMESTAMP column saying when a row was written
        /// [default: outbox.columns.timestamp, else created_at].
        #[arg(long)]
        timestamp_column: Option<String>,
        /// Seconds of slack before the checkpoint's commit time (clocks, time zones).
        #[arg(long, default_value_t = 600)]
        margin_secs: u64,
        /// The longest your transactions stay open: a row's timestamp is its INSERT's
        /// time, its COMMIT may come this much later.
        #[arg(long, default_value_t = 3600)]
        longest_transaction_secs: u64,
        /// Re-publish rows written from this unix time on, instead of checkpoint − margins.
        #[arg(long)]
        since: Option<i64>,
        /// Count the rows that would be re-published; send nothing, keep the checkpoint.
        #[arg(long)]
        dry_run: bool,
        /// Move the checkpoint even when no row is in the window.
        #[arg(long)]
        allow_empty: bool,
    },
    /// Checkpoint, server position, lag, retention runway and a verdict; works whether the
    /// router runs or not. Exit 0 ok, 1 warning, 2 critical, 3 unknown.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Hours your alerting needs to notice a dead router (retention budget).
        #[arg(long)]
        detect_hours: Option<f64>,
        /// Hours you need to repair it (retention budget).
        #[arg(long)]
        repair_hours: Option<f64>,
    },
    /// Print an outbox-router config (TOML) made from a Debezium MySQL / MariaDB connector
    /// config (JSON as posted to Kafka Connect, or .properties); unmapped keys go to stderr.
    ImportDebezium {
        /// The connector config file.
        file: PathBuf,
    },
    /// Inspect or change the stored checkpoint (stop the router first).
    Checkpoint {
        #[command(subcommand)]
        action: CheckpointAction,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum SinkArg {
    Kafka,
    Stdout,
    /// Discard records (measures reading, mapping and routing alone); the checkpoint
    /// still advances, so only with a scratch checkpoint directory.
    Null,
}

#[derive(Subcommand)]
enum CheckpointAction {
    /// Print the stored position.
    Show {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Store a position (FILE:OFFSET [gtid=D-S-N,...]); it must be a transaction boundary.
    Set { position: String },
    /// Create an empty checkpoint store for a first start (`run` refuses a missing one).
    Init,
    /// Remove the checkpoint; the next run starts at `source.start`.
    Reset {
        /// Confirm: events after the old position may be skipped or re-sent.
        #[arg(long)]
        yes: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Reads FAILPOINTS in test builds (feature `failpoints`); nothing otherwise.
    let _failpoints = fail::FailScenario::setup();
    init_logging(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("outbox-router: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("outbox-router: error: {e:#}");
            let purged = e.chain().any(|c| {
                c.downcast_ref::<PipelineError>()
                    .is_some_and(PipelineError::is_purged)
            });
            if purged {
                ExitCode::from(EXIT_PURGED)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("OUTBOX_ROUTER_LOG").unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new("info,rdkafka=warn,mysql_async=warn")
        });
    // Colours only for a terminal: log files and collectors get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn dispatch(cli: Cli) -> Result<ExitCode> {
    if let Command::ImportDebezium { file } = &cli.command {
        return import_debezium(file);
    }
    let config = Config::load(&cli.config)?;
    match cli.command {
        Command::Run { sink, init } => {
            if init && !CheckpointStore::exists(&config.checkpoint.dir) {
                CheckpointStore::create(&config.checkpoint.dir)?;
                info!(dir = %config.checkpoint.dir.display(), "run --init: created a new checkpoint store; this first run starts at source.start");
            }
            run(&config, sink).await
        }
        Command::ImportDebezium { file } => import_debezium(&file),
        Command::Validate => validate(&config).await,
        Command::Status {
            json,
            detect_hours,
            repair_hours,
        } => {
            let thresholds = config.monitor.thresholds(detect_hours, repair_hours);
            match status(&config).await {
                Ok(mut st) => {
                    st.judge(&thresholds);
                    print_status(&st, json)?;
                    Ok(ExitCode::from(st.verdict.exit_code()))
                }
                Err(e) => {
                    println!("UNKNOWN: {e:#}");
                    Ok(ExitCode::from(EXIT_UNKNOWN))
                }
            }
        }
        Command::Recover {
            timestamp_column,
            margin_secs,
            longest_transaction_secs,
            since,
            dry_run,
            allow_empty,
        } => {
            let opts = RecoverOptions {
                timestamp_column: timestamp_column
                    .or_else(|| config.outbox.columns.timestamp.clone())
                    .unwrap_or_else(|| "created_at".into()),
                margin: std::time::Duration::from_secs(margin_secs),
                longest_transaction: std::time::Duration::from_secs(longest_transaction_secs),
                since_secs: since,
                dry_run,
                allow_empty,
            };
            let report = recover(&config, &opts).await?;
            if report.dry_run {
                println!(
                    "dry run: {} event(s) written since unix time {} would be re-published; the checkpoint would move to {}; nothing sent, nothing changed",
                    report.events, report.since_secs, report.checkpoint
                );
                return Ok(ExitCode::SUCCESS);
            }
            println!(
                "re-published {} event(s) written since unix time {} (original event ids kept)",
                report.events, report.since_secs
            );
            println!(
                "checkpoint set to {}; start the router again to resume streaming",
                report.checkpoint
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Checkpoint { action } => checkpoint(&config, action),
    }
}

async fn run(config: &Config, sink: SinkArg) -> Result<ExitCode> {
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

async fn cancel_on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => info!("SIGINT: finishing in-flight deliveries, then stopping"),
        _ = term.recv() => info!("SIGTERM: finishing in-flight deliveries, then stopping"),
    }
    shutdown.cancel();
}

async fn validate(config: &Config) -> Result<ExitCode> {
    let findings = outbox_router::validate::validate(config).await;
    let mut failed = 0;
    for f in &findings {
        if f.ok {
            println!("ok    {}: {}", f.check, f.detail);
        } else {
            failed += 1;
            println!("FAIL  {}: {}", f.check, f.detail);
            if !f.fix.is_empty() {
                println!("      fix: {}", f.fix);
            }
        }
    }
    if failed == 0 {
        println!("all {} checks passed", findings.len());
        Ok(ExitCode::SUCCESS)
    } else {
        println!("{failed} problem(s) found");
        Ok(ExitCode::FAILURE)
    }
}

/// Asks the running router first; when it does not answer, reads the store and the server.
async fn status(config: &Config) -> Result<Status> {
    if let Some(addr) = config.monitor.listen_addr() {
        let url = format!("http://{addr}/status");
        let client = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(3))
            .build()?;
        if let Ok(resp) = client.get(&url).send().await {
            if resp.status().is_success() {
                return resp
                    .json::<Status>()
                    .await
                    .with_context(|| format!("reading {url}"));
            }
        }
    }
    let dir = &config.checkpoint.dir;
    if !CheckpointStore::exists(dir) {
        bail!("{}", no_store_at(dir));
    }
    let checkpoint = CheckpointStore::peek(dir)
        .context("the router's endpoint did not answer and its checkpoint store is not readable")?;
    let mut conn = source::connect(&config.source).await?;
    Ok(
        outbox_router::monitor::status::observe(&mut conn, checkpoint.as_ref(), false, None)
            .await?,
    )
}

/// The plain answer of a read-only command pointed at a directory without a store.
fn no_store_at(dir: &std::path::Path) -> String {
    format!(
        "no checkpoint at {}: there is no checkpoint store in that directory (is checkpoint.dir right? a first start creates one with `checkpoint init` or `run --init`)",
        dir.display()
    )
}

fn print_status(st: &Status, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(st)?);
        return Ok(());
    }
    let verdict = format!("{:?}", st.verdict).to_uppercase();
    println!("{verdict}: router {}", st.router);
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    println!("  checkpoint:      {}", opt(st.checkpoint.clone()));
    println!("  server position: {}", st.server_position);
    println!(
        "  bytes behind:    {}",
        opt(st.bytes_behind.map(|b| b.to_string()))
    );
    let lag = st.lag_ms.map_or_else(
        || "unknown (no commit time yet)".to_string(),
        |l| format!("{:.1} s", l as f64 / 1000.0),
    );
    println!("  lag:             {lag}");
    let retention = match st.retention_secs {
        Some(r) => format!("{r} s ({:.1} h)", r as f64 / 3600.0),
        None => "none (binlogs never expire)".into(),
    };
    println!("  retention:       {retention}");
    let runway = match (st.purged, st.runway_secs) {
        (true, _) => "0 (purged)".to_string(),
        (false, Some(r)) => format!("{r} s ({:.1} h)", r as f64 / 3600.0),
        (false, None) if st.runway_unknown => {
            "unknown until the first transaction is acknowledged (the start position has no commit time)".into()
        }
        (false, None) => "unbounded".into(),
    };
    println!("  runway:          {runway}");
    if let Some(live) = &st.live {
        println!("  reader:          {}", opt(live.reader_position.clone()));
        println!(
            "  in flight:       {} record(s), {:.0} s without a delivery",
            live.in_flight_records, live.delivery_stall_secs
        );
        let ready = match &live.not_ready_reason {
            None => "yes".to_string(),
            Some(why) => format!("no: {why}"),
        };
        println!("  ready:           {ready}");
    }
    if let Some(b) = &st.budget {
        println!("  budget:          {b}");
    }
    for r in &st.reasons {
        println!("  - {r}");
    }
    Ok(())
}

fn import_debezium(file: &std::path::Path) -> Result<ExitCode> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let settings = outbox_router::import::parse_connector(&text)
        .with_context(|| format!("reading {}", file.display()))?;
    let imported = outbox_router::import::import(&settings);
    print!("{}", imported.toml);
    if !imported.unmapped.is_empty() {
        eprintln!("not carried over ({}):", imported.unmapped.len());
        for (key, reason) in &imported.unmapped {
            eprintln!("  {key}: {reason}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn checkpoint(config: &Config, action: CheckpointAction) -> Result<ExitCode> {
    let dir = &config.checkpoint.dir;
    match action {
        CheckpointAction::Show { .. } if !CheckpointStore::exists(dir) => {
            bail!("{}", no_store_at(dir))
        }
        CheckpointAction::Show { json } => match CheckpointStore::peek(dir)? {
            None if json => println!("null"),
            None => println!(
                "no checkpoint in {} (the next run starts at source.start)",
                dir.display()
            ),
            Some(cp) if json => println!("{}", serde_json::to_string(&cp)?),
            Some(cp) => {
                println!("position: {}", cp.position);
                println!("commit_time_ms: {}", cp.commit_time_ms);
                println!("written_at_ms: {}", cp.written_at_ms);
            }
        },
        CheckpointAction::Set { position } => {
            let position: Position = position.parse().context("checkpoint set")?;
            let store = CheckpointStore::create(dir)?;
            let written_at_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0);
            store.save(&Checkpoint {
                position: position.clone(),
                commit_time_ms: 0,
                written_at_ms,
            })?;
            println!("checkpoint set to {position}");
        }
        CheckpointAction::Reset { yes } => {
            if !yes {
                bail!("checkpoint reset forgets where the router stopped; repeat with --yes to confirm");
            }
            CheckpointStore::open(dir)?.reset()?;
            println!("checkpoint removed from {}", dir.display());
        }
        CheckpointAction::Init => {
            if CheckpointStore::exists(dir) {
                println!(
                    "checkpoint store {} already exists; nothing changed",
                    dir.display()
                );
            } else {
                CheckpointStore::create(dir)?;
                println!(
                    "checkpoint store created in {}; the first run starts at source.start",
                    dir.display()
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
