//! MariaDB binlog events that `mysql_common` does not model (types 160–163), and its
//! compressed events (165–171), turned into the events they compress.

use mysql_async::binlog::events::Event;
use mysql_async::binlog::EventType;

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
    // The count is the event's word: a damaged one must not reserve gigabytes.
    if count as usize > data.len().saturating_sub(4) / 16 {
        return None;
    }
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
        // A damaged count (2^28 - 1 GTIDs in 20 bytes) is refused before any allocation.
        let mut damaged = l.clone();
        damaged[0..4].copy_from_slice(&0x0fff_ffffu32.to_le_bytes());
        assert!(parse_gtid_list(&damaged).is_none());
    }
}

/// Bigger than any event the server may write (`max_allowed_packet` is at most 1 GiB):
/// a stated size above it is damage, not data.
const MAX_UNCOMPRESSED: u64 = 1 << 30;

/// A compressed MariaDB event — QUERY_COMPRESSED_EVENT (165), the rows events 166–168
/// (v1) and 169–171 (v2): the query text, or the rows after a rows event's column
/// bitmaps, zlib-compressed — as the uncompressed event it stands for (same header,
/// position and checksum setting), so everything after reads it like any other; `None`
/// for any other event. An error says why the event cannot be read: the reader stops,
/// as it does for any event it cannot decode.
pub fn uncompressed(event: &Event) -> Option<Result<Event, String>> {
    let raw = event.header().event_type_raw();
    let (plain, rows_v2) = plain_type(raw)?;
    Some(rewrite(event, plain, rows_v2).map_err(|e| format!("compressed event (type {raw}): {e}")))
}

/// The event type a compressed one stands for, and whether it is a v2 rows event.
fn plain_type(raw: u8) -> Option<(EventType, bool)> {
    Some(match raw {
        165 => (EventType::QUERY_EVENT, false),
        166 => (EventType::WRITE_ROWS_EVENT_V1, false),
        167 => (EventType::UPDATE_ROWS_EVENT_V1, false),
        168 => (EventType::DELETE_ROWS_EVENT_V1, false),
        169 => (EventType::WRITE_ROWS_EVENT, true),
        170 => (EventType::UPDATE_ROWS_EVENT, true),
        171 => (EventType::DELETE_ROWS_EVENT, true),
        _ => return None,
    })
}

/// The table id of a compressed rows event (166–171), from its post-header, which is
/// not compressed: a rows event of a table the router does not watch is passed over
/// without inflating it. `None` for any other event, or one too short to hold an id.
pub fn compressed_rows_table_id(event: &Event) -> Option<u64> {
    let (plain, _) = plain_type(event.header().event_type_raw())?;
    if plain == EventType::QUERY_EVENT {
        return None;
    }
    // Six bytes of table id, four in the 6-byte post-header of servers before 5.1.4.
    let post_header = event.fde().get_event_type_header_length(plain);
    let width = if post_header == 6 { 4 } else { 6 };
    let mut id = [0u8; 8];
    id[..width].copy_from_slice(event.data().get(..width)?);
    Some(u64::from_le_bytes(id))
}

fn rewrite(event: &Event, plain: EventType, rows_v2: bool) -> Result<Event, String> {
    let data = event.data();
    let fde = event.fde();
    let post_header = usize::from(fde.get_event_type_header_length(plain));
    // Where the compressed part starts: after the query's status variables, schema
    // and its NUL; after the rows event's table id, flags, extra data, column count
    // and column bitmaps.
    let start = match plain {
        EventType::QUERY_EVENT => {
            let schema_len = usize::from(*data.get(8).ok_or("short post-header")?);
            let vars_len = u16::from_le_bytes(
                data.get(11..13)
                    .ok_or("short post-header")?
                    .try_into()
                    .expect("2 bytes"),
            );
            post_header + usize::from(vars_len) + schema_len + 1
        }
        _ => {
            let mut at = post_header;
            if rows_v2 {
                let extra = u16::from_le_bytes(
                    data.get(post_header - 2..post_header)
                        .ok_or("short post-header")?
                        .try_into()
                        .expect("2 bytes"),
                );
                at += usize::from(extra).saturating_sub(2);
            }
            let (columns, width) = length_encoded(data.get(at..).ok_or("short rows header")?)
                .ok_or("short column count")?;
            let bitmaps = if plain == EventType::UPDATE_ROWS_EVENT_V1
                || plain == EventType::UPDATE_ROWS_EVENT
            {
                2
            } else {
                1
            };
            at + width + bitmaps * (columns as usize).div_ceil(8)
        }
    };
    let compressed = data
        .get(start..)
        .ok_or("event shorter than its header says")?;
    let body = decompress(compressed)?;

    let header = event.header();
    // The event was read with a checksum when its data falls short of its size by one.
    let checksum = header.event_size() as usize == 19 + data.len() + 4;
    let size = 19 + start + body.len() + if checksum { 4 } else { 0 };
    let mut raw = Vec::with_capacity(size);
    raw.extend_from_slice(&header.timestamp().to_le_bytes());
    raw.push(plain as u8);
    raw.extend_from_slice(&header.server_id().to_le_bytes());
    raw.extend_from_slice(
        &u32::try_from(size)
            .map_err(|_| "event too large")?
            .to_le_bytes(),
    );
    raw.extend_from_slice(&header.log_pos().to_le_bytes());
    raw.extend_from_slice(&header.flags_raw().to_le_bytes());
    raw.extend_from_slice(&data[..start]);
    raw.extend_from_slice(&body);
    if checksum {
        let crc = crc32fast::hash(&raw);
        raw.extend_from_slice(&crc.to_le_bytes());
    }
    Event::read(fde, &raw[..]).map_err(|e| e.to_string())
}

