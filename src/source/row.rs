//! Row images of watched tables, decoded from a rows event with a layout built once per
//! table map.
//!
//! mysql_common's `BinlogRow` re-reads the table map's optional metadata and builds a
//! `Column` with owned schema, table and column names for every value of every row: a
//! fifth of the router's CPU in a backlog. The values themselves are still decoded by
//! mysql_common (`BinlogValue`), with the same type, metadata and signedness it would use.

use std::io;
use std::sync::Arc;

use bitvec::slice::BitSlice;
use mysql_async::binlog::events::{OptionalMetaExtractor, RowsEventData, TableMapEvent};
use mysql_async::binlog::value::BinlogValue;
use mysql_common::constants::ColumnType;
use mysql_common::io::ParseBuf;
use mysql_common::misc::raw::int::{LenEnc, RawInt};
use mysql_common::value::Value;

use super::TableName;

/// Bit 0 of a partial-update row's value options: some JSON columns hold diffs.
const PARTIAL_JSON_UPDATES: u64 = 1;

/// How to decode one column of a table.
#[derive(Debug, PartialEq, Eq)]
struct ColumnCodec {
    ty: ColumnType,
    meta: Vec<u8>,
    unsigned: bool,
}

/// A watched table as one TABLE_MAP event describes it: name, column names and codecs.
#[derive(Debug)]
pub struct TableLayout {
    /// The table.
    pub table: Arc<TableName>,
    names: Arc<[String]>,
    columns: Vec<ColumnCodec>,
    json_columns: usize,
}

impl TableLayout {
    /// Reads names, types, metadata and signedness from a table map. Column names are
    /// empty when the server sends none (`binlog_row_metadata=MINIMAL`).
    pub fn new(table: Arc<TableName>, tme: &TableMapEvent<'_>) -> io::Result<Self> {
        let n = tme.columns_count() as usize;
        let meta = OptionalMetaExtractor::new(tme.iter_optional_meta())?;
        let mut names_in_map = meta.iter_column_name();
        let mut signedness = meta.iter_signedness();
        let mut names = Vec::with_capacity(n);
        let mut columns = Vec::with_capacity(n);
        for i in 0..n {
            let ty = match tme.get_column_type(i) {
                Ok(Some(ty)) => ty,
                Ok(None) => return Err(invalid(format!("column {i} has no type"))),
                Err(e) => return Err(invalid(e)),
            };
            // Signedness bits cover the numeric columns only, in column order.
            let unsigned = ty.is_numeric_type() && signedness.next().unwrap_or(false);
            let name = match names_in_map.next().transpose()? {
                Some(name) => String::from_utf8_lossy(name.name_raw()).into_owned(),
                None => String::new(),
            };
            names.push(name);
            columns.push(ColumnCodec {
                ty,
                meta: tme.get_column_metadata(i).unwrap_or(&[]).to_vec(),
                unsigned,
            });
        }
        Ok(Self {
            table,
            names: names.into(),
            columns,
            json_columns: tme.json_column_count(),
        })
    }

    /// False when the server sent no column names (`binlog_row_metadata=MINIMAL`).
    pub fn has_column_names(&self) -> bool {
        !self.names.is_empty() && self.names.iter().all(|n| !n.is_empty())
    }

    /// Names of the table's columns the rows event's after image leaves out (an image
    /// other than FULL); the 1-based position where a name is unknown.
    pub fn columns_not_in(&self, rows: &RowsEventData<'_>) -> Vec<String> {
        let Some(bits) = rows.columns_after_image() else {
            return Vec::new();
        };
        let present = self.image_columns(bits).present;
        present
            .iter()
            .enumerate()
            .filter(|(_, p)| !**p)
            .map(|(i, _)| match self.names.get(i) {
                Some(n) if !n.is_empty() => n.clone(),
                _ => format!("@{}", i + 1),
            })
            .collect()
    }

