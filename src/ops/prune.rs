//! `prune`: delete outbox rows that are provably delivered, in small primary-key-ordered
//! batches, each its own short transaction.
//!
//! "Provably delivered" is checked, not guessed from timestamps: a round of batches'
//! primary keys is selected inside a consistent snapshot whose exact binlog position
//! the server reports (`binlog_snapshot_position`). Every row visible there belongs to a
//! transaction that ends at or before that position, so once the durable checkpoint is
//! at or past it, every selected row has been acknowledged by Kafka. Only those keys are
//! deleted (`DELETE … WHERE pk IN (…)`), never "whatever is old now": a long transaction
//! that commits old-looking rows after the checkpoint is not in the snapshot, or the
//! checkpoint is not past it yet. The age (`--older-than`) and the checkpoint's commit
//! time minus a margin bound the selection on top of that.
//!
//! The router sees these DELETEs in the binlog and ignores them (`outbox_router_events_ignored_total`).

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Value};
use tokio_util::sync::CancellationToken;

use super::OpsError;
use crate::checkpoint::CheckpointConfig;
use crate::checkpoint::{Checkpoint, CheckpointStore};
use crate::config::OpsConfig;
use crate::outbox::OutboxConfig;
use crate::position::{Position, TableName};
use crate::progress::CommandProgress;
use crate::source::SourceConfig;
use crate::source::{self, server, SourceError};

/// What to delete and how fast.
#[derive(Debug, Clone)]
pub struct PruneOptions {
    /// Only rows whose timestamp column is older than this.
    pub older_than: Duration,
    /// DATETIME/TIMESTAMP column saying when a row was written.
    pub timestamp_column: String,
    /// Rows per batch (one transaction each).
    pub batch: usize,
    /// Rows per second at most; `None` for no pause between batches.
    pub rate: Option<f64>,
    /// Subtracted from the checkpoint's commit time (clocks, time zones).
    pub margin: Duration,
    /// How long a batch waits for the checkpoint to pass its snapshot before stopping.
    pub wait: Duration,
    /// Copy the rows into this table (`db.table`, or a table in the outbox's database)
    /// in the same transaction before deleting them.
    pub archive: Option<String>,
    /// Count what would be deleted; delete nothing.
    pub dry_run: bool,
}

/// What one table's prune did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TablePruned {
    /// The outbox table.
    pub table: String,
    /// Rows deleted (with `dry_run`: that would be).
    pub rows: u64,
    /// Batches (transactions).
    pub batches: u64,
    /// Rows copied into the archive table.
    pub archived: u64,
    /// Rows old enough but kept because their events are parked.
    pub parked_kept: u64,
}

/// What `prune` did, per table; `stopped` when a signal ended it early.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PruneReport {
    /// Per outbox table.
    pub tables: Vec<TablePruned>,
    /// True when nothing was deleted on purpose.
    pub dry_run: bool,
    /// True when a signal stopped it between batches.
    pub stopped: bool,
}

/// Batches deleted on one proof (one snapshot, one wait for the checkpoint).
const BATCHES_PER_ROUND: usize = 50;

fn quote(s: &str) -> String {
    format!("`{}`", s.replace('`', "``"))
}

fn qualified(t: &TableName) -> String {
    format!("{}.{}", quote(&t.database), quote(&t.table))
}

fn query_error(query: &'static str) -> impl Fn(mysql_async::Error) -> SourceError {
    move |source| SourceError::Query { query, source }
}

/// The sections of the configuration `prune` reads.
#[derive(Clone, Copy)]
pub struct PruneSections<'a> {
    /// The server (prune connects as `ops.user`).
    pub source: &'a SourceConfig,
    /// Which tables are outboxes.
    pub outbox: &'a OutboxConfig,
    /// Where the durable checkpoint that proves delivery is.
    pub checkpoint: &'a CheckpointConfig,
    /// Prune's user and password.
    pub ops: &'a OpsConfig,
    /// Where the parking topic is read (`on_invalid = "park"`: a parked row is kept).
    pub kafka: &'a crate::kafka::KafkaConfig,
    /// The event id column (a parked event is known by its id).
    pub event_id_column: &'a str,
}

