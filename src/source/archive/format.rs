//! A binlog file's bytes: the magic it begins with, the event header, the event types
//! whose bodies the archive reads, and what a finished file ends with.

use mysql_async::binlog::EventType;

/// The magic bytes every binlog file begins with.
pub(super) const MAGIC: &[u8; 4] = b"\xfebin";
/// A binlog event header: timestamp, type, server id, size, end position, flags.
pub(super) const HEADER_LEN: usize = 19;
/// No event is this large (a server's `max_allowed_packet` is at most 1 GiB).
pub(super) const MAX_EVENT_BYTES: u64 = 1 << 30;

pub(super) const FORMAT_DESCRIPTION: u8 = EventType::FORMAT_DESCRIPTION_EVENT as u8;
pub(super) const ROTATE: u8 = EventType::ROTATE_EVENT as u8;
pub(super) const STOP: u8 = EventType::STOP_EVENT as u8;
/// MariaDB's GTID_LIST_EVENT, which mysql_common names no type for.
pub(super) const GTID_LIST: u8 = 163;

/// Why a file that ends without ROTATE or STOP cannot be trusted to be whole.
pub(super) const UNFINISHED: &str = "it ends without the ROTATE or STOP event a finished binlog file ends with: cut short, or copied while the server still wrote it";

/// An event header's size and end position.
pub(super) fn sizes(header: &[u8; HEADER_LEN]) -> (u64, u64) {
    let word = |at: usize| {
        u64::from(u32::from_le_bytes(
            header[at..at + 4].try_into().expect("4 bytes"),
        ))
    };
    (word(9), word(13))
}
