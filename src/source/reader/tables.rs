//! Table maps and rows events: table ids mapped to layouts (only watched tables are
//! decoded), and a rows event's rows as row changes.

use std::collections::HashMap;
use std::sync::Arc;

use mysql_async::binlog::events::{RowsEventData, TableMapEvent};

use crate::pattern::Pattern;
use crate::source::row::TableLayout;
use crate::source::{RowChange, RowOp, SourceError, TableName};

/// Table ids remembered between transactions before the map is dropped.
const MAX_TABLE_IDS: usize = 4096;

/// A table id as its last TABLE_MAP event described it.
struct MappedTable {
    /// The event's bytes: servers repeat the same map before every transaction, and an
    /// identical one needs no new layout.
    raw: Vec<u8>,
    /// `None` for tables that are not watched.
    layout: Option<Arc<TableLayout>>,
}

/// What a rows event's table id stands for.
pub(super) enum Mapped {
    /// A watched table: its rows are decoded with this layout.
    Watched(Arc<TableLayout>),
    /// A table that is not watched: its rows are skipped.
    Unwatched,
    /// No TABLE_MAP named it.
    Unknown,
}

/// Table id → the last TABLE_MAP for it, and the layout when the table is watched.
pub(super) struct TableMaps {
    ids: HashMap<u64, MappedTable>,
    /// Outbox table names or patterns (`tenant_*.outbox`).
    watched: Vec<Pattern>,
}

impl TableMaps {
    pub(super) fn new(watched: &[Pattern]) -> Self {
        Self {
            ids: HashMap::new(),
            watched: watched.to_vec(),
        }
    }

    /// The outbox tables and patterns.
    pub(super) fn watched(&self) -> &[Pattern] {
        &self.watched
    }

    /// What `table_id` was mapped to.
    pub(super) fn get(&self, table_id: u64) -> Mapped {
        match self.ids.get(&table_id) {
            Some(MappedTable {
                layout: Some(layout),
                ..
            }) => Mapped::Watched(layout.clone()),
            Some(_) => Mapped::Unwatched,
            None => Mapped::Unknown,
        }
    }

    /// Records a TABLE_MAP (`raw`: its bytes); `position` names the event in errors.
    pub(super) fn map(
        &mut self,
        tme: &TableMapEvent<'_>,
        raw: &[u8],
        position: impl Fn() -> String,
    ) -> Result<(), SourceError> {
        if let Some(known) = self.ids.get(&tme.table_id()) {
            if known.raw == raw {
                return Ok(());
            }
        }
        let table = TableName {
            database: tme.database_name().into_owned(),
            table: tme.table_name().into_owned(),
        };
        let name = table.to_string();
        let layout = if self.watched.iter().any(|p| p.matches(&name)) {
            let layout =
                TableLayout::new(Arc::new(table), tme).map_err(|e| SourceError::Decode {
                    position: position(),
                    reason: format!("table map of {name}: {e}"),
                })?;
            // A server setting, not a row's data: no per-row policy may apply to it.
            if !layout.has_column_names() {
                return Err(SourceError::SettingChanged {
                    table: name,
                    position: position(),
                    what: "its TABLE_MAP carries no column names (binlog_row_metadata is not FULL for the session or server that wrote it)".into(),
                    fix: "SET GLOBAL binlog_row_metadata=FULL and set it in my.cnf",
                });
            }
            Some(Arc::new(layout))
        } else {
            None
        };
        self.ids.insert(
            tme.table_id(),
            MappedTable {
                raw: raw.to_vec(),
                layout,
            },
        );
        Ok(())
    }

    /// Between groups: every group maps its own tables before its rows, so the map can
    /// be dropped; many tenant tables and table-cache churn would grow it forever.
    pub(super) fn bound(&mut self) {
        if self.ids.len() > MAX_TABLE_IDS {
            tracing::debug!(
                entries = self.ids.len(),
                "table-id map past its bound: dropped (the next transactions map their tables again)"
            );
            self.ids.clear();
        }
    }
}

/// An INSERT whose row image lacks columns (`binlog_row_image` MINIMAL or NOBLOB in the
/// writer's session) is a setting changed under the router, not a bad row.
pub(super) fn check_full_image(
    layout: &TableLayout,
    rows: &RowsEventData<'_>,
    position: impl Fn() -> String,
) -> Result<(), SourceError> {
    let inserts = matches!(
        rows,
        RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_)
    );
    if !inserts {
        return Ok(());
    }
    let missing = layout.columns_not_in(rows);
    if missing.is_empty() {
        return Ok(());
    }
    Err(SourceError::SettingChanged {
        table: layout.table.to_string(),
        position: position(),
        what: format!("an INSERT's row image lacks column(s) {} (binlog_row_image is MINIMAL or NOBLOB in the writer's session: columns that took their default are left out)", missing.join(", ")),
        fix: "SET GLOBAL binlog_row_image=FULL, set it in my.cnf, and keep writers from changing it per session",
    })
}

/// Appends the rows of a rows event to `into` as row changes (inserted rows decoded, the
/// others counted); `event_end` is where the event ends.
pub(super) fn push_changes(
    layout: &Arc<TableLayout>,
    rows: &RowsEventData<'_>,
    event_end: u64,
    position: impl Fn() -> String,
    into: &mut Vec<RowChange>,
) -> Result<(), SourceError> {
    let decoded = layout.rows(rows).map_err(|e| SourceError::Decode {
        position: position(),
        reason: format!("row of {}: {e}", layout.table),
    })?;
    let op = match rows {
        RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_) => RowOp::Insert,
        RowsEventData::DeleteRowsEvent(_) | RowsEventData::DeleteRowsEventV1(_) => RowOp::Delete,
        _ => RowOp::Update,
    };
    let change = |row| RowChange {
        table: layout.table.clone(),
        op,
        row,
        event_offset: event_end,
    };
    into.extend(decoded.inserted.into_iter().map(|r| change(Some(r))));
    into.extend((0..decoded.other).map(|_| change(None)));
    Ok(())
}