/// Deletes provably delivered rows from every outbox table; see the module doc.
pub async fn prune(
    sections: PruneSections<'_>,
    opts: &PruneOptions,
    stop: &CancellationToken,
) -> Result<PruneReport, OpsError> {
    let PruneSections {
        source,
        outbox,
        checkpoint,
        ops,
        kafka,
        event_id_column,
    } = sections;
    // Parked rows are kept: a release reads them again (a fixed row goes out fixed).
    let parking = (outbox.on_invalid == crate::outbox::OnInvalid::Park)
        .then_some((kafka, outbox.parking.topic.as_str()));
    let user = ops.user.as_deref().ok_or(OpsError::NoPruneUser)?;
    let mut conn = source::connect_as(source, user, ops.password()?).await?;
    server::require_mariadb(&mut conn, server::SnapshotFeature::Prune).await?;
    let mut report = PruneReport {
        dry_run: opts.dry_run,
        ..Default::default()
    };
    for table in server::matching_tables(&mut conn, &outbox.table_patterns()).await? {
        let pk = primary_key(&mut conn, &table).await?;
        let mut pruner = TablePruner {
            checkpoint_dir: &checkpoint.dir,
            opts,
            table: &table,
            pk: &pk,
            event_id: event_id_column,
            parking,
            done: TablePruned {
                table: table.to_string(),
                ..Default::default()
            },
            progress: CommandProgress::new(
                if opts.dry_run {
                    "prune --dry-run: rows that would be deleted"
                } else {
                    "prune: rows deleted"
                },
                None,
            ),
        };
        let result = pruner.run(&mut conn, stop).await;
        pruner.progress.finish();
        tracing::info!(table = %table, rows = pruner.done.rows, batches = pruner.done.batches, dry_run = opts.dry_run, "prune");
        report.tables.push(pruner.done);
        result?;
        if stop.is_cancelled() {
            report.stopped = true;
            break;
        }
    }
    Ok(report)
}

/// The one-column primary key of `table`.
async fn primary_key(conn: &mut Conn, table: &TableName) -> Result<String, OpsError> {
    const SQL: &str = "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION";
    let columns: Vec<String> = conn
        .exec(SQL, (&table.database, &table.table))
        .await
        .map_err(query_error("primary key columns"))?;
    match columns.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(OpsError::NoPrimaryKey {
            table: table.to_string(),
            found: if columns.is_empty() {
                "none".into()
            } else {
                columns.join(", ")
            },
        }),
    }
}

/// One table's batches.
struct TablePruner<'a> {
    checkpoint_dir: &'a std::path::Path,
    opts: &'a PruneOptions,
    table: &'a TableName,
    pk: &'a str,
    /// The event id column.
    event_id: &'a str,
    /// The parking topic to keep parked rows by, when parking is on.
    parking: Option<(&'a crate::kafka::KafkaConfig, &'a str)>,
    done: TablePruned,
    /// Rows deleted (or, in a dry run, that would be), as they go.
    progress: CommandProgress,
}

