//! The reader fed binlog files real MySQL servers wrote (`tests/fixtures/mysql-binlogs`,
//! see its SOURCE.md) through the archive source: every file gives transactions or a
//! clear error, never a panic.

mod rows;

use super::*;

/// What reading a whole file gave: the transactions, then how it ended.
struct Read {
    transactions: Vec<Transaction>,
    end: SourceError,
}

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mysql-binlogs")
        .join(name)
}

/// Reads `name` watching every table, through the archive source.
async fn read(name: &str) -> Read {
    read_from(name, "fixture.000001:4".parse().unwrap()).await
}

/// `read` from `start` (with a MySQL GTID set, the reader keeps it up to date). The file
/// is read as an archive of one file, which need not end with ROTATE or STOP.
async fn read_from(name: &str, start: Position) -> Read {
    read_path(&fixture(name), start).await
}

/// `read_from` of any file.
async fn read_path(path: &std::path::Path, start: Position) -> Read {
    let files = vec![(start.file.clone(), path.to_path_buf())];
    let events = crate::source::archive::ArchiveEvents::new(files, start.clone(), false);
    let mut reader = BinlogReader::from_events(events, start, &[Pattern::new("*")]);
    let mut transactions = Vec::new();
    loop {
        match reader.next_transaction().await {
            Ok(t) => transactions.push(t),
            Err(end) => return Read { transactions, end },
        }
    }
}

/// A MySQL server's GTIDs as the reader keeps them: each transaction's end carries
/// the set of everything up to it.
#[tokio::test]
async fn mysql_gtid_sets_follow_the_transactions() {
    let start = Position {
        gtid: GtidState::MySql(Default::default()),
        ..Position::new(BinlogFile::new("fixture.000001").unwrap(), 4).unwrap()
    };
    let r = read_from("rpl_atomic_ddl_rollback_full.000001", start).await;
    let sets: Vec<String> = r
        .transactions
        .iter()
        .map(|t| t.end.gtid.to_string())
        .collect();
    let uuid = "a0205340-db2c-11e7-babd-340286faf52d";
    assert_eq!(
        sets,
        [
            format!("{uuid}:1"),
            format!("{uuid}:1-2"),
            format!("{uuid}:1-3"),
            format!("{uuid}:1-4")
        ]
    );
}

