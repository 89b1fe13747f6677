//! Features that read the outbox in one consistent snapshot at that snapshot's exact
//! binlog position: only MariaDB reports that position (`binlog_snapshot_file` /
//! `binlog_snapshot_position` inside `START TRANSACTION WITH CONSISTENT SNAPSHOT`), so
//! on MySQL each refuses before it does anything, with one sentence.

use mysql_async::Conn;

use super::{flavor, Flavor};
use crate::source::SourceError;

/// A feature that needs MariaDB's snapshot position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotFeature {
    Prune,
    Reconcile,
    InitialSnapshot,
    WatermarkHandover,
}

impl SnapshotFeature {
    /// How the user names it.
    pub fn name(self) -> &'static str {
        match self {
            SnapshotFeature::Prune => "`prune`",
            SnapshotFeature::Reconcile => "`reconcile`",
            SnapshotFeature::InitialSnapshot => "source.snapshot = \"initial\"",
            SnapshotFeature::WatermarkHandover => {
                "source.snapshot = { watermark = … } (the polling-relay handover)"
            }
        }
    }

    /// What to do on MySQL instead.
    pub fn instead(self) -> &'static str {
        match self {
            SnapshotFeature::Prune => "delete delivered rows with your own job, keeping every row younger than the router's checkpoint commit time (`checkpoint show`) minus a margin",
            SnapshotFeature::Reconcile => "compare a window by event id yourself (the topic's `id` headers against the table), and `replay --ids` what is missing",
            SnapshotFeature::InitialSnapshot => "use snapshot = \"never\" and `recover --since` for the rows already there",
            SnapshotFeature::WatermarkHandover => "stop the relay, start the router with snapshot = \"never\", and `replay` the rows past the relay's watermark",
        }
    }
}

/// The sentence every MariaDB-only feature refuses with on MySQL (the README's server
/// table says the same).
pub const MARIADB_ONLY: &str = "works on MariaDB only: it reads the outbox in one consistent snapshot at that snapshot's exact binlog position, which MariaDB reports (binlog_snapshot_file / binlog_snapshot_position) and MySQL does not";

/// Refuses `feature` unless the server is MariaDB.
pub async fn require_mariadb(conn: &mut Conn, feature: SnapshotFeature) -> Result<(), SourceError> {
    refuse_on(flavor(conn).await?, feature)
}

fn refuse_on(flavor: Flavor, feature: SnapshotFeature) -> Result<(), SourceError> {
    match flavor {
        Flavor::MariaDb => Ok(()),
        Flavor::MySql => Err(SourceError::MariaDbOnly {
            feature: feature.name(),
            instead: feature.instead(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_feature_refuses_on_mysql_with_the_sentence() {
        for feature in [
            SnapshotFeature::Prune,
            SnapshotFeature::Reconcile,
            SnapshotFeature::InitialSnapshot,
            SnapshotFeature::WatermarkHandover,
        ] {
            assert!(refuse_on(Flavor::MariaDb, feature).is_ok());
            let e = refuse_on(Flavor::MySql, feature).unwrap_err().to_string();
            assert!(
                e.starts_with(feature.name())
                    && e.contains(MARIADB_ONLY)
                    && e.contains(feature.instead()),
                "{e}"
            );
        }
    }

    #[test]
    fn the_readme_says_it_too() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
        assert!(
            readme.replace('\n', " ").contains(MARIADB_ONLY),
            "README.md lacks: {MARIADB_ONLY}"
        );
    }
}
