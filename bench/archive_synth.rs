//! Writes a large archived binlog file for `bench/archive` from a real, finished one:
//! its header events (magic, format description, GTID list, …) once, then its
//! transactions (from its first GTID event up to its final ROTATE) again and again until
//! the file reaches `--bytes`, then its ROTATE. Every copied event gets its new end
//! position and a recomputed CRC32, so the file walks like one the server wrote (its
//! repeated GTIDs and event ids do not matter to a check or a time to first delivery).
//!
//!   archive_synth --from FILE --to FILE --bytes N

use std::io::Write;

const HEADER: usize = 19;
const GTID: u8 = 162; // MariaDB GTID_EVENT
const ROTATE: u8 = 4;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        let at = args
            .iter()
            .position(|a| a == name)
            .unwrap_or_else(|| panic!("{name} is required"));
        args[at + 1].clone()
    };
    let (from, to) = (arg("--from"), arg("--to"));
    let target: u64 = arg("--bytes").parse().expect("--bytes N");
    assert!(
        target < 4 << 30,
        "binlog end positions are 32-bit: at most 4 GiB"
    );
    let input = std::fs::read(&from).expect("read --from");
    let mut events = Vec::new();
    let mut at = 4;
    while at + HEADER <= input.len() {
        let size = u32::from_le_bytes(input[at + 9..at + 13].try_into().unwrap()) as usize;
        events.push(&input[at..at + size]);
        at += size;
    }
    let first_txn = events
        .iter()
        .position(|e| e[4] == GTID)
        .expect("a GTID event");
    let rotate = events.len() - 1;
    assert_eq!(
        events[rotate][4], ROTATE,
        "a finished file ends with ROTATE"
    );
    let (head, body) = (&events[..first_txn], &events[first_txn..rotate]);
    let mut out = std::io::BufWriter::with_capacity(
        8 << 20,
        std::fs::File::create(&to).expect("create --to"),
    );
    out.write_all(b"\xfebin").unwrap();
    let mut pos: u64 = 4;
    let mut write = |event: &[u8], pos: &mut u64| {
        let mut e = event.to_vec();
        *pos += e.len() as u64;
        e[13..17].copy_from_slice(&(*pos as u32).to_le_bytes());
        let n = e.len();
        let crc = crc32fast::hash(&e[..n - 4]);
        e[n - 4..].copy_from_slice(&crc.to_le_bytes());
        out.write_all(&e).unwrap();
    };
    for e in head {
        write(e, &mut pos);
    }
    let (mut rounds, mut transactions) = (0u64, 0u64);
    while pos < target {
        for e in body {
            write(e, &mut pos);
            transactions += u64::from(e[4] == GTID);
        }
        rounds += 1;
    }
    write(events[rotate], &mut pos);
    out.flush().unwrap();
    println!(
        "bytes={pos} events={} transactions={transactions}",
        head.len() as u64 + rounds * body.len() as u64 + 1
    );
}
