//! Source stage: connect to the server as a replica, stream the binlog, and cut it into
//! committed transactions that each carry the position just past their last event.

mod archive;
mod boundary;
mod config;
mod connect;
mod error;
#[doc(hidden)]
pub mod fuzzing;
mod mariadb;
mod payload;
mod reader;
mod row;
pub mod server;
pub mod snapshot;
mod start;
mod statement;
mod transaction;

pub use archive::Archive;
pub use boundary::{Boundaries, Event as BoundaryEvent, Step};
pub use config::{ResumeBy, SnapshotMode, SourceConfig, StartFrom, TlsMode};
pub use connect::{connect, connect_as};
pub use error::{Missing, SourceError};
// The source's own vocabulary, for its modules (`super::Position`); other stages import
// `crate::position`.
use crate::position::{BinlogFile, GtidState, MariaGtid, Position, TableName};
pub use reader::{BinlogReader, Read};
pub use row::{RowImage, Rows, TableLayout};
pub use start::{open_stream, ResumeAt, Stream};
pub use statement::{classify, statement_tables, Statement, Xid};
pub use transaction::{RowChange, RowOp, Transaction};
