//! Any bytes as an archived binlog file (MariaDB compressed events, MySQL compressed
//! payloads, cut and damaged events included): transactions or a clear error, never a
//! panic or a hang. Seed it with `tests/fixtures/mysql-binlogs` and
//! `tests/fixtures/mariadb-compressed`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = outbox_router::source::fuzzing::read_binlog_bytes(data);
});
