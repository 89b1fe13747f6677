//! Where a reader is in the binlog: file + offset at a transaction boundary, plus the
//! GTID state at that point, so a restart (or, later, a failover) resumes exactly there.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use mysql_async::binlog::events::GtidEvent;
use serde::{Deserialize, Serialize};

use super::MySqlGtidSet;

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

/// A binlog file name such as `mysql-bin.000003`: a base name and a numeric suffix.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct BinlogFile {
    name: String,
    /// Numeric suffix; files of the same base name are ordered by it.
    index: u64,
}

impl BinlogFile {
    /// Validates and wraps a file name as the server reports it.
    pub fn new(name: impl Into<String>) -> Result<Self, PositionError> {
        let name = name.into();
        let bad = || PositionError::BadFile(name.clone());
        if name.is_empty()
            || name.len() > 255
            || name
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == ':')
        {
            return Err(bad());
        }
        let (_, suffix) = name.rsplit_once('.').ok_or_else(bad)?;
        let index = suffix.parse::<u64>().map_err(|_| bad())?;
        Ok(Self { name, index })
    }

    /// The file name, e.g. `mysql-bin.000003`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The base name without the numeric suffix, e.g. `mysql-bin`.
    pub fn base(&self) -> &str {
        self.name
            .rsplit_once('.')
            .map(|(b, _)| b)
            .unwrap_or(&self.name)
    }

    /// The numeric suffix, e.g. 3 for `mysql-bin.000003`.
    pub fn index(&self) -> u64 {
        self.index
    }
}

impl PartialOrd for BinlogFile {
    /// Files of different base names do not compare: that is an error, not a guess.
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        (self.base() == other.base()).then(|| self.index.cmp(&other.index))
    }
}

impl fmt::Display for BinlogFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl TryFrom<String> for BinlogFile {
    type Error = PositionError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<BinlogFile> for String {
    fn from(f: BinlogFile) -> Self {
        f.name
    }
}

/// One MariaDB GTID: replication domain, originating server and sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MariaGtid {
    /// Replication domain id.
    pub domain: u32,
    /// Server that originally committed the transaction.
    pub server_id: u32,
    /// Sequence number within the domain.
    pub seq: u64,
}

impl fmt::Display for MariaGtid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}-{}", self.domain, self.server_id, self.seq)
    }
}

impl FromStr for MariaGtid {
    type Err = PositionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || PositionError::BadGtid(s.to_string());
        let mut parts = s.trim().splitn(3, '-');
        let mut next = || parts.next().ok_or_else(bad);
        let domain = next()?.parse().map_err(|_| bad())?;
        let server_id = next()?.parse().map_err(|_| bad())?;
        let seq = next()?.parse().map_err(|_| bad())?;
        Ok(Self {
            domain,
            server_id,
            seq,
        })
    }
}

/// MariaDB GTID state: the last GTID seen in each replication domain
/// (the format of `@@gtid_binlog_pos` and `@slave_connect_state`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MariaGtidState(BTreeMap<u32, MariaGtid>);

impl MariaGtidState {
    /// Records a transaction's GTID as the newest of its domain.
    pub fn apply(&mut self, gtid: MariaGtid) {
        self.0.insert(gtid.domain, gtid);
    }

    /// True when no GTID has been recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when every GTID of `other` is at or before this state's in its domain.
    pub fn includes(&self, other: &MariaGtidState) -> bool {
        other
            .0
            .iter()
            .all(|(d, g)| self.0.get(d).is_some_and(|mine| mine.seq >= g.seq))
    }

    /// True when every replication domain of `other` has a GTID here.
    pub fn covers_domains_of(&self, other: &MariaGtidState) -> bool {
        other.0.keys().all(|d| self.0.contains_key(d))
    }

    /// The GTIDs, one per domain, in domain order.
    pub fn iter(&self) -> impl Iterator<Item = &MariaGtid> {
        self.0.values()
    }
}

impl fmt::Display for MariaGtidState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, g) in self.0.values().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{g}")?;
        }
        Ok(())
    }
}

impl FromStr for MariaGtidState {
    type Err = PositionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut state = MariaGtidState::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let gtid: MariaGtid = part.parse()?;
            // A binlog state (Debezium's offsets) lists a domain once per server that
            // wrote in it: the highest sequence number is the newest.
            if state
                .0
                .get(&gtid.domain)
                .is_none_or(|old| old.seq < gtid.seq)
            {
                state.apply(gtid);
            }
        }
        Ok(state)
    }
}

/// The GTID state stored with a position: none, MariaDB's last GTID per domain, or
/// MySQL's GTID set. One enum, so a position never carries both kinds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum GtidState {
    /// The server has no GTIDs, or the router has not learnt them.
    #[default]
    None,
    /// MariaDB: `domain-server-seq` per replication domain.
    MariaDb(MariaGtidState),
    /// MySQL: every transaction the position includes, as a GTID set.
    MySql(MySqlGtidSet),
}

