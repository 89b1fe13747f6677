//! `import-debezium`: a config from a Debezium connector's, and its stored offset as
//! the first checkpoint.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::config::Config;
use crate::ops::import::offsets::OffsetStore;
use crate::ops::import::take_over_offset;

/// Prints the imported config; unmapped keys go to stderr.
pub(super) fn run(file: &Path) -> Result<ExitCode> {
    let settings = read_connector(file)?;
    let imported = crate::ops::import::import(&settings);
    print!("{}", imported.toml);
    eprintln!("set before starting (the config references them; no value was copied):");
    for (var, holds) in &imported.env {
        eprintln!("  {var}: {holds}");
    }
    if !imported.unmapped.is_empty() {
        eprintln!("not carried over ({}):", imported.unmapped.len());
        for (key, reason) in &imported.unmapped {
            eprintln!("  {key}: {reason}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads the connector's stored offset and writes it as the first checkpoint
/// (`ops::import::take_over_offset`).
pub(super) async fn offsets(
    config: &Config,
    file: &Path,
    store: &str,
    ignore_prepared_xa: bool,
) -> Result<ExitCode> {
    let settings = read_connector(file)?;
    let store: OffsetStore = store.parse()?;
    let taken = take_over_offset(config, &settings, &store, ignore_prepared_xa).await?;
    println!(
        "checkpoint set to {} from connector {:?}'s offset in the {store}{}: {}",
        taken.position,
        taken.connector,
        if taken.by_gtid {
            " (resumes by GTID)"
        } else {
            ""
        },
        taken.fleet
    );
    if let Some(events) = taken.events_into_transaction {
        println!(
            "Debezium stopped {events} binlog event(s) into the transaction at {}: the router sends that transaction again from its start (what Debezium had sent of it goes twice, with the same event ids)",
            taken.position.file_offset()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The connector settings in `file` (JSON or .properties).
fn read_connector(file: &Path) -> Result<BTreeMap<String, String>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    crate::ops::import::parse_connector(&text)
        .with_context(|| format!("reading {}", file.display()))
}
