//! `[ops]`: the operator commands beside the flow — who `prune` connects as, where the
//! audit trail of replays goes, the header a replayed record carries.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::secret::{Secret, SecretError};

/// Operator command settings.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpsConfig {
    /// User `prune` connects as (SELECT and DELETE on the outbox tables, INSERT on an
    /// archive table): the streaming user stays read-only. `prune` refuses to run without it.
    pub user: Option<String>,
    /// That user's password: `"${env:NAME}"` or `"${file:PATH}"`, read when `prune`
    /// connects.
    pub password: Option<Secret>,
    /// Shorthand for `password = "${env:NAME}"`.
    pub password_env: Option<String>,
    /// Shorthand for `password = "${file:PATH}"`.
    pub password_file: Option<PathBuf>,
    /// JSON-lines file every replay and republish appends its audit record to
    /// [default: `audit.jsonl` in checkpoint.dir].
    pub audit_file: Option<PathBuf>,
    /// Topic that also receives every audit record, when set.
    pub audit_topic: Option<String>,
    /// Header a replayed record carries (the replay's id), so consumers can tell a
    /// replay from the first delivery.
    #[serde(default = "default_replay_header")]
    pub replay_header: String,
}

fn default_replay_header() -> String {
    "replay".into()
}

impl Default for OpsConfig {
    fn default() -> Self {
        Self {
            user: None,
            password: None,
            password_env: None,
            password_file: None,
            audit_file: None,
            audit_topic: None,
            replay_header: default_replay_header(),
        }
    }
}

impl OpsConfig {
    /// `ops.user`'s password, from the configured env variable or file.
    pub fn password(&self) -> Result<Option<Secret>, SecretError> {
        crate::secret::resolve_password(
            self.password.as_ref(),
            self.password_env.as_deref(),
            self.password_file.as_deref(),
            "ops.password",
        )
    }

    /// The audit file: `audit_file`, else `audit.jsonl` in the checkpoint directory.
    pub fn audit_file(&self, checkpoint_dir: &Path) -> PathBuf {
        self.audit_file
            .clone()
            .unwrap_or_else(|| checkpoint_dir.join("audit.jsonl"))
    }
}
