//! Debezium's stored source offset for one connector — from Kafka Connect's file offset
//! store (standalone) or its offsets topic (distributed) — as the router's position.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use rdkafka::consumer::{BaseConsumer, Consumer};
use serde::{Deserialize, Serialize};

use crate::kafka::{KafkaClientError, KafkaConfig};
use crate::position::{BinlogFile, GtidState, Position};

/// Where Kafka Connect keeps source offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetStore {
    /// Standalone: the worker's `offset.storage.file.filename`.
    File(PathBuf),
    /// Distributed: the worker's `offset.storage.topic`, on the router's Kafka.
    Topic(String),
}

impl FromStr for OffsetStore {
    type Err = std::convert::Infallible;
    /// `kafka:TOPIC` names a topic; anything else is a file.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.strip_prefix("kafka:") {
            Some(topic) => OffsetStore::Topic(topic.to_string()),
            None => OffsetStore::File(PathBuf::from(s)),
        })
    }
}

impl fmt::Display for OffsetStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OffsetStore::File(path) => write!(f, "offset file {}", path.display()),
            OffsetStore::Topic(topic) => write!(f, "offsets topic {topic}"),
        }
    }
}

/// What Connect stores one connector's offset under: `["<name>",{"server":"<prefix>"}]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorKey {
    /// The connector's `name`.
    pub name: String,
    /// Its `topic.prefix` (`database.server.name` before Debezium 2).
    pub server: String,
}

impl ConnectorKey {
    /// The key of the connector these settings describe.
    pub fn of(settings: &BTreeMap<String, String>) -> Result<Self, OffsetError> {
        let name = settings
            .get("name")
            .ok_or(OffsetError::MissingSetting("name"))?;
        let server = settings
            .get("topic.prefix")
            .or_else(|| settings.get("database.server.name"))
            .ok_or(OffsetError::MissingSetting("topic.prefix"))?;
        Ok(Self {
            name: name.clone(),
            server: server.clone(),
        })
    }

    /// Whether a stored key is this connector's (compared as JSON, not as bytes).
    pub fn matches(&self, key: &[u8]) -> bool {
        match serde_json::from_slice::<serde_json::Value>(key) {
            Ok(serde_json::Value::Array(parts)) => match parts.as_slice() {
                [name, partition] => {
                    name.as_str() == Some(self.name.as_str())
                        && partition.get("server").and_then(|s| s.as_str())
                            == Some(self.server.as_str())
                }
                _ => false,
            },
            _ => false,
        }
    }

    /// The connector name a stored key belongs to, if it is a connector's key.
    fn connector_of(key: &[u8]) -> Option<String> {
        let value: serde_json::Value = serde_json::from_slice(key).ok()?;
        value.get(0)?.as_str().map(str::to_string)
    }
}

/// A Debezium MySQL / MariaDB connector's source offset, as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DebeziumOffset {
    /// Binlog file of the restart position.
    pub file: String,
    /// The restart position: the start of the transaction Debezium was in (the end of
    /// the one before it).
    pub pos: u64,
    /// Every transaction completed before that position: a MariaDB GTID list or a
    /// MySQL GTID set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gtids: Option<String>,
    /// Events of the transaction at `pos` Debezium had already sent.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub event: u64,
    /// Rows of the event after those it had already sent.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub row: u64,
    /// The id of the server whose binlog this is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_id: Option<u64>,
    /// Time of the last event Debezium read (seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts_sec: Option<i64>,
    /// Present (true) while its snapshot had not finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<serde_json::Value>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl DebeziumOffset {
    /// The offset of a router position, as Debezium stores it (to go back).
    pub fn of(position: &Position) -> Self {
        Self {
            file: position.file.to_string(),
            pos: position.offset,
            gtids: (!position.gtid.is_empty()).then(|| position.gtid.to_string()),
            ..Self::default()
        }
    }

    /// Whether Debezium stored this in the middle of its snapshot.
    pub fn in_snapshot(&self) -> bool {
        match &self.snapshot {
            Some(serde_json::Value::Bool(b)) => *b,
            Some(serde_json::Value::String(s)) => s == "true",
            _ => false,
        }
    }

    /// Whether Debezium had sent part of the transaction at `pos`: those events are
    /// sent again (with the same event ids).
    pub fn inside_transaction(&self) -> bool {
        self.event > 0 || self.row > 0
    }

    /// Where the router resumes: the start of the transaction Debezium was in, with the
    /// GTIDs completed before it.
    pub fn position(&self) -> Result<Position, String> {
        let file = BinlogFile::new(&self.file).map_err(|e| e.to_string())?;
        let mut position = Position::new(file, self.pos).map_err(|e| e.to_string())?;
        if let Some(gtids) = &self.gtids {
            // A MySQL set may be written over several lines.
            let gtids: String = gtids.split_whitespace().collect();
            position.gtid = gtids
                .parse::<GtidState>()
                .map_err(|e| format!("gtids {gtids:?}: {e}"))?;
        }
        Ok(position)
    }
}

