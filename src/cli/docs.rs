//! `completions` and `man`: generated from the clap definitions, so they cannot drift.

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::CommandFactory;

use super::args::Cli;

/// Prints `shell`'s completion script.
pub(super) fn completions(shell: clap_complete::Shell) -> Result<ExitCode> {
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, "outbox-router", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

/// Prints the man page.
pub(super) fn man() -> Result<ExitCode> {
    clap_mangen::Man::new(Cli::command())
        .render(&mut std::io::stdout())
        .context("writing the man page")?;
    Ok(ExitCode::SUCCESS)
}
