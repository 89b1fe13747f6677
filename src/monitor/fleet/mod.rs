//! The fleet's view of itself, for the console: every instance reports the sources it
//! runs to one status topic (`monitor.status_topic`) and reads everyone's reports from
//! it, so any instance shows the whole fleet — which instance leads each source, in
//! which state, and its figures over the last day — without reaching the others.
//!
//! `report`: one source on one instance; `publish`: sending this instance's;
//! `board`: what the topic holds, read and tailed; `history`: a source's last day.

mod board;
mod history;
mod publish;
mod report;

pub use board::{Board, FleetSource, Member};
pub use history::{Columns, CAPACITY as HISTORY_CAPACITY, RESOLUTION_SECS, WINDOW_SECS};
pub use publish::publish;
pub use report::{Reporter, SourceReport, SourceState};
