//! Where a reader is in the binlog: file + offset at a transaction boundary, plus the
//! GTID state at that point, so a restart (or a failover) resumes exactly there.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{BinlogFile, GtidState, PositionError};

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
    use crate::position::MariaGtidState;

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
