//! A pool file: `[pool]` (the group, its lock topics, where the sources live) and the
//! sections every source shares (`[kafka]`, `[monitor]`), once; each source is one file
//! of the sources directory, an ordinary config without those sections, named by its
//! file's stem.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::config::{Config, ConfigError};

/// Sections a source file leaves to the pool file.
const SHARED: [&str; 2] = ["kafka", "monitor"];

/// `[pool]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Directory of source files (`NAME.toml`), relative to the pool file.
    pub sources_dir: PathBuf,
    /// Consumer group of the pool's instances.
    #[serde(default = "default_group_id")]
    pub group_id: String,
    /// Each source's lock is the one partition of topic `<prefix><NAME>`.
    #[serde(default = "default_lock_topic_prefix")]
    pub lock_topic_prefix: String,
    /// An instance that does not heartbeat for this long loses its sources.
    #[serde(
        default = "default_session_timeout_ms",
        deserialize_with = "crate::units::millis"
    )]
    pub session_timeout_ms: u64,
    /// This instance's name in logs, `status` and the group (default `<host>-<pid>`).
    #[serde(default)]
    pub instance: String,
    /// A source's local checkpoint cache goes to `<state_dir>/<NAME>` unless its file
    /// sets `checkpoint.dir`.
    pub state_dir: PathBuf,
    /// How often the sources directory is read again for added, removed and changed
    /// sources (SIGHUP reads it at once); 0: only on SIGHUP.
    #[serde(
        default = "default_watch_secs",
        deserialize_with = "crate::units::secs"
    )]
    pub watch_secs: u64,
}

fn default_watch_secs() -> u64 {
    30
}

fn default_group_id() -> String {
    "outbox-router-pool".into()
}

fn default_lock_topic_prefix() -> String {
    "outbox-router.pool.".into()
}

fn default_session_timeout_ms() -> u64 {
    10_000
}

/// The pool file's own sections.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolFile {
    pool: PoolConfig,
    #[serde(default)]
    kafka: toml::Table,
    #[serde(default)]
    monitor: toml::Table,
}

/// One source of the pool: its name and its whole configuration (shared sections in).
#[derive(Debug)]
pub struct PoolSource {
    pub name: String,
    /// The one-partition topic whose owner in the group leads this source.
    pub lock_topic: String,
    pub config: Config,
    /// What it was loaded from, shared sections in: a reload restarts a source whose
    /// text changed.
    pub text: String,
}

impl AsRef<Config> for PoolSource {
    fn as_ref(&self) -> &Config {
        &self.config
    }
}

/// A loaded pool: its settings, the shared monitor section, and every source.
#[derive(Debug)]
pub struct Pool {
    pub path: PathBuf,
    pub settings: PoolConfig,
    /// The pool's endpoint and thresholds (each source's copy has the same).
    pub monitor: crate::monitor::MonitorConfig,
    /// The shared Kafka section (the lock group's client; each source's copy has the
    /// same).
    pub kafka: crate::kafka::KafkaConfig,
    pub sources: Vec<PoolSource>,
    /// Sources whose file does not load, or that clash with another: each is its own
    /// failure, shown by the pool's endpoints; the others run.
    pub failed: Vec<FailedSource>,
}

/// A source that cannot run: its name and why (never the file's text: a line can hold
/// a secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedSource {
    pub name: String,
    pub error: String,
}

impl FailedSource {
    /// The source of file `path` (its name is the file's stem), failed for `error`.
    fn of_file(path: &Path, error: String) -> Self {
        Self {
            name: path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            error,
        }
    }
}

