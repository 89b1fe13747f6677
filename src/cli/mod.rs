//! One module per subcommand; `dispatch` picks it.
//!
//! Exit codes (also in docs/operating.md):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (`status`: ok) |
//! | 1 | error, printed once with its cause chain (`status`: warning) |
//! | 2 | `status`: critical |
//! | 3 | `run`: the checkpoint's binlog was purged, run `recover` or set `source.archive_dir` (`status`: unknown) |
//! | 4 | `run`: no safe position to start from (a lost store or commit marker, another server's checkpoint, no store without `--init`): an operator must set one, as the message says; restarting cannot help |
//! | 64 | usage error: unknown flag, missing argument (sysexits' EX_USAGE) |

pub mod args;
mod audit;
mod checkpoint;
mod docs;
mod health;
mod import;
mod prune;
mod reconcile;
mod recover;
mod replay;
mod run;
mod status;
mod validate;

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use crate::checkpoint::CheckpointError;
use crate::config::Config;
use crate::pipeline::PipelineError;
use args::{Cli, Command};

/// A usage error (sysexits' EX_USAGE): not 2, which `status` uses for CRITICAL.
pub const EXIT_USAGE: u8 = 64;
/// `run`: the checkpoint's binlog file is gone from the server.
const EXIT_PURGED: u8 = 3;
/// `run`: no safe start position; an operator must set one.
const EXIT_NEEDS_OPERATOR: u8 = 4;
/// `status`: it cannot tell (Nagios UNKNOWN).
const EXIT_UNKNOWN: u8 = 3;

/// Runs the command; the config file is read only by commands that use it.
pub async fn dispatch(cli: Cli) -> Result<ExitCode> {
    let is_pool = crate::pool::Pool::is_pool_file(&cli.config);
    let source = cli.source.as_deref();
    let config = || load_config(&cli.config, is_pool, source);
    match cli.command {
        Command::Run { sink, init, shadow } if is_pool => {
            run::pool(&cli.config, source, sink, init, shadow).await
        }
        Command::Validate if is_pool && source.is_none() => validate::pool(&cli.config).await,
        Command::Completions { shell } => docs::completions(shell),
        Command::Man => docs::man(),
        Command::ImportDebezium {
            file,
            offsets: None,
            ..
        } => import::run(&file),
        Command::ImportDebezium {
            file,
            offsets: Some(store),
            ignore_prepared_xa,
        } => import::offsets(&config()?, &file, &store, ignore_prepared_xa).await,
        Command::Run {
            sink,
            init,
            shadow: true,
        } => run::run(config()?.into_shadow(), sink, init).await,
        Command::Run { sink, init, .. } => run::run(config()?, sink, init).await,
        Command::Validate => validate::run(&config()?).await,
        Command::Status {
            json,
            detect_hours,
            repair_hours,
        } => status::run(&config()?, json, detect_hours, repair_hours).await,
        Command::Recover(args) => recover::run(&config()?, args).await,
        Command::Prune(args) => prune::run(&config()?, args).await,
        Command::Replay(args) => replay::run(&config()?, args).await,
        Command::Audit { json } => audit::run(&config()?, json),
        Command::Reconcile(args) => reconcile::run(&cli.config, config()?, args).await,
        Command::Checkpoint { action } => checkpoint::run(&config()?, action).await,
        Command::Health { ready } => health::run(&config()?, ready).await,
    }
}

/// The configuration an operator command acts on: the file's, or a pool's source's.
fn load_config(path: &Path, is_pool: bool, source: Option<&str>) -> Result<Config> {
    match (is_pool, source) {
        (false, None) => Ok(Config::load(path)?),
        (false, Some(name)) => anyhow::bail!(
            "--source {name}: {} is not a pool file (it has no [pool] section); --source names one of a pool's sources",
            path.display()
        ),
        (true, None) => anyhow::bail!(
            "{} is a pool file: name the source this command acts on with --source NAME",
            path.display()
        ),
        (true, Some(name)) => {
            let pool = crate::pool::Pool::load(path)?;
            let index = pool
                .sources
                .iter()
                .position(|s| s.name == name)
                .ok_or_else(|| anyhow::anyhow!(pool.source(name).unwrap_err()))?;
            Ok(pool.sources.into_iter().nth(index).expect("found").config)
        }
    }
}

/// The exit code of a failed command.
pub fn exit_code_of(e: &anyhow::Error) -> ExitCode {
    let purged = e.chain().any(|c| {
        c.downcast_ref::<PipelineError>()
            .is_some_and(PipelineError::is_purged)
    });
    let needs_operator = e.chain().any(|c| {
        c.downcast_ref::<PipelineError>()
            .is_some_and(PipelineError::needs_operator)
            || c.downcast_ref::<CheckpointError>()
                .is_some_and(|e| matches!(e, CheckpointError::Missing { .. }))
    });
    if purged {
        ExitCode::from(EXIT_PURGED)
    } else if needs_operator {
        ExitCode::from(EXIT_NEEDS_OPERATOR)
    } else {
        ExitCode::FAILURE
    }
}

/// The plain answer of a read-only command pointed at a directory without a store.
fn no_store_at(dir: &Path) -> String {
    format!(
        "no checkpoint at {}: there is no checkpoint store in that directory (is checkpoint.dir right? a first start creates one with `checkpoint init` or `run --init`)",
        dir.display()
    )
}