/// Why no usable offset could be read.
#[derive(Debug, thiserror::Error)]
pub enum OffsetError {
    #[error("the connector config has no {0}: Kafka Connect keeps a connector's offset under its name and topic.prefix")]
    MissingSetting(&'static str),
    #[error("cannot read {path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("{path} is not a Kafka Connect offset file (offset.storage.file.filename holds a Java-serialized map): {reason}")]
    NotAnOffsetFile { path: String, reason: String },
    #[error("no offset of connector {name:?} (topic.prefix {server:?}) in the {store}{found}: has it run and flushed its offsets (offset.flush.interval.ms), and are name and topic.prefix the ones it ran with?")]
    NotFound {
        name: String,
        server: String,
        store: String,
        found: String,
    },
    #[error("the offset of connector {name:?} in the {store} was deleted (a tombstone: the offsets were reset); there is no position to carry over")]
    Deleted { name: String, store: String },
    #[error("the offset of connector {name:?} in the {store} is not a binlog position: {reason} (stored: {value})")]
    Unusable {
        name: String,
        store: String,
        reason: String,
        value: String,
    },
    #[error("connector {name:?} had not finished its snapshot (stored: {value}): let Debezium finish it, or start the router with source.snapshot = \"initial\" instead of importing")]
    Snapshotting { name: String, value: String },
    #[error(transparent)]
    Kafka(#[from] KafkaClientError),
}

/// Reads the connector's newest offset from `store` (a topic on `kafka`).
pub fn read(
    store: &OffsetStore,
    key: &ConnectorKey,
    kafka: &KafkaConfig,
) -> Result<DebeziumOffset, OffsetError> {
    let stored = match store {
        OffsetStore::File(path) => from_file(path, key)?,
        OffsetStore::Topic(topic) => from_topic(kafka, topic, key)?,
    };
    let value = stored.ok_or_else(|| OffsetError::Deleted {
        name: key.name.clone(),
        store: store.to_string(),
    })?;
    let text = String::from_utf8_lossy(&value).into_owned();
    let unusable = |reason: String| OffsetError::Unusable {
        name: key.name.clone(),
        store: store.to_string(),
        reason,
        value: text.clone(),
    };
    let offset: DebeziumOffset =
        serde_json::from_slice(&value).map_err(|e| unusable(e.to_string()))?;
    if offset.in_snapshot() {
        return Err(OffsetError::Snapshotting {
            name: key.name.clone(),
            value: text,
        });
    }
    offset.position().map_err(unusable)?;
    Ok(offset)
}

/// The connector's stored value in a standalone worker's offset file (`None`: deleted).
fn from_file(path: &Path, key: &ConnectorKey) -> Result<Option<Vec<u8>>, OffsetError> {
    let entries = file_entries(path)?;
    let mut found = Vec::new();
    for (k, v) in entries {
        let Some(k) = k else { continue };
        if key.matches(&k) {
            return Ok(v);
        }
        found.extend(ConnectorKey::connector_of(&k));
    }
    Err(OffsetError::NotFound {
        name: key.name.clone(),
        server: key.server.clone(),
        store: OffsetStore::File(path.to_path_buf()).to_string(),
        found: if found.is_empty() {
            " (it holds no connector's offset)".into()
        } else {
            format!(" (it holds offsets of: {})", found.join(", "))
        },
    })
}

/// One stored key and value; Java nulls are `None`.
type Entry = (Option<Vec<u8>>, Option<Vec<u8>>);

/// Every entry of a Connect offset file: `FileOffsetBackingStore` writes its map as a
/// Java-serialized `HashMap<byte[], byte[]>`.
fn file_entries(path: &Path) -> Result<Vec<Entry>, OffsetError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| OffsetError::Unreadable {
        path: shown.clone(),
        reason: e.to_string(),
    })?;
    let bad = |reason: String| OffsetError::NotAnOffsetFile {
        path: shown.clone(),
        reason,
    };
    let mut parser =
        jaded::Parser::new(std::io::BufReader::new(file)).map_err(|e| bad(e.to_string()))?;
    let content = parser.read().map_err(|e| bad(e.to_string()))?;
    let jaded::Content::Object(jaded::Value::Object(map)) = content else {
        return Err(bad("not a Java object".into()));
    };
    if map.class_name() != "java.util.HashMap" {
        return Err(bad(format!(
            "a {}, not a java.util.HashMap",
            map.class_name()
        )));
    }
    let Some(mut data) = map.get_annotation(0) else {
        return Ok(Vec::new());
    };
    let conversion = |e: jaded::ConversionError| bad(e.to_string());
    let _buckets = data.read_i32().map_err(conversion)?;
    let size = data.read_i32().map_err(conversion)?;
    let mut entries = Vec::with_capacity(size.max(0) as usize);
    for _ in 0..size {
        let k = bytes(data.read_object().map_err(conversion)?).map_err(&bad)?;
        let v = bytes(data.read_object().map_err(conversion)?).map_err(&bad)?;
        entries.push((k, v));
    }
    Ok(entries)
}

