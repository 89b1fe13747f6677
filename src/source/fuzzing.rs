//! An entry point for the `binlog_file` fuzz target: any bytes as an archived binlog
//! file, through the archive source and the reader. Not part of the public interface.

use std::time::Duration;

use super::archive::ArchiveEvents;
use super::reader::BinlogReader;
use crate::pattern::Pattern;
use crate::position::Position;

/// Reads `bytes` as the binlog file `fixture.000001` watching every table, to the end or
/// the first error; returns how many transactions came out. Never panics (the claim
/// the fuzz target tests).
#[doc(hidden)]
pub fn read_binlog_bytes(bytes: &[u8]) -> usize {
    let dir = std::env::temp_dir().join(format!("outbox-router-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("fixture.000001");
    std::fs::write(&path, bytes).expect("temp file");
    let start: Position = "fixture.000001:4".parse().expect("a position");
    let events = ArchiveEvents::new(vec![(start.file.clone(), path)], start.clone(), false);
    let mut reader = BinlogReader::from_events(events, start, &[Pattern::new("*")]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let mut transactions = 0;
        while tokio::time::timeout(Duration::from_secs(5), reader.next_transaction())
            .await
            .is_ok_and(|r| r.is_ok())
        {
            transactions += 1;
        }
        transactions
    })
}
