//! Archived binlog files as a source (issue #24, part 3): with the router stopped, outbox
//! rows are written and deleted again (an insert-then-delete outbox: `recover` finds
//! nothing), the binlog is rotated and purged past the checkpoint, and
//! `mariadb-binlog --raw` kept copies. The router reads the purged range from the
//! archive and streams on from the server; a missing or cut file stops it, naming it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use mysql_async::prelude::Queryable;

use crate::util::*;

/// Copies the server's binlog files from `first` on into `dir`, as a backup with
/// `mariadb-binlog --read-from-remote-server --raw` does.
fn archive_with_mariadb_binlog(first: &str, dir: &Path) {
    let local = repo_root().join(".local");
    let out = std::process::Command::new("mariadb-binlog")
        .arg(format!(
            "--defaults-file={}",
            local.join("mariadb/my.cnf").display()
        ))
        .args([
            "--user=root",
            "--read-from-remote-server",
            "--raw",
            "--to-last-log",
        ])
        .arg(format!("--result-file={}/", dir.display()))
        .arg(first)
        .output()
        .unwrap();
    assert!(out.status.success(), "mariadb-binlog --raw: {out:?}");
}

/// A copy of `archive` in a new directory, changed by `change`.
fn altered_copy(archive: &Path, name: &str, change: impl Fn(&Path)) -> PathBuf {
    let dir = archive.with_file_name(name);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(archive).unwrap().flatten() {
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    change(&dir);
    dir
}

/// Rewrites the events of type `event_type` in the binlog file at `path` with `change`
/// (given the whole event, CRC32 trailer included), then recomputes each one's CRC32,
/// as a copy edited by a tool (or a foreign file renamed) would look.
fn rewrite_events(path: &Path, event_type: u8, change: impl Fn(&mut [u8])) {
    let mut bytes = std::fs::read(path).unwrap();
    let mut at = 4;
    let mut changed = 0;
    while at + 19 <= bytes.len() {
        let size = u32::from_le_bytes(bytes[at + 9..at + 13].try_into().unwrap()) as usize;
        if bytes[at + 4] == event_type {
            let event = &mut bytes[at..at + size];
            change(event);
            let crc = crc32fast::hash(&event[..size - 4]);
            event[size - 4..].copy_from_slice(&crc.to_le_bytes());
            changed += 1;
        }
        at += size;
    }
    assert!(
        changed > 0,
        "no event of type {event_type} in {}",
        path.display()
    );
    std::fs::write(path, bytes).unwrap();
}

/// ROTATE, FORMAT_DESCRIPTION.
const ROTATE: u8 = 4;
const FORMAT_DESCRIPTION: u8 = 15;

#[tokio::test(flavor = "multi_thread")]
async fn a_purged_range_is_read_from_archived_binlog_files() {
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, mut setup) = fresh("archive").await;
    let db = setup.db.clone();
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();

    write_stream(db.clone(), 0, 10, 5, 7).await;
    let mut router = setup.start_router();
    assert_eq!(wait_for_count(&topics, 50, Duration::from_secs(60)), 50);
    assert!(router.stop(Duration::from_secs(30)).success());
    let checkpoint = setup.checkpoint().unwrap();

    // Router down: 300 events over four files, some in compressed events, each batch of
    // rows deleted again once written.
    let _restore = RestoreGlobal("log_bin_compress", "OFF".into());
    for part in 0..4 {
        if part == 2 {
            conn.query_drop("SET GLOBAL log_bin_compress = ON")
                .await
                .unwrap();
        }
        write_stream(db.clone(), 10 + part * 15, 15, 5, 7).await;
        conn.query_drop(format!("DELETE FROM `{db}`.outbox"))
            .await
            .unwrap();
        conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    }
    conn.query_drop("SET GLOBAL log_bin_compress = OFF")
        .await
        .unwrap();
    // Every file the router needs is finished (ends with its ROTATE) before the copy.
    let (oldest, _) = binlog_position(&mut conn).await;
    let archive = setup.dir.path().join("archive");
    std::fs::create_dir_all(&archive).unwrap();
    archive_with_mariadb_binlog(&checkpoint.0, &archive);
    purge_to(&mut conn, &oldest).await;
    // After the purge, 20 more for the server itself to deliver.
    write_stream(db.clone(), 70, 4, 5, 7).await;
    let total = 50 + 300 + 20;

    // Unset: a purge stops it as before (exit 3), naming archive_dir as one way on.
    let mut router = setup.start_router();
    let status = router.wait(Duration::from_secs(60)).expect("refuses");
    assert_eq!(status.code(), Some(3), "{}", router.log());
    assert!(
        router.log().contains("source.archive_dir"),
        "{}",
        router.log()
    );

    // A file missing in the middle: refused, naming it; nothing delivered.
    let files: Vec<String> = {
        let mut names: Vec<String> = std::fs::read_dir(&archive)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert!(files.len() >= 5, "archived: {files:?}");
    let middle = files[2].clone();
    let gap = altered_copy(&archive, "gap", |d| {
        std::fs::remove_file(d.join(&middle)).unwrap()
    });
    setup.source_toml = format!("archive_dir = {:?}\n", gap);
    // validate names the gap beforehand.
    let validated = String::from_utf8_lossy(&setup.cli(&["validate"]).stdout).into_owned();
    assert!(
        validated.contains("binlog archive") && validated.contains(&format!("missing: {middle}")),
        "{validated}"
    );
    let mut router = setup.start_router();
    let log = router.expect_failure("a file missing from the archive");
    assert!(
        log.contains(&format!("lacks {middle}")) && log.contains(&checkpoint.0),
        "the missing file and the range are named:\n{log}"
    );
    assert_eq!(count(&topics), 50);

    // A file cut short: refused, naming the file and the offset where it ends.
    let cut = altered_copy(&archive, "cut", |d| {
        let path = d.join(&middle);
        let len = std::fs::metadata(&path).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 100).unwrap();
    });
    setup.source_toml = format!("archive_dir = {:?}\n", cut);
    let mut router = setup.start_router();
    let log = router.expect_failure("a cut archived file");
    assert!(
        log.contains(&format!("{middle} is damaged at offset")),
        "the cut file is named:\n{log}"
    );
    assert_eq!(count(&topics), 50);
    assert_eq!(
        setup.checkpoint().unwrap(),
        checkpoint,
        "a refused start moved the checkpoint"
    );

    // The checkpoint's file rotating past the next one (a mislabelled or foreign copy:
    // its ROTATE names the file after next, CRC recomputed). The reader stopped loudly at
    // the end of that file, but only after checkpointing the named file's start: the
    // next start streamed from there and the skipped file's events never arrived. Now the
    // range is refused before anything is read, by position and by GTID alike, and the
    // checkpoint stays where it was.
    let (skipped, named) = (files[1].clone(), files[2].clone());
    let mislabelled = altered_copy(&archive, "mislabelled", |d| {
        rewrite_events(&d.join(&checkpoint.0), ROTATE, |event| {
            let end = event.len() - 4;
            let name = &mut event[19 + 8..end];
            assert_eq!(name, skipped.as_bytes(), "same-length names");
            name.copy_from_slice(named.as_bytes());
        })
    });
    for resume_by in ["position", "gtid", "auto", "position"] {
        setup.source_toml = format!("archive_dir = {mislabelled:?}\nresume_by = \"{resume_by}\"\n");
        let mut router = setup.start_router();
        let log = router.expect_failure("an archived file rotating past the next one");
        assert!(
            log.contains(&format!(
                "it rotates to {named}, but the file after it is {skipped}"
            )),
            "resume_by {resume_by}: the mislabelled file is named:\n{log}"
        );
        assert_eq!(
            count(&topics),
            50,
            "resume_by {resume_by}: nothing delivered"
        );
        assert_eq!(
            setup.checkpoint().unwrap(),
            checkpoint,
            "resume_by {resume_by}: a refused start moved the checkpoint"
        );
    }

    // A file written by another server (its format description's server id), renamed
    // into the sequence: refused the same way.
    let foreign = altered_copy(&archive, "foreign", |d| {
        rewrite_events(&d.join(&skipped), FORMAT_DESCRIPTION, |event| {
            event[5..9].copy_from_slice(&4242u32.to_le_bytes())
        })
    });
    setup.source_toml = format!("archive_dir = {foreign:?}\n");
    let mut router = setup.start_router();
    let log = router.expect_failure("an archived file of another server");
    assert!(
        log.contains("written by server_id 4242") && log.contains(&skipped),
        "{log}"
    );
    assert_eq!(count(&topics), 50);
    assert_eq!(setup.checkpoint().unwrap(), checkpoint);

    // The whole archive: every event once, with its id, then the server's own.
    setup.source_toml = format!("archive_dir = {:?}\n", archive);
    let validated = String::from_utf8_lossy(&setup.cli(&["validate"]).stdout).into_owned();
    assert!(
        validated.contains(&format!("the server's oldest is {oldest}"))
            && !validated.contains("missing:"),
        "{validated}"
    );
    // The replica connection sits idle while the archive is read: held 2.5 s at the
    // handover with the server closing sessions idle for 1 s, it is gone by then — a
    // reason to connect again, not to fail (and re-read the archive from the start).
    // (Longer holds trip the read timeout of three 1-s heartbeats the hold sits in.)
    let current_wait: u64 = conn
        .query_first("SELECT @@global.wait_timeout")
        .await
        .unwrap()
        .unwrap();
    let restore_wait = RestoreGlobal("wait_timeout", current_wait.to_string());
    conn.query_drop("SET GLOBAL wait_timeout = 1")
        .await
        .unwrap();
    let mut router =
        setup.start_router_env(&[("FAILPOINTS", "archive.before_handover=sleep(2500)")]);
    let log = drain_and_stop(&mut router, &topics, total);
    drop(restore_wait);
    assert!(
        log.contains("idle during the archive read was closed: connecting again")
            && !log.contains("resuming from the last checkpoint"),
        "{log}"
    );
    assert!(log.contains("reading it from the archive"), "{log}");
    assert!(log.contains(&format!("server_from={oldest}")), "{log}");
    assert_eq!(
        check_stream(&topics, total),
        0,
        "duplicates after a clean stop"
    );
    let (file, _) = setup.checkpoint().unwrap();
    assert!(
        file >= oldest,
        "the checkpoint is on the server's binlog again: {file}"
    );
    println!(
        "archive: {} files, {total} events, 0 lost, 0 duplicates",
        files.len()
    );
}

