//! Where in a server's binlog history: file positions, GTID states (MariaDB domains,
//! MySQL GTID sets) and table names. Every stage speaks these; none of them owns them,
//! so the checkpoint, the monitor and the router need not import the source.

mod binlog;
mod error;
mod file;
mod gtid;
mod mysql_gtid;
mod table;

pub use binlog::Position;
pub use error::PositionError;
pub use file::BinlogFile;
pub use gtid::{GtidState, MariaGtid, MariaGtidState};
pub use mysql_gtid::MySqlGtidSet;
pub use table::TableName;
