//! `import-debezium`: a config from a Debezium connector's, and its stored offset as
//! the first checkpoint.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use outbox_router::checkpoint::{Checkpoint, CheckpointStore, OperatorCommand};
use outbox_router::config::Config;
use outbox_router::ops::import::offsets::{self, ConnectorKey, OffsetStore};
use outbox_router::source::server::{refuse_move_past_prepared_xa, resume_by_gtid};
use outbox_router::source::{self, server};

/// Prints the imported config; unmapped keys go to stderr.
pub(super) fn run(file: &Path) -> Result<ExitCode> {
    let settings = read_connector(file)?;
    let imported = outbox_router::ops::import::import(&settings);
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

/// Reads the connector's stored offset and writes it as the first checkpoint, after
/// checking the source can still serve it (as a checkpoint's would be on start).
pub(super) async fn offsets(
    config: &Config,
    file: &Path,
    store: &str,
    ignore_prepared_xa: bool,
) -> Result<ExitCode> {
    let settings = read_connector(file)?;
    let key = ConnectorKey::of(&settings)?;
    let store: OffsetStore = store.parse()?;
    let offset = tokio::task::block_in_place(|| offsets::read(&store, &key, &config.kafka))?;
    let position = offset
        .position()
        .map_err(|reason| anyhow::anyhow!("Debezium's offset: {reason}"))?;

    let dir = &config.checkpoint.dir;
    let checkpoints = CheckpointStore::create(dir)?;
    if let Some(existing) = checkpoints.load()? {
        bail!(
            "the router already has a checkpoint in {} ({}): importing would move it; `checkpoint reset --yes` first if that is what you want",
            dir.display(),
            existing.position
        );
    }

    let mut conn = source::connect(&config.source).await?;
    refuse_move_past_prepared_xa(&mut conn, "import-debezium --offsets", ignore_prepared_xa)
        .await?;
    let flavor = server::flavor(&mut conn).await?;
    let by_gtid = resume_by_gtid(&config.source, &mut conn, flavor, &position)
        .await
        .with_context(|| {
            format!(
                "Debezium's offset of connector {:?} ({position}) cannot be used on this server",
                key.name
            )
        })?;
    let ours = server::server_id(&mut conn).await?;
    if let Some(theirs) = offset.server_id {
        if theirs != u64::from(ours) && !by_gtid {
            bail!(
                "Debezium's offset of connector {:?} is a position in the binlog of server {theirs}, and {}:{} is server {ours}: file positions only mean something on the server that wrote them; point source at that server, or use GTIDs",
                key.name,
                config.source.host,
                config.source.port
            );
        }
    }

    let commit_time_ms = offset.ts_sec.map_or(0, |s| s * 1000);
    checkpoints.save(
        &Checkpoint::new(position.clone(), commit_time_ms)
            .on_server(ours)
            .set_by(OperatorCommand::ImportDebezium),
    )?;
    println!(
        "checkpoint set to {position} from connector {:?}'s offset in the {store}{}",
        key.name,
        if by_gtid { " (resumes by GTID)" } else { "" }
    );
    if offset.inside_transaction() {
        println!(
            "Debezium stopped {} binlog event(s) into the transaction at {}: the router sends that transaction again from its start (what Debezium had sent of it goes twice, with the same event ids)",
            offset.event,
            position.file_offset()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The connector settings in `file` (JSON or .properties).
fn read_connector(file: &Path) -> Result<BTreeMap<String, String>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    outbox_router::ops::import::parse_connector(&text)
        .with_context(|| format!("reading {}", file.display()))
}
