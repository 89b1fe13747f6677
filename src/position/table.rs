//! Table names, as every stage refers to outbox tables.

use std::fmt;

/// A `database.table` name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableName {
    /// Database (schema) name.
    pub database: String,
    /// Table name.
    pub table: String,
}

impl TableName {
    /// Parses `database.table`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.split_once('.') {
            Some((d, t)) if !d.is_empty() && !t.is_empty() && !t.contains('.') => Ok(Self {
                database: d.to_string(),
                table: t.to_string(),
            }),
            _ => Err(format!(
                "{s:?} is not a table name of the form database.table"
            )),
        }
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.database, self.table)
    }
}