impl GtidState {
    /// True when no GTID is known.
    pub fn is_empty(&self) -> bool {
        match self {
            GtidState::None => true,
            GtidState::MariaDb(m) => m.is_empty(),
            GtidState::MySql(s) => s.is_empty(),
        }
    }

    /// Records a MariaDB transaction's GTID (or a GTID list's entry).
    pub fn apply_mariadb(&mut self, gtid: MariaGtid) {
        match self {
            GtidState::MariaDb(m) => m.apply(gtid),
            _ => {
                let mut m = MariaGtidState::default();
                m.apply(gtid);
                *self = GtidState::MariaDb(m);
            }
        }
    }

    /// Records a MySQL transaction's GTID, when a GTID set is being kept.
    ///
    /// A set is only extended, never started here: one begun mid-history would claim
    /// to lack every earlier transaction, and resuming by it would replay them all.
    pub fn apply_mysql(&mut self, event: &GtidEvent) {
        if let GtidState::MySql(set) = self {
            set.apply(event);
        }
    }

    /// True when resuming by this state cannot miss a part of the server's history that
    /// `server` (the server's current state) knows of.
    pub fn covers_domains_of(&self, server: &GtidState) -> bool {
        match (self, server) {
            (GtidState::MariaDb(mine), GtidState::MariaDb(theirs)) => {
                mine.covers_domains_of(theirs)
            }
            // A set names what the replica has; the server sends everything else, or
            // says (error 1236) that it purged some of it.
            (GtidState::MySql(_), GtidState::MySql(_)) => true,
            _ => false,
        }
    }
}

impl fmt::Display for GtidState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GtidState::None => Ok(()),
            GtidState::MariaDb(m) => m.fmt(f),
            GtidState::MySql(s) => s.fmt(f),
        }
    }
}

impl FromStr for GtidState {
    type Err = PositionError;
    /// Empty → none; with a `:` (after a UUID) → a MySQL set; else MariaDB GTIDs.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() {
            Ok(GtidState::None)
        } else if s.contains(':') {
            Ok(GtidState::MySql(s.parse()?))
        } else {
            Ok(GtidState::MariaDb(s.parse()?))
        }
    }
}

impl TryFrom<String> for GtidState {
    type Error = PositionError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<GtidState> for String {
    fn from(g: GtidState) -> Self {
        g.to_string()
    }
}

/// The end of a committed transaction in the binlog: where reading resumes.
///
/// Text form: `mysql-bin.000003:154`, or `mysql-bin.000003:154 gtid=0-1-42` when the
/// GTID state is known; `Display` and `FromStr` round-trip.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// Binlog file holding the transaction.
    pub file: BinlogFile,
    /// Byte offset just past the transaction's last event.
    pub offset: u64,
    /// GTID state after the transaction (empty when the server has no GTIDs).
    #[serde(default)]
    pub gtid: GtidState,
}

impl Position {
    /// A position at a file and offset, with no GTID state.
    pub fn new(file: BinlogFile, offset: u64) -> Result<Self, PositionError> {
        if offset < 4 {
            return Err(PositionError::OffsetTooSmall(offset));
        }
        Ok(Self {
            file,
            offset,
            gtid: GtidState::None,
        })
    }

    /// `file:offset` without the GTID part, for compact log lines.
    pub fn file_offset(&self) -> String {
        format!("{}:{}", self.file, self.offset)
    }
}

impl Position {
    /// The same file and GTID state at another offset (the end of an event being read).
    pub fn at_offset(&self, offset: u64) -> Position {
        Position {
            offset,
            ..self.clone()
        }
    }

    /// Whether everything committed up to `other` is also up to `self`: by GTID when
    /// both carry one of the same kind (valid across servers and a failover's renamed
    /// files), else by file and offset (`None` for differently named binlogs).
    pub fn includes(&self, other: &Position) -> Option<bool> {
        match (&self.gtid, &other.gtid) {
            (GtidState::MariaDb(mine), GtidState::MariaDb(theirs)) if !theirs.is_empty() => {
                Some(mine.includes(theirs))
            }
            (GtidState::MySql(mine), GtidState::MySql(theirs)) if !theirs.is_empty() => {
                Some(mine.contains_set(theirs))
            }
            _ => self.partial_cmp(other).map(Ordering::is_ge),
        }
    }

    /// Whether [`Position::includes`] answers by GTID (else by file and offset, which
    /// only means something on the server that wrote the file).
    pub fn compares_by_gtid(&self, other: &Position) -> bool {
        match (&self.gtid, &other.gtid) {
            (GtidState::MariaDb(_), GtidState::MariaDb(theirs)) => !theirs.is_empty(),
            (GtidState::MySql(_), GtidState::MySql(theirs)) => !theirs.is_empty(),
            _ => false,
        }
    }
}