/// How reading a file must come out.
enum Expect {
    /// Read to the end: transactions, row changes, the position after the last one.
    End(usize, usize, &'static str),
    /// Stopped with an error saying this.
    Stop(&'static str),
}

#[tokio::test]
async fn every_file_reads_to_its_end_or_a_clear_error() {
    use Expect::*;
    let no_names = "carries no column names";
    let statement = "a data change logged as a statement";
    let relay = "an event whose header says it ends at";
    let expected = [
        // Row events with full metadata, decoded.
        (
            "binlog-invisible-columns.000001",
            End(5, 3, "fixture.000001:1787"),
        ),
        ("json-opaque.binlog", End(3, 8, "fixture.000001:1635")),
        (
            "mysql-enum-string-set.000001",
            End(5, 3, "fixture.000001:3331"),
        ),
        ("mysql_type_bit.000001", End(3, 1, "fixture.000001:1001")),
        ("vector.binlog", End(10, 10, "fixture.000001:3443")),
        (
            "mariadb-bin.000001",
            End(2, 2, "fixture.000001:1074 gtid=0-1-2"),
        ),
        // DDL after MySQL GTIDs: each statement its own transaction.
        (
            "rpl_atomic_ddl_rollback_full.000001",
            End(4, 0, "fixture.000001:907"),
        ),
        (
            "rpl_atomic_ddl_rollback_view.000001",
            End(2, 0, "fixture.000001:560"),
        ),
        // MySQL's default binlog_row_metadata=MINIMAL: a stop that names the setting,
        // inside a zstd-compressed transaction too.
        ("transaction_compression.000001", Stop(no_names)),
        ("minimal_row_metadata.000001", Stop(no_names)),
        ("binlog_transaction_with_GTID_TAG.000001", Stop(no_names)),
        ("write-partial-row.binlog", Stop(no_names)),
        // Statement-logged changes, the server's own incident, and an old format.
        ("binlog_transaction_with_GTID.000001", Stop(statement)),
        // A relay log: its events carry the source server's positions, not the file's,
        // so no checkpoint could name a place in it.
        (
            "corrupt-relay-bin.000624",
            Stop("header says it ends at 230243 ends at 294"),
        ),
        ("bug40482-bin.000001", Stop("INCIDENT event")),
        ("ver_5_1-wl2325_r.001", Stop("cannot decode binlog event")),
        // Truncated files: a stop naming the file and the offset where it is cut, never
        // a quiet end short of it.
        (
            "binlog_truncated_event.000001",
            Stop(
                "binlog_truncated_event.000001 is damaged at offset 4: cut inside an event header",
            ),
        ),
        (
            "binlog_truncated_prev_gtid_event.000001",
            Stop("binlog_truncated_prev_gtid_event.000001 is damaged at offset"),
        ),
        // The rest of the collection, each asserted: reads to the end (positions as
        // written), or stops at a setting or a statement-logged change.
        ("bug27213339-bin.000001", End(46, 0, "fixture.000001:11102")),
        ("slave-relay-bin.000001", End(2, 0, "fixture.000001:493")),
        ("master-bin.000001", End(0, 0, "fixture.000001:4")),
        (
            "rpl_atomic_ddl_rollback_table.000001",
            End(2, 0, "fixture.000001:501"),
        ),
        // A file that ends with a ROTATE to binlog.000008: the position follows it.
        (
            "binlog_transaction_previous_GTID_no_tag.000001",
            End(1, 0, "binlog.000008:4"),
        ),
        ("update-full-row.binlog", Stop(no_names)),
        ("write-full-row.binlog", Stop(no_names)),
        ("update-partial-row.binlog", Stop(no_names)),
        ("time_issue.000001", Stop(no_names)),
        ("ver_trunk_row_v2.001", Stop(no_names)),
        ("bug32407.001", Stop(no_names)),
        ("ver_5_1_23.001", Stop(no_names)),
        ("json.binlog.000001", Stop(no_names)),
        ("bug11747887-bin.000003", Stop(statement)),
        ("binlog_56_gtid_reserved_word.000001", Stop(statement)),
        (
            "binlog_transaction_with_anonymous_GTID.000001",
            Stop(statement),
        ),
        (
            "rpl_cross_version_default_utf8mb4_collation.000001",
            Stop(statement),
        ),
        ("binlog_transaction.000001", Stop(statement)),
        ("bug16266.000001", Stop(statement)),
        // Relay logs (a replica's format description, then the source's events with the
        // source's positions): no position in them is one of the file.
        ("rpl_unfiltered_hidden_gcol.000001", Stop(relay)),
        ("bug33029-slave-relay-bin.000001", Stop(relay)),
        ("ver_5_1-wl2325_s.001", Stop(relay)),
        ("binlog_savepoint.000001", Stop(relay)),
    ];
    let listed: Vec<&str> = expected.iter().map(|(name, _)| *name).collect();
    for (name, expect) in expected {
        let r = read(name).await;
        let rows: usize = r.transactions.iter().map(|t| t.changes.len()).sum();
        let seen = format!(
            "{} transaction(s), {rows} row(s), then: {}",
            r.transactions.len(),
            r.end
        );
        match expect {
            End(transactions, changes, position) => {
                assert!(
                    matches!(&r.end, SourceError::StreamEnded { position: p } if p == position)
                        && r.transactions.len() == transactions
                        && rows == changes,
                    "{name}: {seen}"
                );
                // Positions only move forward, every one a transaction's end.
                let ends: Vec<u64> = r.transactions.iter().map(|t| t.end.offset).collect();
                assert!(ends.windows(2).all(|w| w[0] <= w[1]), "{name}: {ends:?}");
            }
            Stop(says) => assert!(r.end.to_string().contains(says), "{name}: {seen}"),
        }
    }
    // Every file of the collection is in the table above.
    for entry in std::fs::read_dir(fixture("")).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(
            name == "SOURCE.md" || listed.contains(&name.as_str()),
            "{name} has no asserted outcome"
        );
    }
}

/// A MariaDB binlog with compressed events (`log_bin_compress=ON`: compressed rows events
/// above `log_bin_compress_min_len`, plain ones below, an XA branch, a DDL with a
/// multibyte comment), written by the project's MariaDB 10.11 and kept in
/// `tests/fixtures/mariadb-compressed`: read offline through the archive source.
#[tokio::test]
async fn mariadb_compressed_events_read_from_an_archived_file() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mariadb-compressed/mysql-bin.000014");
    let r = read_path(&path, "mysql-bin.000014:4".parse().unwrap()).await;
    let inserted: Vec<String> = r
        .transactions
        .iter()
        .flat_map(|t| &t.changes)
        .filter_map(|c| c.row.as_ref())
        .map(|row| match row.get(0) {
            Some(mysql_async::binlog::value::BinlogValue::Value(
                mysql_common::value::Value::Bytes(id),
            )) => String::from_utf8_lossy(id).into_owned(),
            other => panic!("event id {other:?}"),
        })
        .collect();
    assert_eq!(
        inserted,
        ["c-1", "c-2", "c-3", "c-4", "c-5", "c-6"],
        "{}",
        r.end
    );
    let others = r
        .transactions
        .iter()
        .flat_map(|t| &t.changes)
        .filter(|c| c.row.is_none())
        .count();
    assert_eq!(others, 2, "the UPDATE and the DELETE, counted");
    // The file ends with its ROTATE: the position follows it.
    assert!(
        matches!(&r.end, SourceError::StreamEnded { position } if position.starts_with("mysql-bin.000015:4")),
        "{}",
        r.end
    );
}

