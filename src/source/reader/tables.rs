//! Table maps and rows events: table ids mapped to layouts (only watched tables are
//! decoded), and row events turned into row changes of the current group.

use std::sync::Arc;

use mysql_async::binlog::events::{Event, EventData, RowsEventData};

use super::BinlogReader;
use crate::source::row::TableLayout;
use crate::source::{RowChange, RowOp, SourceError, TableName};

/// A table id as its last TABLE_MAP event described it.
pub(super) struct MappedTable {
    /// The event's bytes: servers repeat the same map before every transaction, and an
    /// identical one needs no new layout.
    raw: Vec<u8>,
    /// `None` for tables that are not watched.
    layout: Option<Arc<TableLayout>>,
}

impl BinlogReader {
    /// True when `table_id` was mapped to a table that is not watched (an unknown id is
    /// not: its rows event must fail as one without a TABLE_MAP).
    pub(super) fn unwatched(&self, table_id: u64) -> bool {
        matches!(
            self.table_ids.get(&table_id),
            Some(MappedTable { layout: None, .. })
        )
    }

    pub(super) fn table_map(&mut self, event: &Event, event_end: u64) -> Result<(), SourceError> {
        let Some(EventData::TableMapEvent(tme)) = self.read(event, event_end)? else {
            return Err(self.decode_error(event_end, "TABLE_MAP event did not decode"));
        };
        if let Some(known) = self.table_ids.get(&tme.table_id()) {
            if known.raw == event.data() {
                return Ok(());
            }
        }
        let table = TableName {
            database: tme.database_name().into_owned(),
            table: tme.table_name().into_owned(),
        };
        let name = table.to_string();
        let layout = if self.watched.iter().any(|p| p.matches(&name)) {
            let layout = TableLayout::new(Arc::new(table), &tme)
                .map_err(|e| self.decode_error(event_end, format!("table map of {name}: {e}")))?;
            // A server setting, not a row's data: no per-row policy may apply to it.
            if !layout.has_column_names() {
                return Err(SourceError::SettingChanged {
                    table: name,
                    position: format!("{}:{}", self.at.file, event_end),
                    what: "its TABLE_MAP carries no column names (binlog_row_metadata is not FULL for the session or server that wrote it)".into(),
                    fix: "SET GLOBAL binlog_row_metadata=FULL and set it in my.cnf",
                });
            }
            Some(Arc::new(layout))
        } else {
            None
        };
        let raw = event.data().to_vec();
        self.table_ids
            .insert(tme.table_id(), MappedTable { raw, layout });
        Ok(())
    }

    pub(super) fn rows(&mut self, event: &Event, event_end: u64) -> Result<(), SourceError> {
        let Some(EventData::RowsEvent(rows)) = self.read(event, event_end)? else {
            return Err(self.decode_error(event_end, "rows event did not decode"));
        };
        let layout = match self.table_ids.get(&rows.table_id()) {
            Some(MappedTable {
                layout: Some(layout),
                ..
            }) => layout.clone(),
            Some(_) => return Ok(()),
            None => {
                return Err(self.decode_error(
                    event_end,
                    format!(
                        "rows event for table id {} without a preceding TABLE_MAP",
                        rows.table_id()
                    ),
                ))
            }
        };
        let inserts = matches!(
            rows,
            RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_)
        );
        if inserts {
            let missing = layout.columns_not_in(&rows);
            if !missing.is_empty() {
                return Err(SourceError::SettingChanged {
                    table: layout.table.to_string(),
                    position: format!("{}:{}", self.at.file, event_end),
                    what: format!("an INSERT's row image lacks column(s) {} (binlog_row_image is MINIMAL or NOBLOB in the writer's session: columns that took their default are left out)", missing.join(", ")),
                    fix: "SET GLOBAL binlog_row_image=FULL, set it in my.cnf, and keep writers from changing it per session",
                });
            }
        }
        let size = event.data().len() as u64;
        self.group.bytes += size;
        self.group.pending_bytes += size;
        if let Some(limit) = self.max_transaction_bytes {
            if self.group.bytes > limit {
                return Err(SourceError::TransactionTooLarge {
                    position: self.group_start.to_string(),
                    limit,
                });
            }
        }
        if self.group.xa && self.xa_held_bytes + self.group.bytes > self.max_xa_held_bytes {
            return Err(SourceError::XaTooLarge {
                position: self.group_start.to_string(),
                held: self.xa_held_bytes + self.group.bytes,
                limit: self.max_xa_held_bytes,
            });
        }
        let decoded = layout.rows(&rows).map_err(|e| SourceError::Decode {
            position: format!("{}:{}", self.at.file, event_end),
            reason: format!("row of {}: {e}", layout.table),
        })?;
        let op = match rows {
            RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_) => RowOp::Insert,
            RowsEventData::DeleteRowsEvent(_) | RowsEventData::DeleteRowsEventV1(_) => {
                RowOp::Delete
            }
            _ => RowOp::Update,
        };
        let change = |row| RowChange {
            table: layout.table.clone(),
            op,
            row,
            event_offset: event_end,
        };
        self.changes
            .extend(decoded.inserted.into_iter().map(|r| change(Some(r))));
        self.changes
            .extend((0..decoded.other).map(|_| change(None)));
        Ok(())
    }
}
