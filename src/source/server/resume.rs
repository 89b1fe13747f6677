//! Where reading may resume on this server: by GTID or by file position, and whether an
//! operator's move of the checkpoint would pass prepared XA branches.

use mysql_async::Conn;

use super::Flavor;
use crate::source::{Position, ResumeBy, SourceConfig, SourceError};

/// Resume by GTID or by file position (`source.resume_by`); by position, the file must
/// still be on the server.
pub async fn resume_by_gtid(
    config: &SourceConfig,
    conn: &mut Conn,
    flavor: Flavor,
    start: &Position,
) -> Result<bool, SourceError> {
    let by_gtid = match config.resume_by {
        ResumeBy::Position => false,
        ResumeBy::Auto => {
            !start.gtid.is_empty() && {
                // A MariaDB domain the checkpoint never saw would be replayed from the
                // server's oldest binlog: only resume by GTID when every domain is covered.
                let server_gtid = super::current_position(conn, flavor).await?.gtid;
                start.gtid.covers_domains_of(&server_gtid)
            }
        }
        ResumeBy::Gtid if start.gtid.is_empty() => {
            return Err(SourceError::NoGtidToResumeBy {
                checkpoint: start.to_string(),
            })
        }
        ResumeBy::Gtid => true,
    };
    if !by_gtid {
        // By GTID the server itself says (error 1236) when the history is gone; file
        // names only mean something on the server that wrote them.
        super::ensure_available(conn, start).await?;
    }
    Ok(by_gtid)
}

/// Refuses an operator's move of the checkpoint (`command`) while XA branches are
/// prepared on the server, unless `ignore`: their rows lie before any position taken
/// now. With `ignore` the branches are named in the log, and the router stops at each
/// one's `XA COMMIT` instead of claiming it was delivered.
pub async fn refuse_move_past_prepared_xa(
    conn: &mut Conn,
    command: &'static str,
    ignore: bool,
) -> Result<(), SourceError> {
    let xids: Vec<String> = super::prepared_xa(conn)
        .await?
        .iter()
        .map(ToString::to_string)
        .collect();
    match (xids.is_empty(), ignore) {
        (true, _) => Ok(()),
        (false, false) => Err(SourceError::PreparedXaBlocksMove { command, xids }),
        (false, true) => {
            tracing::warn!(command, xids = %xids.join(" "), "moving the checkpoint past prepared XA branches (--ignore-prepared-xa): the router will stop at each one's XA COMMIT");
            Ok(())
        }
    }
}