/// A Java `byte[]` (or null).
fn bytes(value: &jaded::Value) -> Result<Option<Vec<u8>>, String> {
    match value {
        jaded::Value::Null => Ok(None),
        jaded::Value::PrimitiveArray(items) => items
            .iter()
            .map(|item| match item {
                jaded::PrimitiveType::Byte(b) => Ok(*b),
                other => Err(format!("an array holding {other}, not bytes")),
            })
            .collect::<Result<Vec<u8>, String>>()
            .map(Some),
        other => Err(format!("{other:?}, not a byte array")),
    }
}

/// The connector's newest value on a distributed worker's offsets topic (`None`:
/// deleted); Connect spreads keys over the topic's partitions by hash, so each is read.
fn from_topic(
    kafka: &KafkaConfig,
    topic: &str,
    key: &ConnectorKey,
) -> Result<Option<Vec<u8>>, OffsetError> {
    let not_found = |found: String| OffsetError::NotFound {
        name: key.name.clone(),
        server: key.server.clone(),
        store: OffsetStore::Topic(topic.to_string()).to_string(),
        found,
    };
    let read_back = |reason: String| KafkaClientError::ReadBack {
        topic: topic.to_string(),
        reason,
    };
    let consumer: BaseConsumer = crate::kafka::consumer_config(kafka)
        .create()
        .map_err(|e| read_back(e.to_string()))?;
    let metadata = consumer
        .fetch_metadata(Some(topic), std::time::Duration::from_secs(10))
        .map_err(|e| read_back(format!("metadata: {e}")))?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    if partitions.is_empty() {
        return Err(not_found(
            " (the topic does not exist on this Kafka: is it the worker's offset.storage.topic, and kafka.bootstrap_servers its cluster?)".into(),
        ));
    }
    for partition in partitions {
        if let Some(newest) = crate::kafka::newest(kafka, topic, partition, |k| key.matches(k))? {
            return Ok(newest.value);
        }
    }
    Err(not_found(String::new()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ConnectorKey {
        ConnectorKey {
            name: "outbox".into(),
            server: "shop".into(),
        }
    }

    #[test]
    fn keys_match_as_json() {
        assert!(key().matches(br#"["outbox",{"server":"shop"}]"#));
        assert!(key().matches(br#"[ "outbox" , { "server" : "shop" } ]"#));
        assert!(!key().matches(br#"["outbox",{"server":"other"}]"#));
        assert!(!key().matches(br#"["other",{"server":"shop"}]"#));
        assert!(!key().matches(b"not json"));
    }

    #[test]
    fn mariadb_offset_becomes_a_position_with_its_gtids() {
        let offset: DebeziumOffset = serde_json::from_str(
            r#"{"transaction_id":null,"ts_sec":1764600000,"file":"mysql-bin.000004","pos":1234,"gtids":"0-1-55,1-2-7","row":1,"server_id":1,"event":2}"#,
        )
        .unwrap();
        assert!(offset.inside_transaction());
        assert!(!offset.in_snapshot());
        assert_eq!(
            offset.position().unwrap().to_string(),
            "mysql-bin.000004:1234 gtid=0-1-55,1-2-7"
        );
    }

    #[test]
    fn mysql_gtid_set_over_lines_and_snapshot_flag() {
        let offset: DebeziumOffset = serde_json::from_str(
            "{\"file\":\"binlog.000002\",\"pos\":157,\"gtids\":\"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5,\\n4e11fa47-71ca-11e1-9e33-c80aa9429562:1-2\",\"snapshot\":true}",
        )
        .unwrap();
        assert!(offset.in_snapshot());
        assert!(matches!(
            offset.position().unwrap().gtid,
            GtidState::MySql(_)
        ));
    }

    #[test]
    fn a_position_goes_back_as_an_offset() {
        let position: Position = "mysql-bin.000004:1234 gtid=0-1-55".parse().unwrap();
        let back = serde_json::to_string(&DebeziumOffset::of(&position)).unwrap();
        assert_eq!(
            back,
            r#"{"file":"mysql-bin.000004","pos":1234,"gtids":"0-1-55"}"#
        );
    }

    #[test]
    fn stores_parse() {
        assert_eq!(
            "kafka:connect-offsets".parse::<OffsetStore>().unwrap(),
            OffsetStore::Topic("connect-offsets".into())
        );
        assert_eq!(
            "/var/lib/connect.offsets".parse::<OffsetStore>().unwrap(),
            OffsetStore::File("/var/lib/connect.offsets".into())
        );
    }
}
