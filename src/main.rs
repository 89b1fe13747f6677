//! The `outbox-router` command line: parses, sets up logging, dispatches to the
//! library's `cli`, and turns the outcome into an exit code (the table is in
//! `cli/exit.rs` and docs/operating.md).

use std::process::ExitCode;

use clap::Parser;

use outbox_router::cli::{
    self,
    args::{Cli, LogFormat},
};

/// glibc's malloc spent about 40 % of the router's CPU in profiles (binlog rows and Kafka
/// records are many small, short-lived allocations); mimalloc serves them from
/// thread-local pages. Built with `no_thp`: its eagerly committed arenas otherwise sit on
/// transparent huge pages and triple the resident set.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
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
    let code = match runtime.block_on(cli::dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("outbox-router: error: {}", outbox_router::cause_chain(&e));
            cli::exit_code_of(&e)
        }
    };
    // Work given up on a stop may still sit in a blocking call (a broker's answer can
    // take a minute): the command is over, so is the process.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    code
}

/// Help and version go to stdout (exit 0); a usage error to stderr with exit 64
/// (sysexits' EX_USAGE), never 2, which `status` uses for CRITICAL as monitoring plugins
/// expect.
fn usage_error(e: clap::Error) -> ExitCode {
    let _ = e.print();
    if e.use_stderr() {
        ExitCode::from(cli::EXIT_USAGE)
    } else {
        ExitCode::SUCCESS
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
