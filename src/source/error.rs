//! The source stage's error type: what went wrong with the server or the binlog, and
//! whether a retry from the checkpoint can help.

use crate::secret::SecretError;

use super::Position;

/// Errors from the source server. Each says whether a retry from the checkpoint can help.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot connect to {host}:{port} as {user}: {source}")]
    Connect {
        host: String,
        port: u16,
        user: String,
        source: mysql_async::Error,
    },
    #[error("connecting to {host}:{port} timed out after {secs} s")]
    ConnectTimeout { host: String, port: u16, secs: u64 },
    #[error("query {query:?} failed: {source}")]
    Query {
        query: &'static str,
        source: mysql_async::Error,
    },
    #[error("binlog stream broke at {position}: {source}")]
    Stream {
        position: String,
        source: mysql_async::Error,
    },
    #[error("binlog stream ended by the server at {position}")]
    StreamEnded { position: String },
    #[error("no binlog event for {secs} s at {position} although heartbeats were requested: connection presumed dead")]
    ReadTimeout { position: String, secs: u64 },
    #[error("the server sent nothing for {secs} s after the binlog stream opened at {position}: it was still looking for the start position (joined by GTID, a server reads its binlog file from the start up to that GTID, sending nothing meanwhile), or the connection is dead")]
    NotLocated { position: String, secs: u64 },
    #[error("cannot decode binlog event at {position}: {reason}")]
    Decode { position: String, reason: String },
    #[error("binlog position {needed} {missing}; the events after it were purged before the router read them; if copies of the binlog files are kept (a backup, `mariadb-binlog --raw`), set source.archive_dir to their directory and start again; else recover them from the outbox table, keeping their event ids: outbox-router -c CONFIG recover (then start the router again); never jump the checkpoint forward by hand: that skips events")]
    Purged {
        needed: Box<Position>,
        missing: Missing,
    },
    #[error("binlog event at {position} cannot be accounted for: {reason}; the router stops rather than risk skipping outbox rows; check the server's settings (`outbox-router validate`); after deciding it holds no outbox rows, move past it with `checkpoint set`")]
    Unaccountable { position: String, reason: String },
    #[error("a data change logged as a statement at {position}: {statement:?}{names}. The binlog holds no rows for it, and a statement can write an outbox table it does not name (triggers, stored functions, views, foreign-key cascades), so the router stops rather than risk skipping outbox rows. Fix the cause: binlog_format=ROW in my.cnf and SET GLOBAL binlog_format=ROW, and keep SUPER / BINLOG ADMIN (needed to change a session's binlog_format) from the services that write. Then, if the statement wrote outbox rows, publish them from the table with their event ids (`outbox-router replay --ids …`, or `recover`) and move past it with `outbox-router checkpoint set` to the end of its transaction (SHOW BINLOG EVENTS)")]
    StatementLogged {
        /// `; it names outbox table db.t` when the text does.
        names: String,
        position: String,
        statement: String,
    },
    #[error("the server's settings changed under the router: outbox table {table} at {position}: {what}. This is not a bad row, so `on_invalid` does not apply: the router stops before it. Fix: {fix}; rows written meanwhile lack what the router needs: publish them from the table (`outbox-router replay` / `recover`) and move past them with `checkpoint set`")]
    SettingChanged {
        table: String,
        position: String,
        what: String,
        fix: &'static str,
    },
    #[error("XA COMMIT of branch {xid} at {position}, whose XA PREPARE (which holds its rows) the router never read: the checkpoint was moved past it while it was prepared (`checkpoint set`, `recover`, `import-debezium` with --ignore-prepared-xa, or a checkpoint from before XA support). Its rows were not delivered by this router — unless the checkpoint was written by a build before `delivered_through` while another branch was prepared: then they were, and `checkpoint set` past this commit is right. Set the checkpoint to a position before its XA PREPARE (find it with SHOW BINLOG EVENTS or mariadb-binlog) and start again; or publish its rows from the table with `outbox-router replay --ids …` and move past this commit with `checkpoint set`")]
    XaNotSeen { xid: String, position: String },
    #[error("rows of outbox table {table} in a transaction that ended in ROLLBACK at {position}: they never committed and are not published, but their transaction also changed non-transactional tables, which the outbox pattern cannot make atomic; keep the outbox and the business tables on InnoDB; after checking, move past it with `checkpoint set`")]
    RolledBack { table: String, position: String },
    #[error("the transaction starting at {position} has more than {limit} bytes of outbox rows (source.max_transaction_bytes): the router stops rather than split or drop it; raise or remove the limit (without one, large transactions stream)")]
    TransactionTooLarge { position: String, limit: u64 },
    #[error("prepared XA branches would hold {held} bytes of outbox rows with the one starting at {position} (source.max_xa_held_bytes = {limit}): a branch's rows are held in memory from its XA PREPARE until its XA COMMIT, never published before, so the router stops here rather than grow without bound; the checkpoint stays before the branch. Raise source.max_xa_held_bytes (the router needs about that much more memory), or commit or roll back the branches (XA RECOVER lists them)")]
    XaTooLarge {
        position: String,
        held: u64,
        limit: u64,
    },
    #[error("the server refused to stream from {position} (error {code}: {message}): {fix}")]
    Refused {
        position: String,
        code: u16,
        message: String,
        fix: &'static str,
    },
    #[error("another replica with this source.server_id took the binlog stream at {position} (the server says: {message}): give every router and replica its own server_id")]
    ServerIdConflict { position: String, message: String },
    #[error("checkpoint position {position} is beyond the end of {file} ({size} bytes) on this server: the checkpoint does not belong to this server; point source.host at the server it came from, or move it deliberately with `checkpoint set`")]
    ForeignPosition {
        position: String,
        file: String,
        size: u64,
    },
    #[error("the binlog archive {dir} lacks {missing}, part of the range the router needs from it ({needed}; the server purged those files): put the file there (from the backup that should hold it) and start again; without it, recover the rows from the outbox table (`outbox-router recover`)")]
    ArchiveIncomplete {
        dir: std::path::PathBuf,
        missing: String,
        needed: String,
    },
    #[error("archived binlog file {file} is damaged at offset {offset}: {reason}. The router stops rather than skip what it holds: put an intact copy there and start again; without one, recover the rows from the outbox table (`outbox-router recover`)")]
    ArchiveDamaged {
        file: std::path::PathBuf,
        offset: u64,
        reason: String,
    },
    #[error("archived binlog file {file} is not part of the checkpoint's history: {reason}. The router stops before reading anything, so the checkpoint stays where it was: put the server's own copy there and start again; without one, recover the rows from the outbox table (`outbox-router recover`)")]
    ArchiveForeign {
        file: std::path::PathBuf,
        reason: String,
    },
    #[error("the check of archived binlog file {file} was stopped at offset {offset} (shutdown); nothing was read")]
    ArchiveCheckStopped {
        file: std::path::PathBuf,
        offset: u64,
    },
    #[error("cannot read the binlog archive at {path}: {source}")]
    ArchiveRead {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{feature} {}; on MySQL, {instead}",
        crate::source::server::MARIADB_ONLY
    )]
    MariaDbOnly {
        feature: &'static str,
        instead: &'static str,
    },
    #[error("`{command}` would move the checkpoint past {} prepared XA branch(es) (XA RECOVER: {}): their rows were logged at their XA PREPARE, before the new position, and would never be published when they commit; commit or roll them back first, or repeat with --ignore-prepared-xa (the router then stops at each one's XA COMMIT, naming it)", xids.len(), xids.join(" "))]
    PreparedXaBlocksMove {
        command: &'static str,
        xids: Vec<String>,
    },
    #[error("source.resume_by = \"gtid\" but checkpoint {checkpoint} has no GTID state: use resume_by = \"auto\" or \"position\"")]
    NoGtidToResumeBy { checkpoint: String },
    #[error("server answered unexpectedly: {0}")]
    Unexpected(String),
    #[error("the checkpoint {checkpoint} is a position in the binlog of server_id {checkpoint_server}, and source points at server_id {server}: a file position only means something on the server that wrote it, and it cannot resume by GTID (source.resume_by, or the checkpoint has no GTID state covering this server's domains). Point source at server {checkpoint_server}; or, after a failover, `recover --since` (re-publishes the outbox rows since the old server's last commit) or `checkpoint set` a position on this server")]
    CheckpointOfOtherServer {
        checkpoint: String,
        checkpoint_server: u32,
        server: u32,
    },
    #[error(transparent)]
    Password(#[from] SecretError),
}

