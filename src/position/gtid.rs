//! GTID states stored with a position: MariaDB's last GTID per domain, or MySQL's GTID
//! set (`mysql_gtid.rs`).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use mysql_async::binlog::events::GtidEvent;
use serde::{Deserialize, Serialize};

use super::{MySqlGtidSet, PositionError};

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

    /// True when a binlog file whose GTID list (the state at its start) is `list` holds
    /// nothing this state covers: every domain of ours is at or below the list's.
    pub fn is_covered_by_mariadb_list(&self, list: &[MariaGtid]) -> bool {
        let GtidState::MariaDb(mine) = self else {
            return false;
        };
        let mut start = MariaGtidState::default();
        list.iter().cloned().for_each(|g| start.apply(g));
        start.includes(mine)
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
