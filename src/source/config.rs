//! `[source]`: the server to replicate from, how to connect, where a first start begins.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use crate::position::Position;
use crate::secret::{Secret, SecretError};

/// Connection to the source server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// Host name or IP address.
    #[serde(default = "default_host")]
    pub host: String,
    /// TCP port.
    #[serde(default = "default_port")]
    pub port: u16,
    /// Replication user (needs REPLICATION SLAVE, BINLOG MONITOR / REPLICATION CLIENT, SELECT).
    pub user: String,
    /// The password: `"${env:NAME}"` or `"${file:PATH}"`, read when a command connects.
    pub password: Option<Secret>,
    /// Shorthand for `password = "${env:NAME}"`.
    pub password_env: Option<String>,
    /// Shorthand for `password = "${file:PATH}"`.
    pub password_file: Option<PathBuf>,
    /// Replica server id; unique among all replicas of this server.
    pub server_id: u32,
    /// Where to start when there is no checkpoint: `latest`, `earliest` or `FILE:OFFSET`.
    #[serde(default)]
    pub start: StartFrom,
    /// Seconds between server heartbeats; a silent connection is dropped after three.
    #[serde(
        default = "default_heartbeat_secs",
        deserialize_with = "crate::units::secs"
    )]
    pub heartbeat_secs: u64,
    /// Seconds to wait for a connection.
    #[serde(
        default = "default_connect_timeout_secs",
        deserialize_with = "crate::units::secs"
    )]
    pub connect_timeout_secs: u64,
    /// Stop after this many times another replica with the same `server_id` took the
    /// stream within ten minutes (each one is a warning; they would flap forever).
    #[serde(default = "default_server_id_conflicts_max")]
    pub server_id_conflicts_max: u32,
    /// Stop at a transaction with more outbox row bytes than this (binlog row events),
    /// holding each whole until then; unset (default): transactions of any size stream
    /// through in parts.
    #[serde(default, deserialize_with = "crate::units::bytes_opt")]
    pub max_transaction_bytes: Option<u64>,
    /// Outbox row bytes prepared XA branches may hold, all together, from `XA PREPARE`
    /// until `XA COMMIT` (held in memory: never published before their commit).
    #[serde(
        default = "default_max_xa_held_bytes",
        deserialize_with = "crate::units::bytes"
    )]
    pub max_xa_held_bytes: usize,
    /// TLS to the server: `disabled`, `required` (encrypted, certificate not checked),
    /// `verify_ca` (signed by `tls_ca_file`) or `verify_identity` (also matches `host`).
    #[serde(default)]
    pub tls_mode: TlsMode,
    /// PEM file of the CA that signed the server's certificate.
    pub tls_ca_file: Option<PathBuf>,
    /// How a restart finds its place: `auto` (by GTID when the server is MariaDB and the
    /// checkpoint has GTID state, so a failover to another server works; else by file
    /// and offset), `gtid` or `position`.
    #[serde(default)]
    pub resume_by: ResumeBy,
    /// With no checkpoint yet: `never` (rows already in the outbox were someone else's
    /// job), `initial` (publish them from one consistent snapshot, then stream from
    /// exactly that position; MariaDB), or `{ watermark = "id > 1234567" }` (the same
    /// for the rows past a polling relay's handover watermark).
    #[serde(default)]
    pub snapshot: SnapshotMode,
    /// Directory of archived binlog files: copies of the server's own files, or a
    /// `mariadb-binlog --read-from-remote-server --raw` / `mysqlbinlog --raw` backup.
    /// When the server has purged the binlog the checkpoint needs, the router reads that
    /// range from here (every file of it, whole, or it stops naming what is missing) and
    /// then streams on from the oldest file the server holds. Unset: a purge stops the
    /// router (exit 3) and `recover` re-publishes from the outbox table.
    #[serde(default)]
    pub archive_dir: Option<PathBuf>,
    /// Columns that order rows read from the table (snapshot, `recover`), so each
    /// aggregate's events go out in commit order, e.g. `["created_at", "seq"]`. Default:
    /// the timestamp column if mapped, else the table's own order (primary key).
    #[serde(default)]
    pub snapshot_order_by: Vec<String>,
}

/// What happens to rows already in the outbox on the very first start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SnapshotMode {
    /// Start streaming at `start`; existing rows are not published.
    #[default]
    Never,
    /// Publish existing rows from a consistent snapshot, then stream from its position.
    Initial,
    /// Publish the existing rows matching this SQL condition (a polling relay's handover
    /// watermark, e.g. `id > 1234567`) from a consistent snapshot, then stream from its
    /// position.
    Watermark(String),
}