impl SourceError {
    /// True when reconnecting from the last checkpoint may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            SourceError::Connect { source, .. }
            | SourceError::Query { source, .. }
            | SourceError::Stream { source, .. } => !is_access_error(source),
            SourceError::ConnectTimeout { .. }
            | SourceError::ServerIdConflict { .. }
            | SourceError::StreamEnded { .. }
            | SourceError::ReadTimeout { .. }
            | SourceError::NotLocated { .. } => true,
            SourceError::Decode { .. }
            | SourceError::Unaccountable { .. }
            | SourceError::StatementLogged { .. }
            | SourceError::SettingChanged { .. }
            | SourceError::XaNotSeen { .. }
            | SourceError::RolledBack { .. }
            | SourceError::TransactionTooLarge { .. }
            | SourceError::XaTooLarge { .. }
            | SourceError::Refused { .. }
            | SourceError::Purged { .. }
            | SourceError::ForeignPosition { .. }
            | SourceError::ArchiveIncomplete { .. }
            | SourceError::ArchiveDamaged { .. }
            | SourceError::ArchiveForeign { .. }
            | SourceError::ArchiveCheckStopped { .. }
            | SourceError::ArchiveRead { .. }
            | SourceError::MariaDbOnly { .. }
            | SourceError::PreparedXaBlocksMove { .. }
            | SourceError::NoGtidToResumeBy { .. }
            | SourceError::Unexpected(_)
            | SourceError::CheckpointOfOtherServer { .. }
            | SourceError::Password(_) => false,
        }
    }

    pub(crate) fn stream(at: &Position, source: mysql_async::Error) -> Self {
        // 1236: the server cannot send from this position or GTID state. Only a purge
        // is answered by `recover`; the other causes need a different fix.
        if let mysql_async::Error::Server(e) = &source {
            let (position, code, message) = (at.to_string(), e.code, e.message.clone());
            let refusal = match code {
                // MariaDB kicks the older replica of a server id with 4052.
                4052 => Refusal1236::SameServerId,
                1236 => refusal_1236(&message),
                _ => return SourceError::Stream { position, source },
            };
            let fix = match refusal {
                Refusal1236::Purged => {
                    return SourceError::Purged {
                        needed: Box::new(at.clone()),
                        missing: Missing::Unknown {
                            server_says: message,
                        },
                    }
                }
                Refusal1236::SameServerId => {
                    return SourceError::ServerIdConflict { position, message }
                }
                Refusal1236::UnknownGtid => "the server never had the transactions this checkpoint's GTID state names: it is another server, or a replica that has not received them. Point source.host at the server the checkpoint came from (or one of its replicas that has them); `recover` does not apply",
                Refusal1236::Other => "the position does not fit this server's binlog; check that source.host is the server the checkpoint came from",
            };
            return SourceError::Refused {
                position,
                code,
                message,
                fix,
            };
        }
        SourceError::Stream {
            position: at.to_string(),
            source,
        }
    }
}

