//! Where in a server's binlog history: file positions, GTID states (MariaDB domains,
//! MySQL GTID sets) and table names. Every stage speaks these; none of them owns them,
//! so the checkpoint, the monitor and the router need not import the source.

mod binlog;
mod mysql_gtid;
mod table;

pub use binlog::{BinlogFile, GtidState, MariaGtid, MariaGtidState, Position, PositionError};
pub use mysql_gtid::MySqlGtidSet;
pub use table::TableName;