impl TablePruner<'_> {
    async fn run(&mut self, conn: &mut Conn, stop: &CancellationToken) -> Result<(), OpsError> {
        // Dry runs delete nothing, so they step past each round by key.
        let mut after: Option<Value> = None;
        let batch = self.opts.batch.max(1);
        let server_id = server::server_id(conn).await?;
        while !stop.is_cancelled() {
            // One proof for a round of batches: every key selected in the snapshot is
            // delivered once the checkpoint passes it, however many transactions then
            // delete them. (A proof per batch would wait each time for the router to
            // checkpoint past the previous batch's own DELETE.)
            let checkpoint = self.checkpoint()?;
            let cutoff_secs = self.cutoff_secs(conn, &checkpoint).await?;
            let limit = batch.saturating_mul(BATCHES_PER_ROUND);
            let (snapshot, rows) = self
                .select_keys(conn, cutoff_secs, after.as_ref(), limit)
                .await?;
            let Some(last) = rows.last().map(|(pk, _)| pk.clone()) else {
                return Ok(());
            };
            self.wait_until_delivered(&snapshot, server_id, checkpoint, stop)
                .await?;
            // Read once the checkpoint passed the snapshot: every row of it that was
            // parked has its parking record on the topic by then.
            let keys = self.without_parked(rows)?;
            for chunk in keys.chunks(batch) {
                if stop.is_cancelled() {
                    return Ok(());
                }
                let rows = if self.opts.dry_run {
                    chunk.len() as u64
                } else {
                    self.delete(conn, chunk).await?
                };
                self.done.rows += rows;
                self.done.batches += 1;
                self.progress.add(rows);
                if let Some(rate) = self.opts.rate.filter(|r| *r > 0.0) {
                    let pause = Duration::from_secs_f64(chunk.len() as f64 / rate);
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = stop.cancelled() => {}
                    }
                }
            }
            after = Some(last);
        }
        Ok(())
    }

    fn checkpoint(&self) -> Result<Checkpoint, OpsError> {
        let dir = self.checkpoint_dir;
        CheckpointStore::peek(dir)?.ok_or_else(|| OpsError::NoCheckpoint {
            dir: dir.display().to_string(),
        })
    }

    /// Rows older than this (unix seconds, server clock) may be selected.
    async fn cutoff_secs(&self, conn: &mut Conn, checkpoint: &Checkpoint) -> Result<i64, OpsError> {
        let now_secs = server::now_ms(conn).await? / 1000;
        let by_age = now_secs - self.opts.older_than.as_secs() as i64;
        Ok(if checkpoint.commit_time_ms > 0 {
            by_age.min(checkpoint.commit_time_ms / 1000 - self.opts.margin.as_secs() as i64)
        } else {
            by_age
        })
    }

    /// `rows`' primary keys but those of parked events.
    fn without_parked(&mut self, rows: Vec<(Value, Value)>) -> Result<Vec<Value>, OpsError> {
        let Some((kafka, topic)) = self.parking else {
            return Ok(rows.into_iter().map(|(pk, _)| pk).collect());
        };
        let read = tokio::task::block_in_place(|| {
            crate::route::parking::read_all(kafka, topic, |_| false)
        })?;
        let parked: std::collections::HashSet<Vec<u8>> = read
            .parked_now()
            .into_iter()
            .filter(|p| p.aggregate.table.as_ref() == self.table)
            .filter_map(|p| p.event_id.as_ref().map(|id| id.0.clone()))
            .collect();
        let before = rows.len();
        let keys: Vec<Value> = rows
            .into_iter()
            .filter(|(_, id)| {
                let id = crate::outbox::column_bytes(
                    &mysql_async::binlog::value::BinlogValue::Value(id.clone()),
                );
                !id.is_some_and(|id| parked.contains(&id))
            })
            .map(|(pk, _)| pk)
            .collect();
        let kept = (before - keys.len()) as u64;
        if kept > 0 {
            tracing::info!(table = %self.table, rows = kept, "parked rows kept: a release reads them again");
        }
        self.done.parked_kept += kept;
        Ok(keys)
    }

    /// The next `limit` (primary key, event id)s as one consistent snapshot sees them,
    /// and that snapshot's binlog position.
    async fn select_keys(
        &self,
        conn: &mut Conn,
        cutoff_secs: i64,
        after: Option<&Value>,
        limit: usize,
    ) -> Result<(Position, Vec<(Value, Value)>), OpsError> {
        let snapshot = server::consistent_snapshot(conn).await?;
        let mut sql = format!(
            "SELECT {pk}, {id} FROM {table} WHERE {ts} < FROM_UNIXTIME(?)",
            pk = quote(self.pk),
            id = quote(self.event_id),
            table = qualified(self.table),
            ts = quote(&self.opts.timestamp_column),
        );
        let mut params = vec![Value::from(cutoff_secs)];
        if let Some(after) = after {
            sql.push_str(&format!(" AND {} > ?", quote(self.pk)));
            params.push(after.clone());
        }
        sql.push_str(&format!(" ORDER BY {} LIMIT {limit}", quote(self.pk)));
        let keys: Result<Vec<(Value, Value)>, _> = conn.exec(sql, params).await;
        // The snapshot only served to read; end it whatever the select answered.
        let ended = conn.query_drop("COMMIT").await;
        let keys = keys.map_err(query_error("SELECT outbox primary keys to prune"))?;
        ended.map_err(query_error("COMMIT"))?;
        let snapshot = snapshot.ok_or(OpsError::SnapshotUnsupported)?;
        // With its GTID state, a checkpoint taken on another server (a failover) compares.
        Ok((server::with_gtid_at(conn, snapshot).await, keys))
    }

    /// Returns once the durable checkpoint is at or past `snapshot`; fails after
    /// `opts.wait`.
    async fn wait_until_delivered(
        &self,
        snapshot: &Position,
        server_id: u32,
        mut checkpoint: Checkpoint,
        stop: &CancellationToken,
    ) -> Result<(), OpsError> {
        let started = Instant::now();
        loop {
            // By GTID where both have one; positions in differently named binlogs
            // without GTIDs do not compare: not proven.
            super::same_server(&checkpoint, snapshot, server_id)?;
            if checkpoint.includes(snapshot, server_id) == Some(true) {
                return Ok(());
            }
            if started.elapsed() >= self.opts.wait || stop.is_cancelled() {
                return Err(OpsError::NotYetDelivered {
                    table: self.table.to_string(),
                    snapshot: snapshot.file_offset(),
                    checkpoint: checkpoint.position.file_offset(),
                    waited_secs: started.elapsed().as_secs(),
                });
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                _ = stop.cancelled() => {}
            }
            checkpoint = self.checkpoint()?;
        }
    }

    /// Deletes exactly `keys` (archiving them first) in one transaction.
    async fn delete(&mut self, conn: &mut Conn, keys: &[Value]) -> Result<u64, OpsError> {
        // Primary-key lookups only (FORCE INDEX: on a small table the optimizer would
        // rather scan, and a scan waits on every uncommitted row it passes), under READ
        // COMMITTED: the statement locks the rows it deletes and no gap, so it never
        // holds up the application's INSERTs nor waits on one still open.
        let pk_in = format!(
            "FORCE INDEX (PRIMARY) WHERE {} IN ({})",
            quote(self.pk),
            vec!["?"; keys.len()].join(", ")
        );
        let mut tx_opts = mysql_async::TxOpts::default();
        tx_opts.with_isolation_level(mysql_async::IsolationLevel::ReadCommitted);
        let mut tx = conn
            .start_transaction(tx_opts)
            .await
            .map_err(query_error("START TRANSACTION"))?;
        let mut copied = None;
        if let Some(archive) = &self.opts.archive {
            let target = match archive.split_once('.') {
                Some((db, t)) => format!("{}.{}", quote(db), quote(t)),
                None => format!("{}.{}", quote(&self.table.database), quote(archive)),
            };
            tx.exec_drop(
                format!(
                    "INSERT INTO {target} SELECT * FROM {} {pk_in}",
                    qualified(self.table)
                ),
                keys.to_vec(),
            )
            .await
            .map_err(query_error("INSERT INTO archive table"))?;
            copied = Some(tx.affected_rows());
        }
        // The multi-table form, the one that takes an index hint.
        tx.exec_drop(
            format!("DELETE {t} FROM {t} {pk_in}", t = qualified(self.table)),
            keys.to_vec(),
        )
        .await
        .map_err(query_error("DELETE outbox rows"))?;
        let deleted = tx.affected_rows();
        if let Some(copied) = copied {
            if copied != deleted {
                tx.rollback().await.map_err(query_error("ROLLBACK"))?;
                return Err(OpsError::ArchiveMismatch {
                    archive: self.opts.archive.clone().unwrap_or_default(),
                    copied,
                    deleted,
                });
            }
            self.done.archived += copied;
        }
        tx.commit().await.map_err(query_error("COMMIT"))?;
        Ok(deleted)
    }
}
