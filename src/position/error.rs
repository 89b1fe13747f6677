//! What is wrong with a position, file name or GTID text.

/// Why a position, file name or GTID text could not be parsed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PositionError {
    #[error("binlog file name {0:?} is not valid (expected something like mysql-bin.000003)")]
    BadFile(String),
    #[error("{0:?} is not a binlog position (expected FILE:OFFSET, e.g. mysql-bin.000003:154)")]
    BadPosition(String),
    #[error("binlog offset {0} is below 4, the first event of every binlog file")]
    OffsetTooSmall(u64),
    #[error("{0:?} is not a MariaDB GTID (expected DOMAIN-SERVER-SEQ, e.g. 0-1-42)")]
    BadGtid(String),
    #[error("{0:?} is not a MySQL GTID set (expected UUID:INTERVALS,…, e.g. 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5)")]
    BadGtidSet(String),
}
