//! Values that must never be printed, and where they are read from.

mod reference;

use std::fmt;
use std::path::Path;

pub use reference::{inline_secrets, is_secret_key, resolve_references};

/// A value that must never be printed: `Debug` shows `***`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    /// The secret itself, for handing to a client library only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// A secret that was configured but could not be read (the message never holds it).
#[derive(Debug, thiserror::Error)]
#[error("secret: {0}")]
pub struct SecretError(String);

impl SecretError {
    fn new(message: String) -> Self {
        Self(message)
    }
}

/// A database password, written one way of three: `password = "${env:NAME}"` or
/// `"${file:PATH}"` (the form every secret of the file takes), or the shorthands
/// `password_env = "NAME"` / `password_file = "PATH"` for the same references. Resolved
/// here, when a command connects, not when the file is loaded: commands that only read
/// local state (`health`, `checkpoint show`) run without it. `None` when none is set.
pub fn resolve_password(
    password: Option<&Secret>,
    env: Option<&str>,
    file: Option<&Path>,
    key: &str,
) -> Result<Option<Secret>, SecretError> {
    let reference = match (password, env, file) {
        (Some(text), None, None) => text.expose().to_string(),
        (None, Some(var), None) => format!("${{env:{var}}}"),
        (None, None, Some(path)) => format!("${{file:{}}}", path.display()),
        (None, None, None) => return Ok(None),
        _ => {
            return Err(SecretError(format!(
                "set only one of {key}, {key}_env and {key}_file"
            )))
        }
    };
    reference::expand(&reference, key).map(|p| Some(Secret::new(p)))
}

/// The config keys `resolve_references` leaves for `resolve_password`.
pub const RESOLVED_ON_CONNECT: [&str; 2] = ["source.password", "ops.password"];