impl Pool {
    /// True when the file at `path` is a pool file (has a `[pool]` section).
    pub fn is_pool_file(path: &Path) -> bool {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|text| toml::from_str::<toml::Table>(&text).ok())
            .is_some_and(|t| t.contains_key("pool"))
    }

    /// Reads the pool file and every source file of its directory.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let file: PoolFile = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: crate::config::toml_error(Some(&text), &e),
        })?;
        file.pool.check().map_err(invalid)?;
        let dir = path
            .parent()
            .unwrap_or(Path::new("."))
            .join(&file.pool.sources_dir);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|source| ConfigError::Read {
                path: dir.clone(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(invalid(format!(
                "pool.sources_dir {} holds no source files (NAME.toml)",
                dir.display()
            )));
        }
        // One source's file is that source's failure: a typo in one ConfigMap entry
        // must not stop the pool's other sources.
        let (mut sources, mut failed) = (Vec::new(), Vec::new());
        for f in &files {
            match load_source(&file, f) {
                Ok(source) => sources.push(source),
                Err(e) => failed.push(FailedSource::of_file(f, e.to_string())),
            }
        }
        for (name, why) in conflicts(&sources) {
            failed.push(FailedSource {
                name: name.clone(),
                error: why,
            });
            sources.retain(|s| s.name != name);
        }
        if sources.is_empty() {
            let why: Vec<String> = failed
                .iter()
                .map(|f| format!("{}: {}", f.name, f.error))
                .collect();
            return Err(invalid(format!(
                "no source of the pool loads: {}",
                why.join("; ")
            )));
        }
        // Its secrets (the console's tokens) resolved as every source's are.
        let mut monitor = toml::Value::Table(file.monitor.clone());
        crate::secret::resolve_references(&mut monitor)
            .map_err(|e| invalid(format!("monitor: {e}")))?;
        let monitor: crate::monitor::MonitorConfig =
            monitor.try_into().map_err(|e: toml::de::Error| {
                invalid(format!("monitor: {}", crate::config::toml_error(None, &e)))
            })?;
        monitor
            .check()
            .map_err(|e| invalid(format!("monitor: {e}")))?;
        // Checked by every source's load, with its secrets resolved there too.
        let kafka = sources[0].config.kafka.clone();
        Ok(Self {
            path: path.to_path_buf(),
            settings: file.pool,
            monitor,
            kafka,
            sources,
            failed,
        })
    }

    /// The source called `name`.
    pub fn source(&self, name: &str) -> Result<&PoolSource, String> {
        self.sources.iter().find(|s| s.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.sources.iter().map(|s| s.name.as_str()).collect();
            format!(
                "no source {name:?} in pool {}: its sources are {}",
                self.path.display(),
                names.join(", ")
            )
        })
    }
}

impl PoolConfig {
    fn check(&self) -> Result<(), String> {
        if self.group_id.trim().is_empty() {
            return Err("pool.group_id is empty".into());
        }
        crate::kafka::check_topic(&format!("{}x", self.lock_topic_prefix))
            .map_err(|e| format!("pool.lock_topic_prefix: {e}"))?;
        if self.session_timeout_ms < 1000 {
            return Err("pool.session_timeout_ms must be at least 1000".into());
        }
        Ok(())
    }

    /// The name this instance goes by.
    pub fn instance_name(&self) -> String {
        crate::ha::HaConfig {
            instance: self.instance.clone(),
            ..Default::default()
        }
        .instance_name()
    }
}

/// A source file with the pool's shared sections put in, parsed and checked as any
/// config, plus what a pool needs of it.
fn load_source(pool: &PoolFile, path: &Path) -> Result<PoolSource, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_string();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(invalid(format!(
            "a source's file name is its name: {name:?} must be letters, digits, '-', '_' or '.'"
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut table: toml::Table = toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        message: crate::config::toml_error(Some(&text), &e),
    })?;
    for key in SHARED {
        if table.contains_key(key) {
            return Err(invalid(format!(
                "[{key}] belongs in the pool file, shared by every source: remove it here"
            )));
        }
    }
    if table.contains_key("ha") || table.contains_key("pool") {
        return Err(invalid(
            "a pool's source has no [ha] or [pool]: the pool's group decides which instance leads it".into(),
        ));
    }
    table.insert("kafka".into(), pool.kafka.clone().into());
    table.insert("monitor".into(), pool.monitor.clone().into());
    let checkpoint = table
        .entry("checkpoint")
        .or_insert_with(|| toml::Table::new().into());
    if let Some(checkpoint) = checkpoint.as_table_mut() {
        if !checkpoint.contains_key("dir") {
            let dir = pool.pool.state_dir.join(&name);
            checkpoint.insert("dir".into(), dir.display().to_string().into());
        }
    }
    let merged = toml::to_string(&table).map_err(|e| invalid(e.to_string()))?;
    let mut config = Config::parse(&merged, path)?;
    config.pool_source = Some(name.clone());
    config.pool_lock = Some(crate::config::FleetLock {
        group: pool.pool.group_id.clone(),
        topic: format!("{}{name}", pool.pool.lock_topic_prefix),
    });
    if !config.delivery.exactly_once() {
        return Err(invalid(
            "a pool's source needs delivery.mode = \"exactly-once\": its position must live on Kafka (the commit marker), where whichever instance leads it next finds it, and the transactional producer fences the one that led it before".into(),
        ));
    }
    Ok(PoolSource {
        lock_topic: format!("{}{name}", pool.pool.lock_topic_prefix),
        name,
        config,
        text: merged,
    })
}