impl PartialOrd for Position {
    /// Ordered by file then offset; positions in differently named binlogs do not compare.
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        match self.file.partial_cmp(&other.file)? {
            Ordering::Equal => Some(self.offset.cmp(&other.offset)),
            o => Some(o),
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.offset)?;
        if !self.gtid.is_empty() {
            write!(f, " gtid={}", self.gtid)?;
        }
        Ok(())
    }
}

impl FromStr for Position {
    type Err = PositionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let (file_pos, gtid) = match s.split_once(char::is_whitespace) {
            Some((fp, rest)) => {
                let rest = rest.trim();
                let g = rest
                    .strip_prefix("gtid=")
                    .ok_or_else(|| PositionError::BadPosition(s.to_string()))?;
                (fp, g.parse()?)
            }
            None => (s, GtidState::None),
        };
        let (file, offset) = file_pos
            .rsplit_once(':')
            .ok_or_else(|| PositionError::BadPosition(s.to_string()))?;
        let offset = offset
            .parse()
            .map_err(|_| PositionError::BadPosition(s.to_string()))?;
        let mut pos = Position::new(BinlogFile::new(file)?, offset)?;
        pos.gtid = gtid;
        Ok(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inclusion_is_by_gtid_when_both_have_one() {
        let p = |s: &str| s.parse::<Position>().unwrap();
        // After a failover the new server's file numbers are lower; GTIDs decide.
        let checkpoint = p("mysql-bin.000002:400 gtid=0-1-120,1-2-7");
        assert_eq!(
            checkpoint.includes(&p("mysql-bin.000090:4 gtid=0-1-119")),
            Some(true)
        );
        assert_eq!(
            checkpoint.includes(&p("mysql-bin.000001:4 gtid=0-1-121")),
            Some(false)
        );
        assert_eq!(
            checkpoint.includes(&p("mysql-bin.000001:4 gtid=0-1-100,2-3-1")),
            Some(false),
            "a domain the checkpoint never saw"
        );
        // Without GTIDs, file and offset.
        assert_eq!(
            p("mysql-bin.000002:400").includes(&p("mysql-bin.000002:399")),
            Some(true)
        );
        assert_eq!(
            p("mysql-bin.000002:400").includes(&p("other-bin.000001:4")),
            None
        );
        let set = |s: &str| p(&format!("mysql-bin.000001:4 gtid={s}"));
        let u = "3e11fa47-71ca-11e1-9e33-c80aa9429562";
        assert_eq!(
            set(&format!("{u}:1-10:12")).includes(&set(&format!("{u}:2-5:12"))),
            Some(true)
        );
        assert_eq!(
            set(&format!("{u}:1-10")).includes(&set(&format!("{u}:9-11"))),
            Some(false)
        );
    }

    #[test]
    fn round_trips_with_and_without_gtid() {
        for text in [
            "mysql-bin.000003:154",
            "mysql-bin.000003:154 gtid=0-1-42,1-2-7",
        ] {
            let p: Position = text.parse().unwrap();
            assert_eq!(p.to_string(), text);
        }
    }

    #[test]
    fn rejects_garbage() {
        assert!("mysql-bin.000003".parse::<Position>().is_err());
        assert!("mysql-bin:154".parse::<Position>().is_err());
        assert!("mysql-bin.000001:3".parse::<Position>().is_err());
        assert!("mysql-bin.000001:99 gtid=x".parse::<Position>().is_err());
    }

    #[test]
    fn orders_within_a_base_name_only() {
        let a: Position = "mysql-bin.000002:900".parse().unwrap();
        let b: Position = "mysql-bin.000010:4".parse().unwrap();
        let c: Position = "other.000001:4".parse().unwrap();
        assert!(a < b);
        assert_eq!(a.partial_cmp(&c), None);
    }

    #[test]
    fn mysql_gtid_sets_round_trip_and_stay_apart_from_mariadb_state() {
        let text = "mysql-bin.000003:154 gtid=3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7";
        let p: Position = text.parse().unwrap();
        assert!(matches!(p.gtid, GtidState::MySql(_)));
        assert_eq!(p.to_string(), text);
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Position>(&json).unwrap(), p);
        let maria: Position = "mysql-bin.000003:154 gtid=0-1-42".parse().unwrap();
        assert!(matches!(maria.gtid, GtidState::MariaDb(_)));
        assert!(!p.gtid.covers_domains_of(&maria.gtid));
    }

    #[test]
    fn a_binlog_state_keeps_the_newest_gtid_of_each_domain() {
        let state: MariaGtidState = "0-2-50,0-1-100,1-3-7".parse().unwrap();
        assert_eq!(state.to_string(), "0-1-100,1-3-7");
    }

    #[test]
    fn serde_keeps_gtid() {
        let p: Position = "mysql-bin.000003:154 gtid=0-1-42".parse().unwrap();
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Position>(&json).unwrap(), p);
    }
}
