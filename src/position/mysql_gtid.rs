//! MySQL GTID sets (`3e11fa47-…:1-5:7,…`, with 8.4 tags `uuid:tag:1-3`): the form of
//! `@@gtid_executed`. A checkpoint keeps the whole set, because MySQL resumes by GTID
//! (`COM_BINLOG_DUMP_GTID`) from the set of everything the replica has, not from a last
//! GTID per domain as MariaDB does.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use mysql_async::binlog::events::GtidEvent;
use mysql_async::{GnoInterval, Sid};
use mysql_common::packets::Tag;
use uuid::Uuid;

use super::PositionError;

/// Where MySQL transactions come from: the originating server's UUID and, since 8.4, an
/// optional tag.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Source {
    uuid: Uuid,
    tag: Option<Tag<'static>>,
}

/// A set of MySQL GTIDs, kept as sorted, disjoint, non-adjacent `[start, end)` intervals
/// of transaction numbers per source.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MySqlGtidSet(BTreeMap<Source, Vec<(u64, u64)>>);

impl MySqlGtidSet {
    /// True when the set holds no transaction.
    pub fn is_empty(&self) -> bool {
        self.0.values().all(Vec::is_empty)
    }

    /// Adds the transaction of a GTID event (`GTID_EVENT` or `GTID_TAGGED_LOG_EVENT`).
    pub fn apply(&mut self, event: &GtidEvent) {
        let source = Source {
            uuid: Uuid::from_bytes(event.sid()),
            tag: event.tag().cloned(),
        };
        self.add(source, event.gno());
    }

    fn add(&mut self, source: Source, gno: u64) {
        let intervals = self.0.entry(source).or_default();
        add_number(intervals, gno);
    }

    /// True when transaction `gno` of server `uuid` (untagged) is in the set.
    pub fn contains(&self, uuid: Uuid, gno: u64) -> bool {
        self.0
            .get(&Source { uuid, tag: None })
            .is_some_and(|iv| iv.iter().any(|&(s, e)| (s..e).contains(&gno)))
    }

    /// True when every transaction of `other` is in this set.
    pub fn contains_set(&self, other: &MySqlGtidSet) -> bool {
        other.0.iter().all(|(source, theirs)| {
            let mine = self.0.get(source).map(Vec::as_slice).unwrap_or_default();
            // Intervals are disjoint and non-adjacent: each of theirs lies in one of mine.
            theirs
                .iter()
                .all(|&(s, e)| mine.iter().any(|&(ms, me)| ms <= s && e <= me))
        })
    }

    /// The set in the form `COM_BINLOG_DUMP_GTID` carries.
    pub fn to_sids(&self) -> Vec<Sid<'static>> {
        self.0
            .iter()
            .filter(|(_, iv)| !iv.is_empty())
            .map(|(source, iv)| {
                let sid = Sid::new(*source.uuid.as_bytes())
                    .with_intervals(iv.iter().map(|&(s, e)| GnoInterval::new(s, e)).collect());
                match &source.tag {
                    Some(tag) => sid.with_tag(tag.clone()),
                    None => sid,
                }
            })
            .collect()
    }
}

/// Inserts `n` into sorted, disjoint, non-adjacent `[start, end)` intervals.
fn add_number(intervals: &mut Vec<(u64, u64)>, n: u64) {
    // First interval that ends at or after n (could contain n or touch it from above).
    let i = intervals.partition_point(|&(_, end)| end < n);
    match intervals.get(i).copied() {
        Some((start, end)) if start <= n && n < end => {}
        Some((_, end)) if end == n => {
            intervals[i].1 = n + 1;
            // Filling the gap may join the next interval.
            if intervals.get(i + 1).is_some_and(|&(s, _)| s == n + 1) {
                intervals[i].1 = intervals[i + 1].1;
                intervals.remove(i + 1);
            }
        }
        Some((start, _)) if start == n + 1 => intervals[i].0 = n,
        _ => intervals.insert(i, (n, n + 1)),
    }
}

/// Adds `[start, end)` to sorted, disjoint, non-adjacent intervals, merging as needed.
fn add_range(intervals: &mut Vec<(u64, u64)>, start: u64, end: u64) {
    intervals.push((start, end));
    intervals.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(intervals.len());
    for &(s, e) in intervals.iter() {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    *intervals = merged;
}

impl fmt::Display for MySqlGtidSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut last_uuid = None;
        for (source, intervals) in self.0.iter().filter(|(_, iv)| !iv.is_empty()) {
            if last_uuid != Some(source.uuid) {
                if last_uuid.is_some() {
                    f.write_str(",")?;
                }
                write!(f, "{}", source.uuid.as_hyphenated())?;
                last_uuid = Some(source.uuid);
            }
            if let Some(tag) = &source.tag {
                write!(f, ":{tag}")?;
            }
            for &(start, end) in intervals {
                if end == start + 1 {
                    write!(f, ":{start}")?;
                } else {
                    write!(f, ":{start}-{}", end - 1)?;
                }
            }
        }
        Ok(())
    }
}

impl FromStr for MySqlGtidSet {
    type Err = PositionError;

