//! `import-debezium`: a config from a Debezium connector's.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

/// Prints the imported config; unmapped keys go to stderr.
pub(super) fn run(file: &Path) -> Result<ExitCode> {
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