    /// Decodes every row of a rows event: for inserts the after images, for updates and
    /// deletes only their count (an outbox publishes inserts; the rest is counted).
    pub fn rows(&self, rows: &RowsEventData<'_>) -> io::Result<Rows> {
        let before = rows.columns_before_image().map(|b| self.image_columns(b));
        let after = rows.columns_after_image().map(|b| self.image_columns(b));
        let partial = matches!(rows, RowsEventData::PartialUpdateRowsEvent(_));
        let mut buf = ParseBuf(rows.rows_data());
        let mut out = Rows::default();
        while !buf.is_empty() {
            if let Some(cols) = &before {
                self.image(cols, false, &mut buf)?;
            }
            match &after {
                Some(cols) => {
                    let image = self.image(cols, partial, &mut buf)?;
                    if before.is_none() {
                        out.inserted.push(image);
                    } else {
                        out.other += 1;
                    }
                }
                None => out.other += 1,
            }
        }
        Ok(out)
    }

    /// Which table columns an image holds (the rows event's column bitmap).
    fn image_columns(&self, bits: &BitSlice<u8>) -> ImageColumns {
        let present: Vec<bool> = (0..self.columns.len())
            .map(|i| bits.get(i).is_some_and(|b| *b))
            .collect();
        let count = present.iter().filter(|p| **p).count();
        ImageColumns { present, count }
    }

    /// One row image: `[value options]`, the null bitmap of the columns present, then
    /// their values.
    fn image<'a>(
        &'a self,
        columns: &ImageColumns,
        shared_image: bool,
        buf: &mut ParseBuf<'a>,
    ) -> io::Result<RowImage> {
        let mut partial_json = None;
        if shared_image {
            let options = *buf.parse::<RawInt<LenEnc>>(())?;
            if options & PARTIAL_JSON_UPDATES != 0 {
                let bitmap: &[u8] = buf.parse(self.json_columns.div_ceil(8))?;
                partial_json = Some(bitmap);
            }
        }
        let nulls: &[u8] = buf.parse(columns.count.div_ceil(8))?;
        let mut values = Vec::with_capacity(self.columns.len());
        let (mut image_idx, mut json_idx) = (0usize, 0usize);
        for (column, present) in self.columns.iter().zip(&columns.present) {
            let is_partial = column.ty == ColumnType::MYSQL_TYPE_JSON && {
                let bit = partial_json.is_some_and(|b| bit_at(b, json_idx));
                json_idx += 1;
                bit
            };
            if !present {
                values.push(None);
                continue;
            }
            let value = if bit_at(nulls, image_idx) {
                BinlogValue::Value(Value::NULL)
            } else {
                let ctx = (
                    column.ty,
                    column.meta.as_slice(),
                    column.unsigned,
                    is_partial,
                );
                let value = buf.parse::<BinlogValue<'_>>(ctx)?.into_owned();
                match column.ty {
                    ColumnType::MYSQL_TYPE_TIMESTAMP | ColumnType::MYSQL_TYPE_TIMESTAMP2 => {
                        timestamp_as_utc(value)?
                    }
                    _ => value,
                }
            };
            image_idx += 1;
            values.push(Some(value));
        }
        Ok(RowImage {
            names: self.names.clone(),
            values,
        })
    }
}

/// The columns one kind of image holds in a rows event, the same for each of its rows.
struct ImageColumns {
    /// Per table column.
    present: Vec<bool>,
    /// How many are present: the length of each row's null bitmap.
    count: usize,
}

/// The rows of one rows event.
#[derive(Debug, Default)]
pub struct Rows {
    /// After images of inserted rows, in order.
    pub inserted: Vec<RowImage>,
    /// Updated or deleted rows.
    pub other: usize,
}

