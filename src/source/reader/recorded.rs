//! The reader fed binlog files real MySQL servers wrote (`tests/fixtures/mysql-binlogs`,
//! see its SOURCE.md): every file gives transactions or a clear error, never a panic.

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

/// Reads `name` watching every table; the events' checksums as the file's format
/// description says.
async fn read(name: &str) -> Read {
    read_from(name, "fixture.000001:4".parse().unwrap()).await
}

/// `read` from `start` (with a MySQL GTID set, the reader keeps it up to date).
async fn read_from(name: &str, start: Position) -> Read {
    let events = events_of(name);
    let checksums_on = events.iter().flatten().any(|e| {
        e.fde().footer().get_checksum_alg().ok().flatten()
            == Some(mysql_common::binlog::consts::BinlogChecksumAlg::BINLOG_CHECKSUM_ALG_CRC32)
    });
    let mut reader = BinlogReader::reading(
        EventSource::Recorded(events.into_iter()),
        start,
        &[Pattern::new("*")],
        Duration::from_secs(1),
        false,
        checksums_on,
    );
    let mut transactions = Vec::new();
    loop {
        match reader.next_transaction().await {
            Ok(t) => transactions.push(t),
            Err(end) => return Read { transactions, end },
        }
    }
}

/// The file's events as the server would stream them: a compressed transaction
/// payload followed by the events inside it (as mysql_async's stream expands it).
fn events_of(name: &str) -> Vec<std::io::Result<Event>> {
    let file = std::io::BufReader::new(std::fs::File::open(fixture(name)).unwrap());
    let version = mysql_common::binlog::consts::BinlogVersion::Version4;
    let mut file = match mysql_common::binlog::BinlogFile::new(version, file) {
        Ok(f) => f,
        Err(e) => return vec![Err(e)],
    };
    let mut events = Vec::new();
    while let Some(event) = file.next() {
        let payload = event
            .as_ref()
            .ok()
            .filter(|e| e.header().event_type_raw() == EventType::TRANSACTION_PAYLOAD_EVENT as u8)
            .and_then(|e| e.read_event::<TransactionPayloadEvent<'_>>().ok())
            .map(|p| p.danger_decompress());
        events.push(event);
        let mut inner = std::io::Cursor::new(payload.unwrap_or_default());
        while let Some(e) = file.reader_mut().read_decompressed(&mut inner).transpose() {
            events.push(e);
        }
    }
    events
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
        ("corrupt-relay-bin.000624", Stop(statement)),
        ("bug40482-bin.000001", Stop("INCIDENT event")),
        ("ver_5_1-wl2325_r.001", Stop("cannot decode binlog event")),
        // Truncated files: nothing read, nothing passed.
        (
            "binlog_truncated_event.000001",
            End(0, 0, "fixture.000001:4"),
        ),
        (
            "binlog_truncated_prev_gtid_event.000001",
            End(0, 0, "fixture.000001:4"),
        ),
    ];
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
    // The rest: each reads to its end or stops with an error, never a panic.
    for entry in std::fs::read_dir(fixture("")).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != "SOURCE.md" {
            read(&name).await;
        }
    }
}
