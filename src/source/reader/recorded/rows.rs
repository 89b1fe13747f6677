//! The router's row decoder against mysql_common's own, on the rows real MySQL servers
//! wrote.

use super::fixture;
use crate::source::Position;

/// The router's row decoder (`TableLayout`) against mysql_common's own (`BinlogRow`) on
/// every inserted row of every fixture (MINIMAL metadata too, which the reader refuses
/// before decoding, but the decoder must not depend on): the same value for every
/// column, TIMESTAMPs compared after the router's documented turn into UTC dates.
#[test]
fn the_row_decoder_agrees_with_mysql_common_value_for_value() {
    use std::collections::HashMap;

    use mysql_async::binlog::events::{EventData, RowsEventData, TableMapEvent};
    use mysql_common::constants::ColumnType;

    use crate::source::archive::{ArchiveEvents, BinlogItem};
    use crate::source::row::TableLayout;

    let (mut files_compared, mut rows_compared, mut values_compared) = (0, 0, 0);
    let mut entries: Vec<_> = std::fs::read_dir(fixture("")).unwrap().flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "SOURCE.md" {
            continue;
        }
        let start: Position = "fixture.000001:4".parse().unwrap();
        let files = vec![(start.file.clone(), entry.path())];
        let mut events = ArchiveEvents::new(files, start, false);
        let mut maps: HashMap<u64, TableMapEvent<'static>> = HashMap::new();
        let mut compared_here = 0;
        // A file that stops (cut, a relay log) is compared up to there.
        while let Some(Ok(item)) = events.next() {
            let BinlogItem::Event(event) = item else {
                continue;
            };
            let rows = match event.read_data() {
                Ok(Some(EventData::TableMapEvent(tme))) => {
                    maps.insert(tme.table_id(), tme.into_owned());
                    continue;
                }
                Ok(Some(EventData::RowsEvent(rows))) => rows,
                _ => continue,
            };
            if !matches!(
                rows,
                RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_)
            ) {
                continue;
            }
            let tme = &maps[&rows.table_id()];
            let table = std::sync::Arc::new(crate::position::TableName {
                database: tme.database_name().into_owned(),
                table: tme.table_name().into_owned(),
            });
            let layout = TableLayout::new(table, tme).unwrap();
            let ours = layout.rows(&rows).unwrap_or_else(|e| panic!("{name}: {e}"));
            let theirs: Vec<_> = rows
                .rows(tme)
                .map(|r| r.unwrap_or_else(|e| panic!("{name}: {e}")).1.unwrap())
                .collect();
            assert_eq!(ours.inserted.len(), theirs.len(), "{name}: rows");
            // mysql_common keeps only the columns in the image (MINIMAL images leave
            // some out), in table order; the router keeps every column, absent as None.
            let present: Vec<usize> = {
                let bits = rows
                    .columns_after_image()
                    .expect("an INSERT has an after image");
                (0..tme.columns_count() as usize)
                    .filter(|&i| bits[i])
                    .collect()
            };
            for (mine, row) in ours.inserted.iter().zip(&theirs) {
                assert_eq!(row.len(), present.len(), "{name}: image columns");
                for i in 0..tme.columns_count() as usize {
                    let Some(k) = present.iter().position(|&p| p == i) else {
                        assert_eq!(mine.get(i), None, "{name}: column {i} is not in the image");
                        continue;
                    };
                    let expected = row.as_ref(k).cloned().map(|v| v.into_owned());
                    let expected = match (expected, tme.get_column_type(i)) {
                        (
                            Some(v),
                            Ok(Some(
                                ColumnType::MYSQL_TYPE_TIMESTAMP
                                | ColumnType::MYSQL_TYPE_TIMESTAMP2,
                            )),
                        ) => Some(crate::source::row::timestamp_as_utc(v).unwrap()),
                        (v, _) => v,
                    };
                    assert_eq!(
                        mine.get(i),
                        expected.as_ref(),
                        "{name}: column {i} of {}",
                        layout.table
                    );
                    values_compared += 1;
                }
                rows_compared += 1;
                compared_here += 1;
            }
        }
        if compared_here > 0 {
            files_compared += 1;
        }
    }
    println!("{files_compared} files, {rows_compared} rows, {values_compared} values: equal");
    assert!(
        files_compared >= 19 && rows_compared >= 62,
        "{files_compared} files, {rows_compared} rows"
    );
}