/// What of a position the server no longer has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// The position's binlog file.
    File {
        /// The oldest binlog file the server has (`none` when it lists none).
        oldest: String,
    },
    /// The transactions between the position's GTID state and the server's oldest
    /// binlog, while the position's own file is still there: a resume by GTID needs
    /// what came before.
    GtidRange {
        oldest: String,
        /// The GTID state where the oldest binlog starts, when the server tells.
        oldest_starts_at: Option<String>,
    },
    /// The server said so while streaming; nothing more is known yet.
    Unknown { server_says: String },
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missing::File { oldest } => {
                write!(
                    f,
                    "is no longer on the server (oldest binlog it has: {oldest})"
                )
            }
            Missing::GtidRange {
                oldest,
                oldest_starts_at,
            } => {
                write!(f, "resumes by GTID: its file is still on the server, but the transactions right after its GTID state are not (purged: the oldest binlog it has, {oldest}, starts ")?;
                match oldest_starts_at {
                    Some(state) => write!(f, "at GTID state {state})"),
                    None => f.write_str("after them)"),
                }
            }
            Missing::Unknown { server_says } => {
                write!(
                    f,
                    "is no longer on the server (the server says: {server_says})"
                )
            }
        }
    }
}

/// Access denied and missing privileges do not fix themselves by retrying.
/// What a replication error 1236 means, read from the server's message (MariaDB and
/// MySQL share the code for all of them).
#[derive(Debug, PartialEq, Eq)]
enum Refusal1236 {
    /// The binlog (file, or the GTIDs) needed was purged.
    Purged,
    /// Another replica uses the same server id (MySQL's 1236 wording; MariaDB says 4052).
    SameServerId,
    /// The GTID state names transactions the server never had.
    UnknownGtid,
    /// Anything else (e.g. a position past the end of the file).
    Other,
}