/// MariaDB's compressed block: a byte whose low three bits give the width of the
/// uncompressed length, that length big-endian, then zlib data. The result must have
/// exactly the stated length.
fn decompress(block: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let (&first, rest) = block.split_first().ok_or("empty compressed block")?;
    let width = usize::from(first & 0x07);
    if width == 0 || width > 4 {
        return Err(format!(
            "compressed block header {first:#04x} names no length"
        ));
    }
    let stated = rest
        .get(..width)
        .ok_or("compressed block shorter than its length")?
        .iter()
        .fold(0u64, |n, b| n << 8 | u64::from(*b));
    if stated > MAX_UNCOMPRESSED {
        return Err(format!(
            "stated uncompressed size {stated} bytes is beyond any event"
        ));
    }
    let mut out = Vec::with_capacity(stated as usize);
    // One byte more than stated, so a longer stream shows as a mismatch.
    flate2::read::ZlibDecoder::new(&rest[width..])
        .take(stated + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("zlib: {e}"))?;
    if out.len() as u64 != stated {
        return Err(format!(
            "decompressed to {} bytes, the event states {stated}",
            out.len()
        ));
    }
    Ok(out)
}

/// A length-encoded integer and its width.
fn length_encoded(b: &[u8]) -> Option<(u64, usize)> {
    let le = |n: usize| -> Option<u64> {
        Some(
            b.get(1..1 + n)?
                .iter()
                .rev()
                .fold(0u64, |v, x| v << 8 | u64::from(*x)),
        )
    };
    match *b.first()? {
        n @ 0..=250 => Some((u64::from(n), 1)),
        0xfc => Some((le(2)?, 3)),
        0xfd => Some((le(3)?, 4)),
        0xfe => Some((le(8)?, 9)),
        _ => None,
    }
}

#[cfg(test)]
mod compressed_tests {
    use super::*;
    use std::io::Write;

    /// MariaDB's block: header byte, big-endian length, zlib data.
    fn block(plain: &[u8], stated: u64) -> Vec<u8> {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(plain).unwrap();
        let mut out = vec![0x80 | 4];
        out.extend_from_slice(&(stated as u32).to_be_bytes());
        out.extend(z.finish().unwrap());
        out
    }

    #[test]
    fn blocks_decompress_to_exactly_their_stated_size() {
        let text = "INSERT INTO shop.outbox VALUES ('数据')".repeat(20);
        assert_eq!(
            decompress(&block(text.as_bytes(), text.len() as u64)).unwrap(),
            text.as_bytes()
        );
        // Longer or shorter than stated, no length, damaged data: errors, never a guess.
        for bad in [
            block(text.as_bytes(), text.len() as u64 - 1),
            block(text.as_bytes(), text.len() as u64 + 1),
            vec![0x80],
            vec![0x84, 0, 0],
            {
                let mut b = block(text.as_bytes(), text.len() as u64);
                let n = b.len();
                b[n / 2] ^= 0xff;
                b
            },
            block(b"x", MAX_UNCOMPRESSED + 1),
        ] {
            assert!(decompress(&bad).is_err(), "{bad:?}");
        }
    }

    /// Every compressed rows event of the MariaDB fixture: the table id read from the
    /// post-header is the one the inflated event holds.
    #[test]
    fn a_compressed_rows_events_table_id_is_read_without_inflating_it() {
        use mysql_common::binlog::events::EventData;
        let bytes = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/mariadb-compressed/mysql-bin.000014"),
        )
        .unwrap();
        let mut decoder = mysql_common::binlog::EventStreamReader::new(
            mysql_common::binlog::consts::BinlogVersion::Version4,
        );
        let (mut at, mut checked) = (4, 0);
        while at < bytes.len() {
            let size = u32::from_le_bytes(bytes[at + 9..at + 13].try_into().unwrap()) as usize;
            let event = decoder.read(&bytes[at..at + size]).unwrap().unwrap();
            at += size;
            let Some(id) = compressed_rows_table_id(&event) else {
                continue;
            };
            let plain = uncompressed(&event).unwrap().unwrap();
            let Some(EventData::RowsEvent(rows)) = plain.read_data().unwrap() else {
                panic!("not a rows event");
            };
            assert_eq!(id, rows.table_id());
            checked += 1;
        }
        assert!(checked >= 3, "{checked} compressed rows events");
    }

    #[test]
    fn length_encoded_integers() {
        assert_eq!(length_encoded(&[7]), Some((7, 1)));
        assert_eq!(length_encoded(&[0xfc, 0x34, 0x12]), Some((0x1234, 3)));
        assert_eq!(length_encoded(&[0xfd, 1, 2, 3]), Some((0x030201, 4)));
        assert_eq!(length_encoded(&[0xfc, 1]), None);
        assert_eq!(length_encoded(&[0xff]), None);
    }
}