/// A resume by GTID whose file is still on the server while the transactions right
/// after its GTID state were purged: the error says the GTID range is missing (and
/// where the oldest binlog starts), not that the file is gone.
#[tokio::test(flavor = "multi_thread")]
async fn a_gtid_resume_names_the_purged_gtid_range_not_its_file() {
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, mut setup) = fresh("gtid_gap").await;
    let db = setup.db.clone();
    let old_state: String = conn
        .query_first("SELECT @@GLOBAL.gtid_binlog_pos")
        .await
        .unwrap()
        .unwrap();
    insert_txn(&mut conn, &db, &[Ev::new("gap-1", "Order", "a", "{}")]).await;
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    insert_txn(&mut conn, &db, &[Ev::new("gap-2", "Order", "a", "{}")]).await;
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    let (current, _) = binlog_position(&mut conn).await;
    purge_to(&mut conn, &current).await;

    // A checkpoint in the oldest file the server has, with a GTID state from before it.
    let position = format!("{current}:4 gtid={old_state}");
    let set = setup.cli(&["checkpoint", "set", &position]);
    assert!(set.status.success(), "{set:?}");
    setup.source_toml = "resume_by = \"gtid\"\n".into();
    let log = setup.start_router().expect_failure("a purged GTID range");
    assert!(
        log.contains("resumes by GTID: its file is still on the server, but the transactions right after its GTID state are not")
            && log.contains(&format!("the oldest binlog it has, {current}, starts at GTID state")),
        "{log}"
    );
    assert!(!log.contains("is no longer on the server"), "{log}");
}

