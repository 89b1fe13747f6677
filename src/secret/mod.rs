//! Values that must never be printed, and where they are read from.

mod reference;

use std::fmt;

pub use reference::{inline_secrets, is_secret_key, resolve_password, resolve_references};

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