/// Every fixture, cut and with bytes changed at many places: a clear error or
/// transactions, never a panic or a hang (a fuzz run in miniature that CI can afford;
/// `fuzz/fuzz_targets/binlog_file.rs` runs the same without bounds).
#[tokio::test]
async fn damaged_files_never_panic() {
    let mut paths: Vec<std::path::PathBuf> = std::fs::read_dir(fixture(""))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| !p.ends_with("SOURCE.md"))
        .collect();
    paths.push(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/mariadb-compressed/mysql-bin.000014"),
    );
    paths.sort();
    let dir = tempfile::tempdir().unwrap();
    let mutated = dir.path().join("fixture.000001");
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut runs = 0;
    for path in &paths {
        let original = std::fs::read(path).unwrap();
        for round in 0..40 {
            let mut bytes = original.clone();
            match round % 4 {
                // Cut anywhere.
                0 => bytes.truncate(4 + (next() as usize) % (bytes.len() - 3)),
                // One byte changed.
                1 => {
                    let at = 4 + (next() as usize) % (bytes.len() - 4);
                    bytes[at] ^= (next() as u8) | 1;
                }
                // A few bytes changed past the format description (event bodies).
                _ => {
                    for _ in 0..1 + next() % 4 {
                        let at = 4 + (next() as usize) % (bytes.len() - 4);
                        bytes[at] = next() as u8;
                    }
                }
            }
            std::fs::write(&mutated, &bytes).unwrap();
            let read = tokio::time::timeout(
                Duration::from_secs(10),
                read_path(&mutated, "fixture.000001:4".parse().unwrap()),
            )
            .await;
            assert!(read.is_ok(), "{} (round {round}) hangs", path.display());
            runs += 1;
        }
    }
    println!("{runs} damaged files read: none panicked or hung");
}

/// A start position that is no event boundary of the archived file (a checkpoint of
/// another file with the same name, an offset typed by hand) stops with the file and
/// offset named; the boundary just before it reads on.
#[tokio::test]
async fn an_archive_start_inside_an_event_is_refused() {
    // mysql_type_bit.000001: a QUERY event spans 235..491.
    let inside = read_from(
        "mysql_type_bit.000001",
        "fixture.000001:300".parse().unwrap(),
    )
    .await;
    let said = inside.end.to_string();
    assert!(
        inside.transactions.is_empty()
            && said.contains("mysql_type_bit.000001 is damaged at offset 235")
            && said.contains("inside an event"),
        "{said}"
    );
    let boundary = read_from(
        "mysql_type_bit.000001",
        "fixture.000001:235".parse().unwrap(),
    )
    .await;
    assert!(
        !boundary.transactions.is_empty()
            && matches!(boundary.end, SourceError::StreamEnded { .. }),
        "{}",
        boundary.end
    );
}
