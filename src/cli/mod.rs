//! One module per subcommand; `dispatch` picks it. Exit codes: `exit.rs`.

pub mod args;
mod audit;
mod checkpoint;
mod docs;
mod exit;
mod fleet;
mod health;
mod import;
mod monitor_url;
mod parked;
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

use crate::config::Config;
use args::{Cli, Command};
pub use exit::{exit_code_of, EXIT_USAGE};

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
        Command::Parked { action } => parked::run(&config()?, action).await,
        Command::Reconcile(args) => reconcile::run(&cli.config, config()?, args).await,
        Command::Checkpoint { action } => checkpoint::run(&config()?, action).await,
        Command::Fleet {
            json,
            url: Some(url),
            ca_file,
        } => {
            fleet::check_url(&url)?;
            let asked = fleet::Asked::Url {
                url,
                ca_file: ca_file.as_deref(),
            };
            fleet::run(asked, json).await
        }
        Command::Fleet { json, .. } => fleet::run(fleet::Asked::Config(&config()?), json).await,
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
