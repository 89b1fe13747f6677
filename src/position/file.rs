//! Binlog file names: a base name and a numeric suffix that orders them.

use std::cmp::Ordering;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::PositionError;

/// A binlog file name such as `mysql-bin.000003`: a base name and a numeric suffix.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BinlogFile {
    name: String,
    /// Numeric suffix; files of the same base name are ordered by it.
    index: u64,
}

impl BinlogFile {
    /// Validates and wraps a file name as the server reports it.
    pub fn new(name: impl Into<String>) -> Result<Self, PositionError> {
        let name = name.into();
        let bad = || PositionError::BadFile(name.clone());
        if name.is_empty()
            || name.len() > 255
            || name
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == ':')
        {
            return Err(bad());
        }
        let (_, suffix) = name.rsplit_once('.').ok_or_else(bad)?;
        let index = suffix.parse::<u64>().map_err(|_| bad())?;
        Ok(Self { name, index })
    }

    /// The file name, e.g. `mysql-bin.000003`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The base name without the numeric suffix, e.g. `mysql-bin`.
    pub fn base(&self) -> &str {
        self.name
            .rsplit_once('.')
            .map(|(b, _)| b)
            .unwrap_or(&self.name)
    }

    /// The numeric suffix, e.g. 3 for `mysql-bin.000003`.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The file of the same base name with suffix `index`, zero-padded as this one is
    /// (`mysql-bin.000003` → `mysql-bin.000005`).
    pub fn with_index(&self, index: u64) -> BinlogFile {
        let width = self.name.len() - self.base().len() - 1;
        Self {
            name: format!("{}.{index:0width$}", self.base()),
            index,
        }
    }
}

impl PartialOrd for BinlogFile {
    /// Files of different base names do not compare: that is an error, not a guess.
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        (self.base() == other.base()).then(|| self.index.cmp(&other.index))
    }
}

impl fmt::Display for BinlogFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl TryFrom<String> for BinlogFile {
    type Error = PositionError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<BinlogFile> for String {
    fn from(f: BinlogFile) -> Self {
        f.name
    }
}