/// The router refuses to start when its binlog was purged (exit 3, names the position and
/// the recovery command); `recover` re-publishes from the table; 0 events lost.
#[tokio::test(flavor = "multi_thread")]
async fn purged_binlog_is_refused_and_recovered_from_the_table() {
    let _settings = SERVER_SETTINGS.write().await;
    let (mut conn, setup) = fresh("purged").await;
    let db = setup.db.clone();
    let topics: Vec<String> = TYPES.iter().map(|t| setup.topic(t)).collect();

    // One event per transaction so each row has its own created_at (recovery order).
    write_stream(db.clone(), 0, 100, 1, 10).await;
    let mut router = setup.start_router();
    assert_eq!(
        wait_for_count(&topics, 100, Duration::from_secs(60)),
        100,
        "{}",
        router.log()
    );
    assert!(router.stop(Duration::from_secs(30)).success());
    let checkpoint = setup.checkpoint().unwrap();

    // Router down; events written; their binlog purged.
    write_stream(db.clone(), 100, 200, 1, 10).await;
    conn.query_drop("FLUSH BINARY LOGS").await.unwrap();
    let (current, _) = binlog_position(&mut conn).await;
    purge_to(&mut conn, &current).await;

    let mut router = setup.start_router();
    let status = router.wait(Duration::from_secs(60));
    let log = router.log();
    let status = status.unwrap_or_else(|| panic!("router must refuse a purged position:\n{log}"));
    assert_eq!(
        status.code(),
        Some(3),
        "exit code for a purged binlog:\n{log}"
    );
    assert!(
        log.contains(&format!("{}:{}", checkpoint.0, checkpoint.1)),
        "needed position not named:\n{log}"
    );
    assert!(
        log.contains(&format!("oldest binlog it has: {current}")),
        "oldest file not named:\n{log}"
    );
    assert!(
        log.contains("recover"),
        "recovery command not named:\n{log}"
    );
    assert_eq!(
        setup.checkpoint().unwrap(),
        checkpoint,
        "a refused start must not move the checkpoint"
    );

    // A dry run counts and changes nothing; a window with no rows is refused.
    // Durations in human units, as everywhere (`--margin 10m` is the default 600 s).
    let out = setup.cli(&[
        "recover",
        "--timestamp-column",
        "created_at",
        "--margin",
        "10m",
        "--dry-run",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("dry run: 300 event(s)"),
        "{text}{out:?}"
    );
    assert_eq!(
        setup.checkpoint().unwrap(),
        checkpoint,
        "the dry run moved the checkpoint"
    );
    let future = (std::time::SystemTime::now() + Duration::from_secs(86_400))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let out = setup.cli(&["recover", "--since", &future]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--allow-empty"),
        "{out:?}"
    );
    assert_eq!(
        setup.checkpoint().unwrap(),
        checkpoint,
        "an empty recover moved the checkpoint"
    );

    let out = setup.cli(&["recover", "--timestamp-column", "created_at"]);
    assert!(
        out.status.success(),
        "recover failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("re-published"));

    let mut router = setup.start_router();
    write_stream(db.clone(), 300, 50, 1, 10).await;
    assert!(
        wait_for_count(&topics, 350, Duration::from_secs(60)) >= 350,
        "{}",
        router.log()
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(router.stop(Duration::from_secs(30)).success());
    check_stream(&topics, 350);
}
