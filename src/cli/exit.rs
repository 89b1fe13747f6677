//! Exit codes (also in docs/operating.md):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (`status`: ok) |
//! | 1 | error, printed once with its cause chain (`status`: warning) |
//! | 2 | `status`: critical |
//! | 3 | `run`: the checkpoint's binlog was purged, run `recover` or set `source.archive_dir` (`status`: unknown) |
//! | 4 | `run`: no safe position to start from (a lost store or commit marker, another server's checkpoint, no store without `--init`): an operator must set one, as the message says; restarting cannot help |
//! | 64 | usage error: unknown flag, missing argument (sysexits' EX_USAGE) |

use std::process::ExitCode;

use crate::checkpoint::CheckpointError;
use crate::pipeline::PipelineError;

/// A usage error (sysexits' EX_USAGE): not 2, which `status` uses for CRITICAL.
pub const EXIT_USAGE: u8 = 64;
/// `run`: the checkpoint's binlog file is gone from the server.
const EXIT_PURGED: u8 = 3;
/// `run`: no safe start position; an operator must set one.
const EXIT_NEEDS_OPERATOR: u8 = 4;
/// `status`: it cannot tell (Nagios UNKNOWN).
pub(super) const EXIT_UNKNOWN: u8 = 3;

/// The exit code of a failed command.
pub fn exit_code_of(e: &anyhow::Error) -> ExitCode {
    let purged = e.chain().any(|c| {
        c.downcast_ref::<PipelineError>()
            .is_some_and(PipelineError::is_purged)
    });
    let needs_operator = e.chain().any(|c| {
        c.downcast_ref::<PipelineError>()
            .is_some_and(PipelineError::needs_operator)
            || c.downcast_ref::<CheckpointError>()
                .is_some_and(|e| matches!(e, CheckpointError::Missing { .. }))
    });
    if purged {
        ExitCode::from(EXIT_PURGED)
    } else if needs_operator {
        ExitCode::from(EXIT_NEEDS_OPERATOR)
    } else {
        ExitCode::FAILURE
    }
}