fn refusal_1236(message: &str) -> Refusal1236 {
    let m = message.to_ascii_lowercase();
    if m.contains("purged") || m.contains("could not find first log file") {
        Refusal1236::Purged
    } else if m.contains("same server_uuid") || m.contains("same server_id") {
        Refusal1236::SameServerId
    } else if m.contains("gtid") {
        Refusal1236::UnknownGtid
    } else {
        Refusal1236::Other
    }
}

fn is_access_error(e: &mysql_async::Error) -> bool {
    // 1045 access denied, 1044 db access denied, 1227 missing privilege: all need an
    // operator.
    matches!(e, mysql_async::Error::Server(s) if matches!(s.code, 1044 | 1045 | 1227))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each purge says what is gone: the file, or the GTID range before the oldest file.
    #[test]
    fn a_purge_says_what_is_missing() {
        let needed: Position = "mysql-bin.000017:4 gtid=0-1-90".parse().unwrap();
        let text = |missing: Missing| {
            SourceError::Purged {
                needed: Box::new(needed.clone()),
                missing,
            }
            .to_string()
        };
        let file = text(Missing::File {
            oldest: "mysql-bin.000019".into(),
        });
        assert!(file.starts_with("binlog position mysql-bin.000017:4 gtid=0-1-90 is no longer on the server (oldest binlog it has: mysql-bin.000019); "), "{file}");
        let range = text(Missing::GtidRange {
            oldest: "mysql-bin.000017".into(),
            oldest_starts_at: Some("0-1-120".into()),
        });
        assert!(range.contains("resumes by GTID: its file is still on the server, but the transactions right after its GTID state are not (purged: the oldest binlog it has, mysql-bin.000017, starts at GTID state 0-1-120)"), "{range}");
        assert!(!range.contains("no longer on the server"), "{range}");
        let unknown = text(Missing::GtidRange {
            oldest: "mysql-bin.000017".into(),
            oldest_starts_at: None,
        });
        assert!(
            unknown.contains(
                "(purged: the oldest binlog it has, mysql-bin.000017, starts after them)"
            ),
            "{unknown}"
        );
        let gone = text(Missing::Unknown {
            server_says: "Could not find GTID state requested by slave in any binlog files".into(),
        });
        assert!(
            gone.contains("is no longer on the server (the server says: Could not find GTID state"),
            "{gone}"
        );
        for e in [file, range, unknown, gone] {
            assert!(e.contains("archive_dir") && e.contains("recover"), "{e}");
        }
    }

    /// The servers' own messages for error 1236 (MariaDB 10.11 and MySQL 8 sources).
    #[test]
    fn tells_the_causes_of_1236_apart() {
        use Refusal1236::*;
        for (message, want) in [
            ("Could not find first log file name in binary log index file", Purged),
            ("Could not find GTID state requested by slave in any binlog files. Probably the slave state is too old and required binlog files have been purged.", Purged),
            ("Cannot replicate because the master purged required binary logs. Replicate the missing transactions from elsewhere, or provision a new slave from backup.", Purged),
            ("The slave is connecting using CHANGE MASTER TO MASTER_AUTO_POSITION = 1, but the master has purged binary logs containing GTIDs that the slave requires.", Purged),
            ("Error: connecting slave requested to start from GTID 0-1-999999, which is not in the master's binlog", UnknownGtid),
            ("Slave has more GTIDs than the master has, using the master's SERVER_UUID. This may indicate that the end of the binary log was truncated", UnknownGtid),
            ("A slave with the same server_uuid/server_id as this slave has connected to the master; the first event 'mysql-bin.000003' at 154 was not found", SameServerId),
            ("Client requested master to start replication from position > file size", Other),
        ] {
            assert_eq!(refusal_1236(message), want, "{message}");
        }
    }
}
