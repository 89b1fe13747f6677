//! MariaDB binlog events that `mysql_common` does not model (types 160–163).

use super::MariaGtid;

/// ANNOTATE_ROWS_EVENT: the SQL text of the following rows events.
pub const ANNOTATE_ROWS_EVENT: u8 = 160;
/// BINLOG_CHECKPOINT_EVENT: crash-recovery bookkeeping.
pub const BINLOG_CHECKPOINT_EVENT: u8 = 161;
/// GTID_EVENT: starts a transaction (replaces `BEGIN` for capable replicas).
pub const GTID_EVENT: u8 = 162;
/// GTID_LIST_EVENT: the GTID state at the start of a binlog file.
pub const GTID_LIST_EVENT: u8 = 163;

/// The transaction is a single statement with no closing XID/COMMIT (DDL).
const FL_STANDALONE: u8 = 1;
/// The group is a prepared XA branch (its rows wait for `XA COMMIT`).
const FL_PREPARED_XA: u8 = 64;
/// XA_PREPARE_LOG_EVENT (MySQL and MariaDB): ends the group of a prepared XA branch.
pub const XA_PREPARE_LOG_EVENT: u8 = 38;

/// A decoded MariaDB GTID event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GtidEvent {
    /// The transaction's GTID.
    pub gtid: MariaGtid,
    /// True for a standalone (DDL) transaction: its one query event ends it.
    pub standalone: bool,
    /// True for the group of a prepared XA branch.
    pub prepared_xa: bool,
}

/// Decodes a GTID event body: seq u64 LE, domain u32 LE, flags u8.
pub fn parse_gtid(data: &[u8], server_id: u32) -> Option<GtidEvent> {
    let seq = u64::from_le_bytes(data.get(0..8)?.try_into().ok()?);
    let domain = u32::from_le_bytes(data.get(8..12)?.try_into().ok()?);
    let flags = *data.get(12)?;
    Some(GtidEvent {
        gtid: MariaGtid {
            domain,
            server_id,
            seq,
        },
        standalone: flags & FL_STANDALONE != 0,
        prepared_xa: flags & FL_PREPARED_XA != 0,
    })
}

/// Decodes a GTID list event body: count u32 LE (low 28 bits), then per GTID
/// domain u32, server u32, seq u64, all LE.
pub fn parse_gtid_list(data: &[u8]) -> Option<Vec<MariaGtid>> {
    let count = u32::from_le_bytes(data.get(0..4)?.try_into().ok()?) & 0x0fff_ffff;
    let mut out = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        let at = 4 + i * 16;
        let rec = data.get(at..at + 16)?;
        out.push(MariaGtid {
            domain: u32::from_le_bytes(rec[0..4].try_into().ok()?),
            server_id: u32::from_le_bytes(rec[4..8].try_into().ok()?),
            seq: u64::from_le_bytes(rec[8..16].try_into().ok()?),
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_gtid_and_list() {
        let mut d = 42u64.to_le_bytes().to_vec();
        d.extend(3u32.to_le_bytes());
        d.push(FL_STANDALONE);
        let g = parse_gtid(&d, 9).unwrap();
        assert_eq!(g.gtid.to_string(), "3-9-42");
        assert!(g.standalone);

        let mut l = 1u32.to_le_bytes().to_vec();
        l.extend(0u32.to_le_bytes());
        l.extend(1u32.to_le_bytes());
        l.extend(77u64.to_le_bytes());
        assert_eq!(parse_gtid_list(&l).unwrap()[0].to_string(), "0-1-77");
        assert!(parse_gtid_list(&l[..10]).is_none());
    }
}
