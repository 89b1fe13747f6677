//! The checkpoint store under `kill -9` during writes: it must open every time, never
//! lose an acknowledged (flushed) checkpoint and never hold one that was not attempted.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use outbox_router::checkpoint::{Checkpoint, CheckpointStore};

const CYCLES: usize = 200;
const DIR_VAR: &str = "OUTBOX_TORTURE_DIR";

fn position(offset: u64) -> outbox_router::position::Position {
    format!("mysql-bin.000001:{offset}").parse().unwrap()
}

/// Child mode (only when `OUTBOX_TORTURE_DIR` is set): saves checkpoints with increasing
/// offsets forever, saying which are attempted and which are durable.
#[test]
fn torture_writer_child() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let store = CheckpointStore::create(Path::new(&dir)).expect("store opens");
    let start = store
        .load()
        .expect("store reads")
        .map_or(4, |c| c.position.offset);
    let mut out = std::io::stdout().lock();
    // libtest has printed "test … " without a newline: start on a line of our own.
    writeln!(out).unwrap();
    for offset in start + 1.. {
        writeln!(out, "attempt {offset}").unwrap();
        out.flush().unwrap();
        store
            .save(&Checkpoint::new(position(offset), 0))
            .expect("save");
        writeln!(out, "durable {offset}").unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn checkpoint_store_survives_kill9_during_writes() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let (mut durable, mut attempted) = (0u64, 0u64);
    let mut seed = u64::from(std::process::id());
    for cycle in 0..CYCLES {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "checkpoint_torture::torture_writer_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIR_VAR, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (first_durable, wrote) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let (mut d, mut a) = (0u64, 0u64);
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(v) = line.strip_prefix("durable ") {
                    d = v.parse().unwrap();
                    let _ = first_durable.send(());
                } else if let Some(v) = line.strip_prefix("attempt ") {
                    a = v.parse().unwrap();
                }
            }
            (d, a)
        });
        // Every cycle makes progress however slow the disk is today; then the kill
        // lands at a random moment of the following writes.
        let _ = wrote.recv_timeout(Duration::from_secs(30));
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        std::thread::sleep(Duration::from_millis((seed >> 33) % 60));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let (d, a) = reader.join().unwrap();
        durable = durable.max(d);
        attempted = attempted.max(a);

        let store = CheckpointStore::open(dir.path())
            .unwrap_or_else(|e| panic!("cycle {cycle}: store does not open after kill -9: {e}"));
        let stored = store
            .load()
            .unwrap_or_else(|e| panic!("cycle {cycle}: unreadable after kill -9: {e}"));
        let offset = stored.map_or(0, |c| c.position.offset);
        assert!(
            offset >= durable,
            "cycle {cycle}: checkpoint went back to {offset}, {durable} was acknowledged"
        );
        assert!(
            offset <= attempted.max(4),
            "cycle {cycle}: checkpoint {offset} was never written (max {attempted})"
        );
    }
    assert!(
        durable > CYCLES as u64,
        "the writer made too little progress ({durable}) to test anything"
    );
    println!("checkpoint store kill -9: cycles={CYCLES} opened={CYCLES} backwards=0 forwards=0 last_durable={durable}");
}
