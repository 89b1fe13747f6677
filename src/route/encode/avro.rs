//! Avro record values: the JSON payload is checked against the event's schema from
//! `schemas/` and encoded, framed as Avro single-object encoding or, with a schema
//! registry, in the Confluent wire format. A payload that does not fit is an invalid row
//! (the `on_invalid` policy decides), never a silently altered record.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use apache_avro::schema::{RecordSchema, Schema};
use apache_avro::types::Value;

use super::config::{SubjectStrategy, ValueConfig};
use super::encoder::{Encoded, Encoder};
use super::registry::{Registry, RegistryError};
use crate::outbox::OutboxEvent;

/// Problems loading schemas or talking to the registry at start.
#[derive(Debug, thiserror::Error)]
pub enum AvroError {
    #[error("cannot read schema directory {dir}: {source}")]
    ReadDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read schema {file}: {source}")]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("schemas in {dir} do not parse: {reason}")]
    Parse { dir: PathBuf, reason: String },
    #[error("no .avsc schema in {0}: value.format = \"avro\" needs at least one")]
    Empty(PathBuf),
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// One schema and how its values are framed.
#[derive(Debug)]
struct EventSchema {
    /// Full name, for messages and record-name subjects.
    name: String,
    schema: Schema,
    /// Single-object header: C3 01 + CRC-64-AVRO fingerprint (little endian).
    single_object: Vec<u8>,
}

/// Encodes payloads as Avro.
#[derive(Debug)]
pub struct AvroValues {
    schemas: Vec<EventSchema>,
    /// Full name, short name and file stem → index in `schemas`.
    by_name: HashMap<String, usize>,
    /// Header naming the schema (the event type).
    schema_by: String,
    registry: Option<(Registry, SubjectStrategy)>,
    /// Registry ids by subject and schema, once known.
    ids: Mutex<HashMap<(String, usize), u32>>,
}

impl AvroValues {
    /// Loads every `.avsc` in the configured directory (one schema per file; files may
    /// refer to each other's named types) and, with a registry and record-name subjects,
    /// registers them all.
    pub async fn load(cfg: &ValueConfig) -> Result<Self, AvroError> {
        let dir = &cfg.schemas;
        let files = avsc_files(dir)?;
        if files.is_empty() {
            return Err(AvroError::Empty(dir.clone()));
        }
        let texts = files
            .iter()
            .map(|f| {
                std::fs::read_to_string(f).map_err(|source| AvroError::Read {
                    file: f.clone(),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let parsed = Schema::parse_list(&texts).map_err(|e| AvroError::Parse {
            dir: dir.clone(),
            reason: e.to_string(),
        })?;
        let mut schemas = Vec::new();
        let mut by_name = HashMap::new();
        for (file, schema) in files.iter().zip(parsed) {
            let i = schemas.len();
            let stem = file
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let name = match schema.name() {
                Some(n) => {
                    by_name.entry(n.name().to_string()).or_insert(i);
                    n.fullname(None)
                }
                None => stem.clone(),
            };
            by_name.insert(name.clone(), i);
            by_name.entry(stem).or_insert(i);
            let fingerprint = schema.fingerprint::<apache_avro::rabin::Rabin>().bytes;
            let mut single_object = vec![0xC3, 0x01];
            single_object.extend_from_slice(&fingerprint);
            schemas.push(EventSchema {
                name,
                schema,
                single_object,
            });
        }
        let values = Self {
            schemas,
            by_name,
            schema_by: cfg.schema_by.clone(),
            registry: cfg
                .registry
                .as_ref()
                .map(|r| Ok::<_, RegistryError>((Registry::new(r)?, r.subject)))
                .transpose()?,
            ids: Mutex::default(),
        };
        if let Some((registry, SubjectStrategy::Record)) = &values.registry {
            for (i, s) in values.schemas.iter().enumerate() {
                let id = registry.register(&s.name, &s.schema).await?;
                values.ids.lock().unwrap().insert((s.name.clone(), i), id);
            }
        }
        Ok(values)
    }

    /// The Avro value of an event for `topic`: framing + datum; `Ok(Err(reason))` when
    /// the payload does not fit (bad input), `Err` when the registry failed (retry).
    pub fn encode(
        &self,
        e: &OutboxEvent,
        topic: &str,
        payload: &[u8],
    ) -> Result<Result<Vec<u8>, String>, RegistryError> {
        let (i, datum) = match self.datum(e, payload) {
            Ok(d) => d,
            Err(reason) => return Ok(Err(reason)),
        };
        let mut out = self.header(i, topic)?;
        out.extend_from_slice(&datum);
        Ok(Ok(out))
    }

    /// Where the registry serves the schema of a value `encode` framed for it (its
    /// Confluent schema id); none without a registry.
    pub fn schema_uri(&self, value: &[u8]) -> Option<String> {
        let (registry, _) = self.registry.as_ref()?;
        match value {
            [0, a, b, c, d, ..] => Some(registry.schema_uri(u32::from_be_bytes([*a, *b, *c, *d]))),
            _ => None,
        }
    }

    /// The schema's index and the encoded datum, or why the payload does not fit.
    fn datum(&self, e: &OutboxEvent, payload: &[u8]) -> Result<(usize, Vec<u8>), String> {
        let i = self.schema_of(e)?;
        let s = &self.schemas[i];
        let json: serde_json::Value = serde_json::from_slice(payload).map_err(|err| {
            format!("payload is not JSON ({err}); Avro values are encoded from JSON payloads")
        })?;
        unknown_fields(&json, &s.schema, "")
            .map_err(|f| format!("payload field {f} is not in Avro schema {}", s.name))?;
        let schemata: Vec<&Schema> = self.schemas.iter().map(|s| &s.schema).collect();
        let value = Value::try_from(json)
            .and_then(|v| v.resolve_schemata(&s.schema, schemata.clone()))
            .map_err(|err| format!("payload does not fit Avro schema {}: {err}", s.name))?;
        // The replacement (GenericDatumWriter) borrows the schemata it resolves; this
        // one-call form is fine at outbox rates and keeps AvroValues free of self-borrows.
        #[allow(deprecated)]
        let datum = apache_avro::to_avro_datum_schemata(&s.schema, schemata, value)
            .map_err(|err| format!("payload does not fit Avro schema {}: {err}", s.name))?;
        Ok((i, datum))
    }

    /// The event type header names the schema; else the aggregate type.
    fn schema_of(&self, e: &OutboxEvent) -> Result<usize, String> {
        let event_type = e
            .headers
            .iter()
            .find(|(k, _)| *k == self.schema_by)
            .and_then(|(_, v)| std::str::from_utf8(v).ok());
        event_type
            .and_then(|t| self.by_name.get(t))
            .or_else(|| self.by_name.get(&e.route_value))
            .copied()
            .ok_or_else(|| {
                format!(
                    "no Avro schema named {:?} (header {:?}) or {:?} (aggregate type) in the schemas directory",
                    event_type.unwrap_or(""),
                    self.schema_by,
                    e.route_value
                )
            })
    }

    /// Single-object header, or magic byte 0 + the registry's schema id (big endian).
    fn header(&self, i: usize, topic: &str) -> Result<Vec<u8>, RegistryError> {
        let Some((registry, strategy)) = &self.registry else {
            return Ok(self.schemas[i].single_object.clone());
        };
        let subject = match strategy {
            SubjectStrategy::Record => self.schemas[i].name.clone(),
            SubjectStrategy::Topic => format!("{topic}-value"),
        };
        let known = self.ids.lock().unwrap().get(&(subject.clone(), i)).copied();
        let id = match known {
            Some(id) => id,
            None => {
                // First record of this subject: register once, blocking this reader
                // thread briefly (the route stage is synchronous).
                let schema = &self.schemas[i].schema;
                let id = tokio::task::block_in_place(|| {
                    tokio::runtime::Handle::current().block_on(registry.register(&subject, schema))
                })?;
                self.ids.lock().unwrap().insert((subject, i), id);
                id
            }
        };
        let mut out = Vec::with_capacity(64);
        out.push(0);
        out.extend_from_slice(&id.to_be_bytes());
        Ok(out)
    }
}

/// `.avsc` files of a directory, sorted by name.
fn avsc_files(dir: &Path) -> Result<Vec<PathBuf>, AvroError> {
    let entries = std::fs::read_dir(dir).map_err(|source| AvroError::ReadDir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "avsc"))
        .collect();
    files.sort();
    Ok(files)
}

/// The first JSON object key (as a dotted path) that a record schema has no field for:
/// Avro resolution would drop it without a word.
fn unknown_fields(json: &serde_json::Value, schema: &Schema, path: &str) -> Result<(), String> {
    match (json, schema) {
        (serde_json::Value::Object(map), Schema::Record(RecordSchema { fields, lookup, .. })) => {
            for (k, v) in map {
                let here = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match lookup.get(k) {
                    None => return Err(format!("{here:?}")),
                    Some(&f) => unknown_fields(v, &fields[f].schema, &here)?,
                }
            }
            Ok(())
        }
        (serde_json::Value::Array(items), Schema::Array(a)) => {
            for (n, v) in items.iter().enumerate() {
                unknown_fields(v, &a.items, &format!("{path}[{n}]"))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `value.format = "avro"`, and a CloudEvent's Avro data: a NULL payload stays a null
/// value; any other is encoded against its schema.
impl Encoder for AvroValues {
    fn encode(
        &self,
        e: &mut OutboxEvent,
        topic: &str,
        _time_ms: i64,
    ) -> Result<Encoded, RegistryError> {
        match &e.payload {
            None => Ok(Ok(None)),
            Some(payload) => Ok(AvroValues::encode(self, e, topic, payload)?.map(Some)),
        }
    }

    fn schema_uri(&self, value: &[u8]) -> Option<String> {
        AvroValues::schema_uri(self, value)
    }
}
