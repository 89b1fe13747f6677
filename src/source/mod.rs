//! Source stage: connect to the server as a replica, stream the binlog, and cut it into
//! committed transactions that each carry the position just past their last event.

mod boundary;
mod connect;
mod mariadb;
mod mysql_gtid;
mod position;
mod reader;
mod row;
pub mod server;
pub mod snapshot;
mod transaction;

pub use boundary::{
    classify, statement_tables, Boundaries, Event as BoundaryEvent, Statement, Step, Xid,
};
pub use connect::{connect, SourceError};
pub use position::{
    BinlogFile, GtidState, MariaGtid, MariaGtidState, MySqlGtidSet, Position, PositionError,
};
pub use reader::BinlogReader;
pub use row::{RowImage, Rows, TableLayout};
pub use transaction::{RowChange, RowOp, TableName, Transaction};
