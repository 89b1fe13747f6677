//! The measuring half of `status`: the server's position, retention and settings
//! against a checkpoint, read over the source connection.

use mysql_async::Conn;

use super::{RouterState, Status, Verdict};
use crate::checkpoint::Checkpoint;
use crate::monitor::retention::{self, Runway};
use crate::position::Position;
use crate::source::server::{self, Flavor};
use crate::source::SourceError;

/// Measures the server against a checkpoint (not yet judged: call `judge`). `reader`:
/// where the running router has read and acknowledged everything up to, when it holds
/// nothing undelivered — caught up there is caught up, whatever the checkpoint says.
pub async fn observe(
    conn: &mut Conn,
    checkpoint: Option<&Checkpoint>,
    running: bool,
    reader: Option<&Position>,
) -> Result<Status, SourceError> {
    let flavor: Flavor = server::flavor(conn).await?;
    let current = server::current_position(conn, flavor).await?;
    let files = server::binary_logs(conn).await?;
    let retention = retention::retention(conn).await?;
    let retention_secs = retention.kept.secs();
    let size_limit_bytes = retention::size_limit(conn).await?;
    // The server's clock: commit times and file times are in it.
    let now = server::now_ms(conn).await?;
    let mut status = Status {
        router: if running {
            RouterState::Running
        } else {
            RouterState::Stopped
        },
        starting_secs: None,
        checkpoint: checkpoint.map(|c| c.position.to_string()),
        checkpoint_commit_time_ms: checkpoint.map(|c| c.commit_time_ms),
        checkpoint_age_secs: checkpoint.map(|c| (now - c.written_at_ms) / 1000),
        server_position: current.to_string(),
        bytes_behind: None,
        lag_ms: None,
        retention_secs,
        retention_unknown: retention.kept == retention::Kept::Unknown,
        retention_setting: retention.setting.to_string(),
        retention_problem: retention.problem,
        runway_secs: None,
        runway_unknown: false,
        size_limit_bytes,
        size_headroom_bytes: None,
        purged: false,
        server_settings: server::settings_problems(conn)
            .await?
            .into_iter()
            .map(|p| format!("{}: {}", p.what, p.fix))
            .collect(),
        verdict: Verdict::Ok,
        reasons: Vec::new(),
        budget: None,
        live: None,
    };
    if let Some(cp) = checkpoint {
        status.size_headroom_bytes =
            size_limit_bytes.and_then(|l| retention::size_headroom(&cp.position, &files, l));
        status.bytes_behind = retention::bytes_behind(&cp.position, &files, &current);
        // With GTIDs, "nothing committed since the checkpoint" is exact; bytes alone also
        // count rotation and heartbeat bytes that hold no transaction.
        let at_server = |p: &Position| {
            if !p.gtid.is_empty() && !current.gtid.is_empty() {
                p.gtid == current.gtid
            } else {
                retention::bytes_behind(p, &files, &current) == Some(0)
            }
        };
        let caught_up = at_server(&cp.position) || reader.is_some_and(at_server);
        status.lag_ms = match caught_up {
            true => Some(0),
            false if cp.commit_time_ms > 0 => Some(now - cp.commit_time_ms),
            false => None,
        };
        match retention::runway(
            &cp.position,
            cp.commit_time_ms,
            &files,
            &current.file,
            retention.kept,
            now,
        ) {
            Runway::Purged => status.purged = true,
            Runway::Unbounded => {}
            Runway::Unknown => status.runway_unknown = true,
            Runway::Seconds(s) => status.runway_secs = Some(s),
        }
    }
    Ok(status)
}