    /// Parses `@@gtid_executed` text: entries separated by commas (and the newlines MySQL
    /// puts after them), each `uuid`, then intervals, and `:tag` switching the tag.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || PositionError::BadGtidSet(s.to_string());
        let mut set = MySqlGtidSet::default();
        for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let mut parts = entry.split(':');
            let uuid = Uuid::parse_str(parts.next().ok_or_else(bad)?).map_err(|_| bad())?;
            let mut source = Source { uuid, tag: None };
            let mut any_interval = false;
            for part in parts {
                if part.starts_with(|c: char| c.is_ascii_digit()) {
                    let (start, last) = match part.split_once('-') {
                        Some((a, b)) => (a.parse::<u64>(), b.parse::<u64>()),
                        None => (part.parse(), part.parse()),
                    };
                    let (start, last) = (start.map_err(|_| bad())?, last.map_err(|_| bad())?);
                    if start == 0 || last < start {
                        return Err(bad());
                    }
                    add_range(set.0.entry(source.clone()).or_default(), start, last + 1);
                    any_interval = true;
                } else {
                    source.tag = Some(Tag::new(part.to_string()).map_err(|_| bad())?);
                }
            }
            if !any_interval {
                return Err(bad());
            }
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
    const B: &str = "9b1c8a50-2a11-11ef-8a3c-0242ac120002";

    fn event(uuid: &str, gno: u64) -> GtidEvent {
        GtidEvent::new(*Uuid::parse_str(uuid).unwrap().as_bytes(), gno)
    }

    #[test]
    fn parses_gtid_executed_as_mysql_prints_it() {
        let text = format!("{A}:1-5:7,\n{B}:1-3:tag_a:1-2:9");
        let set: MySqlGtidSet = text.parse().unwrap();
        assert_eq!(set.to_string(), format!("{A}:1-5:7,{B}:1-3:tag_a:1-2:9"));
        assert!(set.contains(Uuid::parse_str(A).unwrap(), 5));
        assert!(!set.contains(Uuid::parse_str(A).unwrap(), 6));
        assert_eq!("".parse::<MySqlGtidSet>().unwrap(), MySqlGtidSet::default());
    }

    #[test]
    fn overlapping_and_touching_intervals_merge() {
        let set: MySqlGtidSet = format!("{A}:5-9:1-3:4:20-21:8-12").parse().unwrap();
        assert_eq!(set.to_string(), format!("{A}:1-12:20-21"));
    }

    #[test]
    fn rejects_what_is_not_a_gtid_set() {
        for text in [
            "0-1-42".to_string(),
            A.to_string(),
            format!("{A}:0-3"),
            format!("{A}:5-3"),
            format!("{A}:Bad-Tag:1"),
            "not-a-uuid:1-3".to_string(),
        ] {
            assert!(text.parse::<MySqlGtidSet>().is_err(), "{text}");
        }
    }

    #[test]
    fn transactions_extend_fill_gaps_and_start_new_intervals() {
        let mut set: MySqlGtidSet = format!("{A}:1-5:7-9").parse().unwrap();
        set.apply(&event(A, 6));
        assert_eq!(set.to_string(), format!("{A}:1-9"));
        set.apply(&event(A, 10));
        set.apply(&event(A, 3));
        set.apply(&event(A, 12));
        set.apply(&event(B, 1));
        assert_eq!(set.to_string(), format!("{A}:1-10:12,{B}:1"));
        let tagged = GtidEvent::new_tagged(
            *Uuid::parse_str(B).unwrap().as_bytes(),
            Tag::new("orders").unwrap(),
            4,
        );
        set.apply(&tagged);
        assert_eq!(set.to_string(), format!("{A}:1-10:12,{B}:1:orders:4"));
    }

    #[test]
    fn any_arrival_order_gives_the_same_intervals_as_a_plain_set() {
        // Replicas of several sources interleave, and a set may start with holes.
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut intervals = Vec::new();
        let mut plain = std::collections::BTreeSet::new();
        for _ in 0..5_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = 1 + x % 700;
            add_number(&mut intervals, n);
            plain.insert(n);
        }
        let expanded: Vec<u64> = intervals.iter().flat_map(|&(s, e)| s..e).collect();
        assert_eq!(expanded, plain.into_iter().collect::<Vec<_>>());
        assert!(
            intervals.windows(2).all(|w| w[0].1 < w[1].0),
            "{intervals:?}"
        );
    }

    #[test]
    fn becomes_the_sids_of_a_dump_request() {
        let set: MySqlGtidSet = format!("{A}:1-5:7,{B}:t:2").parse().unwrap();
        let sids = set.to_sids();
        assert_eq!(sids.len(), 2);
        assert_eq!(sids[0].to_string(), format!("{A}:1-5:7"));
        let intervals: Vec<_> = sids[0]
            .intervals()
            .iter()
            .map(|i| (i.start(), i.end()))
            .collect();
        assert_eq!(intervals, [(1, 6), (7, 8)]);
        assert_eq!(sids[1].to_string(), format!("{B}:t:2"));
    }
}