/// Two sources must never share what identifies a stream's progress, nor a replica's
/// place on one server (one `server_id` on one server: each connection evicts the
/// other's, forever). Every source of a clashing pair is named, with why.
fn parks(config: &crate::config::Config) -> bool {
    config.outbox.on_invalid == crate::outbox::OnInvalid::Park
}

fn conflicts(sources: &[PoolSource]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, a) in sources.iter().enumerate() {
        for b in &sources[i + 1..] {
            let (ca, cb) = (&a.config, &b.config);
            let what = if ca.delivery.transactional_id == cb.delivery.transactional_id {
                "delivery.transactional_id".to_string()
            } else if ca.checkpoint.dir == cb.checkpoint.dir {
                "checkpoint.dir".to_string()
            } else if parks(ca) && parks(cb) && ca.outbox.parking.topic == cb.outbox.parking.topic {
                // The topic is the set of a source's parked aggregates.
                format!("outbox.parking.topic ({})", ca.outbox.parking.topic)
            } else if (&ca.source.host, ca.source.port, ca.source.server_id)
                == (&cb.source.host, cb.source.port, cb.source.server_id)
            {
                format!(
                    "source.server_id ({}) on the same server {}:{}",
                    ca.source.server_id, ca.source.host, ca.source.port
                )
            } else {
                continue;
            };
            let why = format!(
                "sources {} and {} have the same {what}: each source needs its own; neither runs until one changes",
                a.name, b.name
            );
            for name in [&a.name, &b.name] {
                if !out.iter().any(|(n, _)| n == name) {
                    out.push((name.clone(), why.clone()));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = r#"
[source]
user = "cdc"
server_id = SERVER
[outbox]
tables = ["shop.outbox"]
[delivery]
mode = "exactly-once"
transactional_id = "TXID"
"#;

    fn pool_with(dir: &Path, pool_extra: &str, sources: &[(&str, String)]) -> PathBuf {
        std::fs::create_dir_all(dir.join("sources.d")).unwrap();
        for (name, text) in sources {
            std::fs::write(dir.join("sources.d").join(format!("{name}.toml")), text).unwrap();
        }
        let path = dir.join("pool.toml");
        std::fs::write(
            &path,
            format!(
                "[pool]\nsources_dir = \"sources.d\"\nstate_dir = \"{}\"\n{pool_extra}\n[kafka]\nbootstrap_servers = \"k:9092\"\n[monitor]\nlisten = \"127.0.0.1:9300\"\n",
                dir.join("state").display()
            ),
        )
        .unwrap();
        path
    }

    fn source(server: u32, txid: &str) -> String {
        SOURCE
            .replace("SERVER", &server.to_string())
            .replace("TXID", txid)
    }

    #[test]
    fn every_source_gets_the_shared_sections_and_its_own_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = pool_with(
            dir.path(),
            "",
            &[
                ("orders", source(1, "orders")),
                ("billing", source(2, "billing")),
            ],
        );
        assert!(Pool::is_pool_file(&path));
        let pool = Pool::load(&path).unwrap();
        let names: Vec<&str> = pool.sources.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["billing", "orders"]);
        let orders = &pool.source("orders").unwrap().config;
        assert_eq!(orders.kafka.bootstrap_servers, "k:9092");
        assert_eq!(orders.monitor.listen, "127.0.0.1:9300");
        assert_eq!(orders.checkpoint.dir, dir.path().join("state/orders"));
        assert_eq!(
            pool.source("orders").unwrap().lock_topic,
            "outbox-router.pool.orders"
        );
        assert!(pool.source("nope").unwrap_err().contains("billing, orders"));
    }

    #[test]
    fn a_source_that_could_collide_or_lose_its_position_fails_alone() {
        let cases = [
            (
                vec![("a", source(1, "same")), ("b", source(2, "same"))],
                vec!["a", "b"],
                "delivery.transactional_id",
            ),
            (
                // The parking topic is a source's set of parked aggregates.
                vec![
                    (
                        "a",
                        source(1, "a").replace("[outbox]", "[outbox]\non_invalid = \"park\""),
                    ),
                    (
                        "b",
                        source(2, "b").replace("[outbox]", "[outbox]\non_invalid = \"park\""),
                    ),
                ],
                vec!["a", "b"],
                "outbox.parking.topic (outbox.parked)",
            ),
            (
                // One server, one replica id: each connection would evict the other's.
                vec![("a", source(1, "a")), ("b", source(1, "b"))],
                vec!["a", "b"],
                "source.server_id (1) on the same server",
            ),
            (
                vec![(
                    "a",
                    source(1, "a").replace(
                        "[delivery]\nmode = \"exactly-once\"\ntransactional_id = \"a\"",
                        "",
                    ),
                )],
                vec!["a"],
                "exactly-once",
            ),
            (
                vec![(
                    "a",
                    format!("{}\n[kafka]\nbootstrap_servers = \"x\"\n", source(1, "a")),
                )],
                vec!["a"],
                "[kafka] belongs in the pool file",
            ),
            (
                vec![("a", format!("{}\n[ha]\nenabled = true\n", source(1, "a")))],
                vec!["a"],
                "[ha]",
            ),
            (
                vec![("bad name", source(1, "a"))],
                vec!["bad name"],
                "file name is its name",
            ),
            (
                // A typo on a line holding an inline secret: the line is not quoted.
                vec![(
                    "typo",
                    format!("{}\n[x]\npassword = \"canary-secret\n", source(1, "a")),
                )],
                vec!["typo"],
                "line ",
            ),
        ];
        for (sources, failing, expected) in cases {
            let dir = tempfile::tempdir().unwrap();
            let mut all = sources.clone();
            all.push(("ok", source(9, "ok")));
            let path = pool_with(dir.path(), "", &all);
            let pool = Pool::load(&path).unwrap();
            let running: Vec<&str> = pool.sources.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(running, ["ok"], "{expected}: {:?}", pool.failed);
            let mut names: Vec<&str> = pool.failed.iter().map(|f| f.name.as_str()).collect();
            names.sort();
            assert_eq!(names, failing, "{expected}");
            for f in &pool.failed {
                assert!(f.error.contains(expected), "{expected}: {}", f.error);
                assert!(!f.error.contains("canary"), "a secret in: {}", f.error);
            }
            // Nothing that loads: the pool does not start, naming each.
            let dir = tempfile::tempdir().unwrap();
            let path = pool_with(dir.path(), "", &sources);
            let err = Pool::load(&path).unwrap_err().to_string();
            assert!(err.contains("no source of the pool loads"), "{err}");
            assert!(!err.contains("canary"), "{err}");
        }
    }

    /// `config/pool/` loads as shipped, and docs/many-databases.md lists exactly the
    /// keys `[pool]` accepts (serde names them when refusing an unknown one).
    #[test]
    fn the_example_pool_loads_and_the_docs_list_every_pool_key() {
        std::env::set_var("ORDERS_DB_PASSWORD", "x");
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let pool = Pool::load(&root.join("config/pool/pool.toml")).unwrap();
        let names: Vec<&str> = pool.sources.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["billing", "orders"]);
        assert!(pool
            .sources
            .iter()
            .all(|s| s.config.inline_secrets.is_empty()));
        let err = toml::from_str::<PoolConfig>("no_such_key = 1")
            .unwrap_err()
            .to_string();
        let accepted: std::collections::BTreeSet<String> = err
            .split("expected one of ")
            .nth(1)
            .unwrap_or_else(|| panic!("{err}"))
            .split(',')
            .map(|k| k.trim().trim_matches('`').to_string())
            .collect();
        let docs = std::fs::read_to_string(root.join("docs/many-databases.md")).unwrap();
        let table = docs
            .split("### `[pool]`")
            .nth(1)
            .unwrap()
            .split("\n## ")
            .next()
            .unwrap();
        let documented: std::collections::BTreeSet<String> = table
            .lines()
            .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
            .map(str::to_string)
            .collect();
        assert_eq!(documented, accepted);
    }
}