/// A TIMESTAMP as a UTC date and time, like a DATETIME read in a `+00:00` session (the
/// table reads' time zone): mysql_common hands it over as epoch seconds, an integer
/// (TIMESTAMP) or text with microseconds (TIMESTAMP2), which no later stage can tell
/// from a number column.
pub(in crate::source) fn timestamp_as_utc(
    value: BinlogValue<'static>,
) -> io::Result<BinlogValue<'static>> {
    let (secs, micros) = match &value {
        BinlogValue::Value(Value::Int(s)) => (*s, 0),
        BinlogValue::Value(Value::Bytes(text)) => {
            let text = std::str::from_utf8(text).map_err(invalid)?;
            let (s, us) = text.split_once('.').unwrap_or((text, "0"));
            (s.parse().map_err(invalid)?, us.parse().map_err(invalid)?)
        }
        _ => return Ok(value),
    };
    // MySQL's zero TIMESTAMP ('0000-00-00 00:00:00') is stored as 0.
    if secs == 0 && micros == 0 {
        return Ok(BinlogValue::Value(Value::Date(0, 0, 0, 0, 0, 0, 0)));
    }
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = crate::civil::civil_from_days(days);
    let y = u16::try_from(y).map_err(invalid)?;
    Ok(BinlogValue::Value(Value::Date(
        y,
        m,
        d,
        (rest / 3600) as u8,
        (rest % 3600 / 60) as u8,
        (rest % 60) as u8,
        micros,
    )))
}

/// Bit `i` of a little-endian bitmap, as the binlog writes them.
fn bit_at(bitmap: &[u8], i: usize) -> bool {
    bitmap.get(i / 8).is_some_and(|b| b >> (i % 8) & 1 == 1)
}

fn invalid(e: impl ToString) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// One row: a value per table column, `None` where the column is not in the image.
#[derive(Debug, Clone, PartialEq)]
pub struct RowImage {
    names: Arc<[String]>,
    values: Vec<Option<BinlogValue<'static>>>,
}

impl RowImage {
    /// A row from column names and values (same length).
    pub fn new(names: Arc<[String]>, values: Vec<Option<BinlogValue<'static>>>) -> Self {
        debug_assert_eq!(names.len(), values.len());
        Self { names, values }
    }

    /// Column names; empty strings when the server sent none.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The index of the column called `name`.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// The value of column `i`, `None` when it is not in the image.
    pub fn get(&self, i: usize) -> Option<&BinlogValue<'static>> {
        self.values.get(i).and_then(Option::as_ref)
    }

    /// Moves the value of column `i` out of the row.
    pub fn take(&mut self, i: usize) -> Option<BinlogValue<'static>> {
        self.values.get_mut(i).and_then(Option::take)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_become_utc_dates() {
        let date = |v| match timestamp_as_utc(BinlogValue::Value(v)).unwrap() {
            BinlogValue::Value(d) => d,
            other => panic!("{other:?}"),
        };
        // 2024-02-29 12:30:01.250 UTC
        assert_eq!(
            date(Value::Bytes(b"1709209801.250000".to_vec())),
            Value::Date(2024, 2, 29, 12, 30, 1, 250_000)
        );
        assert_eq!(
            date(Value::Int(1_709_209_801)),
            Value::Date(2024, 2, 29, 12, 30, 1, 0)
        );
        assert_eq!(
            date(Value::Int(2_147_483_647)),
            Value::Date(2038, 1, 19, 3, 14, 7, 0)
        );
        assert_eq!(date(Value::Int(0)), Value::Date(0, 0, 0, 0, 0, 0, 0));
        assert!(timestamp_as_utc(BinlogValue::Value(Value::Bytes(b"x".to_vec()))).is_err());
    }

    #[test]
    fn bitmaps_are_little_endian_per_byte() {
        let map = [0b0000_0101u8, 0b1000_0000];
        let bits: Vec<bool> = (0..16).map(|i| bit_at(&map, i)).collect();
        assert!(bits[0] && !bits[1] && bits[2] && bits[15]);
        assert_eq!(bits.iter().filter(|b| **b).count(), 3);
        assert!(!bit_at(&map, 16), "past the end is not set");
    }
}