impl<'de> Deserialize<'de> for SnapshotMode {
    /// `"never"`, `"initial"`, or `{ watermark = "SQL condition" }`.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Name(String),
            Table { watermark: String },
        }
        match Raw::deserialize(d)? {
            Raw::Name(n) if n == "never" => Ok(SnapshotMode::Never),
            Raw::Name(n) if n == "initial" => Ok(SnapshotMode::Initial),
            Raw::Name(n) => Err(serde::de::Error::custom(format!(
                "source.snapshot {n:?}: expected \"never\", \"initial\" or {{ watermark = \"SQL condition\" }}"
            ))),
            Raw::Table { watermark } if watermark.trim().is_empty() => Err(
                serde::de::Error::custom("source.snapshot.watermark is empty"),
            ),
            Raw::Table { watermark } => Ok(SnapshotMode::Watermark(watermark)),
        }
    }
}

/// How the stream is resumed from a checkpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResumeBy {
    /// GTID when possible, else file and offset.
    #[default]
    Auto,
    /// Always by GTID (MariaDB connect state, MySQL GTID set); an error when the
    /// checkpoint has none.
    Gtid,
    /// Always by file and offset (same server only).
    Position,
}

/// How the connection to the source server is secured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TlsMode {
    /// Plain TCP.
    #[default]
    Disabled,
    /// Encrypted; the certificate is not verified.
    Required,
    /// Encrypted; the certificate must be signed by the configured CA.
    VerifyCa,
    /// Encrypted; signed by the CA and issued for `host`.
    VerifyIdentity,
}

/// Where streaming starts when no checkpoint exists yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum StartFrom {
    /// The server's current position: only new transactions are published.
    #[default]
    Latest,
    /// The oldest binlog the server still has.
    Earliest,
    /// An explicit transaction boundary.
    At(Position),
}

impl FromStr for StartFrom {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "latest" => Ok(Self::Latest),
            "earliest" => Ok(Self::Earliest),
            other => other.parse().map(Self::At).map_err(|e| {
                format!("start must be \"latest\", \"earliest\" or FILE:OFFSET ({e})")
            }),
        }
    }
}

impl<'de> Deserialize<'de> for StartFrom {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

fn default_host() -> String {
    "127.0.0.1".into()
}

fn default_port() -> u16 {
    3306
}

fn default_max_xa_held_bytes() -> usize {
    256 << 20
}

/// MySQL's and MariaDB's largest `MASTER_HEARTBEAT_PERIOD`.
const MAX_HEARTBEAT_SECS: u64 = 4_294_967;

fn default_heartbeat_secs() -> u64 {
    2
}

fn default_connect_timeout_secs() -> u64 {
    10
}

impl SourceConfig {
    /// The password, read now from where `password` (or a shorthand) points.
    pub fn password(&self) -> Result<Option<Secret>, SecretError> {
        crate::secret::resolve_password(
            self.password.as_ref(),
            self.password_env.as_deref(),
            self.password_file.as_deref(),
            "source.password",
        )
    }

    /// What is wrong with these settings, if anything.
    pub fn check(&self) -> Result<(), String> {
        if self.heartbeat_secs > MAX_HEARTBEAT_SECS {
            return Err(format!(
                "source.heartbeat_secs = {} is longer than a server accepts as a replica's heartbeat period ({MAX_HEARTBEAT_SECS} s, about 49 days); a few seconds is usual (a silent connection is dropped after three periods)",
                self.heartbeat_secs
            ));
        }
        if self.server_id == 0 {
            return Err(
                "source.server_id must be non-zero and unique among the server's replicas".into(),
            );
        }
        if matches!(self.tls_mode, TlsMode::VerifyCa | TlsMode::VerifyIdentity)
            && self.tls_ca_file.is_none()
        {
            return Err(
                "source.tls_mode verify_ca / verify_identity needs source.tls_ca_file".into(),
            );
        }
        let passwords = [
            self.password.is_some(),
            self.password_env.is_some(),
            self.password_file.is_some(),
        ];
        if passwords.iter().filter(|set| **set).count() > 1 {
            return Err(
                "set only one of source.password, source.password_env and source.password_file"
                    .into(),
            );
        }
        Ok(())
    }

    /// Heartbeat period the server is asked for.
    pub fn heartbeat(&self) -> Duration {
        Duration::from_secs(self.heartbeat_secs.max(1))
    }
}

fn default_server_id_conflicts_max() -> u32 {
    5
}
