//! The configuration file: the stages' sections composed, loaded from TOML and checked.
//! Each section's type lives beside the stage it configures (`source/config.rs`,
//! `sink/config.rs`, …); unknown keys are rejected; every key is documented there and in
//! `config/example.toml`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

mod ops;
#[cfg(test)]
mod reference;

pub use ops::OpsConfig;

use crate::checkpoint::CheckpointConfig;
use crate::ha::HaConfig;
use crate::kafka::KafkaConfig;
use crate::monitor::MonitorConfig;
use crate::outbox::OutboxConfig;
use crate::route::{RouteConfig, ValueConfig};
use crate::sink::{ClaimCheckConfig, DeliveryConfig};
use crate::source::SourceConfig;

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is invalid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The whole configuration file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The MySQL / MariaDB server to read the binlog from.
    pub source: SourceConfig,
    /// Which tables are outboxes and how their columns map to events.
    pub outbox: OutboxConfig,
    /// Topic, key and header rules.
    #[serde(default)]
    pub route: RouteConfig,
    /// How record values are encoded (as stored, or Avro).
    #[serde(default)]
    pub value: ValueConfig,
    /// Kafka producer settings.
    #[serde(default)]
    pub kafka: KafkaConfig,
    /// At-least-once (default) or exactly-once delivery.
    #[serde(default)]
    pub delivery: DeliveryConfig,
    /// Large values to an S3-compatible bucket, a reference in the record.
    #[serde(default)]
    pub claim_check: Option<ClaimCheckConfig>,
    /// Where and how often progress is stored.
    pub checkpoint: CheckpointConfig,
    /// Hot standby: several instances, one streams.
    #[serde(default)]
    pub ha: HaConfig,
    /// In-flight limits and shutdown deadline.
    #[serde(default)]
    pub pipeline: PipelineConfig,
    /// Metrics / health endpoint and alert thresholds.
    #[serde(default)]
    pub monitor: MonitorConfig,
    /// Operator commands: prune's user, the audit trail, the replay header.
    #[serde(default)]
    pub ops: OpsConfig,
    /// Keys whose secret is written in the file rather than referenced
    /// (`${env:…}` / `${file:…}`): warned about by `validate` and `run`.
    #[serde(skip)]
    pub inline_secrets: Vec<String>,
    /// A pool's source: its name (its status is at `/sources/NAME/status` of the
    /// pool's endpoint).
    #[serde(skip)]
    pub pool_source: Option<String>,
    /// A pool's source: the pool's group and the lock topic whose owner leads it.
    #[serde(skip)]
    pub pool_lock: Option<FleetLock>,
}

/// Where the instances of a fleet (a standby pair, a pool's source) meet: the consumer
/// group, and the one-partition topic whose owner in it leads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetLock {
    pub group: String,
    pub topic: String,
}

impl Config {
    /// The lock of the fleet this instance is one of (a standby pair's `[ha]`, a pool's
    /// source), if it is one.
    pub fn fleet_lock(&self) -> Option<FleetLock> {
        match (&self.pool_lock, self.ha.enabled) {
            (Some(lock), _) => Some(lock.clone()),
            (None, true) => Some(FleetLock {
                group: self.ha.group(&self.delivery.transactional_id),
                topic: self.ha.lock_topic.clone(),
            }),
            (None, false) => None,
        }
    }

    /// The fleet's lock topic: where it notes which checkpoint topic holds its markers.
    pub fn fleet_lock_topic(&self) -> Option<&str> {
        match (&self.pool_lock, self.ha.enabled) {
            (Some(lock), _) => Some(&lock.topic),
            (None, true) => Some(&self.ha.lock_topic),
            (None, false) => None,
        }
    }

    /// The source's name in the fleet (the console, the status and control topics): a
    /// pool's source's, else `monitor.name`, else `delivery.transactional_id`, else
    /// `checkpoint.name`, else `router`.
    pub fn console_name(&self) -> String {
        [
            self.pool_source.as_deref().unwrap_or(""),
            &self.monitor.name,
            &self.delivery.transactional_id,
            self.checkpoint.name.as_deref().unwrap_or(""),
        ]
        .into_iter()
        .map(str::trim)
        .find(|n| !n.is_empty())
        .unwrap_or("router")
        .to_string()
    }

    /// The path of this router's own `/status` on its endpoint.
    pub fn status_path(&self) -> String {
        match &self.pool_source {
            Some(name) => format!("/sources/{name}/status"),
            None => "/status".into(),
        }
    }
}

/// A TOML error as the router says it: where (line and column of `text`) and what —
/// never the line's text nor a quoted value, either of which can be a secret written
/// into the file (or the value a `${env:…}` reference resolved to). toml's own
/// rendering quotes the offending line.
pub fn toml_error(text: Option<&str>, e: &toml::de::Error) -> String {
    let what = redact_quoted(e.message());
    let at = text.zip(e.span()).and_then(|(text, span)| {
        let before = text.get(..span.start)?;
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before.len() - line_start + 1;
        // The key the error is at (what stands before `=` on its line): a name, never a
        // value.
        let key = before[line_start..]
            .split_once('=')
            .map(|(key, _)| key.trim())
            .filter(|key| !key.is_empty() && !key.contains('"'))
            .map(|key| format!(" (key {key})"))
            .unwrap_or_default();
        Some(format!("line {line}, column {column}{key}: "))
    });
    format!("{}{what}", at.unwrap_or_default())
}

/// `s` with the text between double quotes left out (serde quotes values, and names
/// fields with backticks).
fn redact_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut quoted = false;
    for c in s.chars() {
        if c == '"' {
            if !quoted {
                out.push_str("\"…");
            } else {
                out.push('"');
            }
            quoted = !quoted;
        } else if !quoted {
            out.push(c);
        }
    }
    out
}

// The pipeline is the wiring, not a stage: its limits are part of the composition.
/// Pipeline limits.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// Records handed to Kafka but not yet acknowledged; reading pauses above it.
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    /// Bytes (keys, values, headers) of those records; reading pauses above it, inside a
    /// large transaction too.
    #[serde(
        default = "default_max_in_flight_bytes",
        deserialize_with = "crate::units::bytes"
    )]
    pub max_in_flight_bytes: usize,
    /// Seconds to wait for in-flight acknowledgements on shutdown.
    #[serde(
        default = "default_shutdown_timeout_secs",
        deserialize_with = "crate::units::secs"
    )]
    pub shutdown_timeout_secs: u64,
}

impl PipelineConfig {
    /// What is wrong with these settings, if anything.
    pub fn check(&self) -> Result<(), String> {
        if self.max_in_flight == 0 {
            return Err("pipeline.max_in_flight must be at least 1".into());
        }
        if self.max_in_flight_bytes == 0 {
            return Err("pipeline.max_in_flight_bytes must be at least 1".into());
        }
        Ok(())
    }
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            max_in_flight: default_max_in_flight(),
            max_in_flight_bytes: default_max_in_flight_bytes(),
            shutdown_timeout_secs: default_shutdown_timeout_secs(),
        }
    }
}

fn default_max_in_flight() -> usize {
    // Fuller per-partition batches under a backlog (librdkafka sends one partition's
    // batch per produce request, and the broker pays per request): on 100 topics × 3
    // partitions, 50 000 → 200 000 took the broker's CPU per event from 1.32–1.43× the
    // raw producer's to 0.84–1.09×, for 125–144 MB peak RSS instead of 81–90
    // (BENCHMARKS, round 19). Caught up, few records are in flight whatever the bound.
    200_000
}

fn default_max_in_flight_bytes() -> usize {
    64 << 20
}

fn default_shutdown_timeout_secs() -> u64 {
    30
}

impl Config {
    /// Reads, parses and checks a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and checks config text; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let parse_error = |e: toml::de::Error| ConfigError::Parse {
            path: path.to_path_buf(),
            message: toml_error(Some(text), &e),
        };
        // Shape first, from the text: its messages point at lines and columns.
        toml::from_str::<Config>(text).map_err(parse_error)?;
        let mut tree: toml::Value = toml::from_str(text).map_err(parse_error)?;
        // After the references are resolved there is no text to point into.
        let parse_error = |e: toml::de::Error| ConfigError::Parse {
            path: path.to_path_buf(),
            message: toml_error(None, &e),
        };
        let inline_secrets = crate::secret::inline_secrets(&tree);
        crate::secret::resolve_references(&mut tree).map_err(|e| ConfigError::Invalid {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let mut config: Config = tree.try_into().map_err(parse_error)?;
        config.inline_secrets = inline_secrets;
        let timeout_ms = crate::kafka::transaction_timeout_ms(&config.kafka);
        config.delivery.fit_to_transaction_timeout(timeout_ms);
        config.check().map_err(|message| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        })?;
        Ok(config)
    }

    fn check(&self) -> Result<(), String> {
        if self.outbox.tables.is_empty() {
            return Err(
                "outbox.tables is empty: name at least one table as \"database.table\"".into(),
            );
        }
        for t in &self.outbox.tables {
            crate::position::TableName::parse(t).map_err(|e| format!("outbox.tables: {e}"))?;
        }
        self.source.check()?;
        self.pipeline.check()?;
        crate::kafka::check(&self.kafka)?;
        self.delivery.check()?;
        self.delivery
            .check_against_transaction_timeout(crate::kafka::transaction_timeout_ms(&self.kafka))?;
        self.ha.check(self.delivery.exactly_once())?;
        if self.delivery.exactly_once() && self.checkpoint.name.is_some() {
            return Err("checkpoint.name is for at-least-once mode: exactly-once mode records its first start under delivery.transactional_id; remove checkpoint.name".into());
        }
        if self
            .checkpoint
            .name
            .as_deref()
            .is_some_and(|n| n.trim().is_empty())
        {
            return Err("checkpoint.name is empty: name this router (e.g. \"orders-router\"), or remove the key".into());
        }
        self.monitor.check()?;
        crate::route::check_value(&self.value)?;
        if let Some(claim_check) = &self.claim_check {
            claim_check.check(self.kafka.max_message_bytes())?;
        }
        // The dead-letter topic is the outbox's setting, checked by the route's rules.
        crate::kafka::check_topic(&self.outbox.dead_letter_topic)
            .map_err(|e| format!("outbox.dead_letter_topic: {e}"))?;
        crate::kafka::check_topic(&self.outbox.parking.topic)
            .map_err(|e| format!("outbox.parking.topic: {e}"))?;
        if self.outbox.parking.max_aggregates == 0 || self.outbox.parking.max_events == 0 {
            return Err("outbox.parking.max_aggregates and max_events must be at least 1".into());
        }
        self.rules()?;
        Ok(())
    }
}

impl Config {
    /// The outbox table names / patterns, compiled.
    pub fn table_patterns(&self) -> Vec<crate::pattern::Pattern> {
        self.outbox.table_patterns()
    }

    /// The event rules: Debezium options when given, else the native columns and topic.
    /// The same router as a shadow (`run --shadow`): every topic, dead letters and parked
    /// events included,
    /// under `route.shadow_prefix`; its own checkpoint store (`<checkpoint.dir>-shadow`)
    /// and transactional id, so the live router later starts from nothing of the
    /// shadow's and the shadow's progress never moves the live one.
    pub fn into_shadow(mut self) -> Self {
        let prefix = self.route.shadow_prefix.clone();
        self.route.shadow = true;
        self.outbox.dead_letter_topic.insert_str(0, &prefix);
        self.outbox.parking.topic.insert_str(0, &prefix);
        let mut dir = self.checkpoint.dir.clone().into_os_string();
        dir.push("-shadow");
        self.checkpoint.dir = dir.into();
        if !self.delivery.transactional_id.is_empty() {
            self.delivery.transactional_id.push_str("-shadow");
        }
        self
    }

    pub fn rules(&self) -> Result<crate::outbox::Rules, String> {
        match &self.outbox.event_router {
            Some(options) => crate::outbox::Rules::from_debezium(options)
                .map_err(|e| format!("outbox.event_router: {e}")),
            None => crate::outbox::Rules::from_columns(&self.outbox.columns, &self.route.topic)
                .map_err(|e| format!("route.topic: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::Secret;
    use crate::source::StartFrom;

    /// The smallest valid configuration.
    pub(super) const MINIMAL: &str = r#"
[source]
user = "cdc"
server_id = 7
[outbox]
tables = ["shop.outbox"]
[checkpoint]
dir = "/tmp/x"
"#;

    #[test]
    fn the_example_config_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/example.toml");
        let config = Config::load(&path).unwrap();
        assert!(
            config.inline_secrets.is_empty(),
            "{:?}",
            config.inline_secrets
        );
    }

    #[test]
    fn minimal_config_gets_debezium_defaults() {
        let c = Config::parse(MINIMAL, Path::new("t.toml")).unwrap();
        assert_eq!(c.route.topic, "outbox.event.${routedByValue}");
        assert_eq!(c.outbox.columns.event_id, "id");
        assert_eq!(c.source.start, StartFrom::Latest);
    }

    #[test]
    fn a_config_error_names_line_and_key_never_a_value() {
        let cases = [
            // A string left open on a line holding a secret.
            MINIMAL.replace("user = \"cdc\"", "user = \"cdc\"\npassword = \"canary-1"),
            // A secret in a key of another type.
            MINIMAL.replace("server_id = 7", "server_id = \"canary-2\""),
        ];
        for (text, key) in cases.iter().zip(["password", "server_id"]) {
            let err = Config::parse(text, Path::new("t.toml"))
                .unwrap_err()
                .to_string();
            assert!(!err.contains("canary"), "{err}");
            assert!(err.contains("t.toml") && err.contains("line "), "{err}");
            assert!(err.contains(key), "{err}");
        }
    }

    #[test]
    fn unknown_key_is_rejected_with_its_name() {
        let text = format!("{MINIMAL}\nbogus = 1\n");
        let err = Config::parse(&text, Path::new("t.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("bogus"), "{err}");
    }

    #[test]
    fn a_database_password_is_one_reference_read_when_connecting() {
        let with = |keys: &str| {
            let text = MINIMAL.replace("user = \"cdc\"", &format!("user = \"cdc\"\n{keys}"));
            Config::parse(&text, Path::new("t.toml"))
        };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "from-file\n").unwrap();
        std::env::set_var("CONFIG_TEST_DB_PASSWORD", "from-env");
        // The reference and its two shorthands resolve alike.
        for (keys, expected) in [
            ("password = \"${env:CONFIG_TEST_DB_PASSWORD}\"", "from-env"),
            ("password_env = \"CONFIG_TEST_DB_PASSWORD\"", "from-env"),
            (
                &format!("password = \"${{file:{}}}\"", file.display()),
                "from-file",
            ),
            (
                &format!("password_file = \"{}\"", file.display()),
                "from-file",
            ),
        ] {
            let config = with(keys).unwrap();
            let password = config.source.password().unwrap().unwrap();
            assert_eq!(password.expose(), expected, "{keys}");
            assert_eq!(
                format!("{:?}", config.source.password),
                if keys.starts_with("password =") {
                    "Some(***)"
                } else {
                    "None"
                }
            );
        }
        // Unset: the file loads (commands that only read local state run); connecting
        // names the variable and never a value.
        for keys in [
            "password = \"${env:CONFIG_TEST_UNSET_PASSWORD}\"",
            "password_env = \"CONFIG_TEST_UNSET_PASSWORD\"",
        ] {
            let config = with(keys).unwrap();
            let err = config.source.password().unwrap_err().to_string();
            assert!(
                err.contains("CONFIG_TEST_UNSET_PASSWORD") && err.contains("source.password"),
                "{err}"
            );
        }
        let err = with("password = \"${env:A}\"\npassword_env = \"A\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("set only one of source.password"), "{err}");
    }

    #[test]
    fn secret_is_not_printed() {
        assert_eq!(format!("{:?}", Secret::new("hunter2")), "***");
    }

    #[test]
    fn snapshot_is_a_name_or_a_watermark() {
        use crate::source::SnapshotMode;
        let with = |snapshot: &str| {
            let text = MINIMAL.replace(
                "server_id = 7",
                &format!("server_id = 7\nsnapshot = {snapshot}"),
            );
            Config::parse(&text, Path::new("t.toml")).map(|c| c.source.snapshot)
        };
        assert_eq!(with("\"initial\"").unwrap(), SnapshotMode::Initial);
        assert_eq!(
            with("{ watermark = \"id > 1234567\" }").unwrap(),
            SnapshotMode::Watermark("id > 1234567".into())
        );
        assert!(with("\"sometimes\"")
            .unwrap_err()
            .to_string()
            .contains("watermark"));
        assert!(with("{ watermark = \" \" }").is_err());
    }

    /// A heartbeat period no server accepts (and, near u64::MAX seconds, one that
    /// overflowed into a panic when the read timeout was derived from it) is refused
    /// with its name; the largest one the server takes still loads.
    #[test]
    fn heartbeat_secs_is_bounded_by_what_a_server_accepts() {
        let with = |secs: &str| {
            let text = MINIMAL.replace(
                "server_id = 7",
                &format!("server_id = 7\nheartbeat_secs = {secs}"),
            );
            Config::parse(&text, Path::new("t.toml")).map(|c| c.source.heartbeat())
        };
        assert_eq!(
            with("4294967").unwrap(),
            std::time::Duration::from_secs(4_294_967)
        );
        for too_long in ["4294968", "9223372036854775807"] {
            let err = with(too_long).unwrap_err().to_string();
            assert!(err.contains("source.heartbeat_secs"), "{too_long}: {err}");
        }
    }

    /// Exactly-once transactions allowed to stay open longer than half the producer's
    /// transaction.timeout.ms are aborted by the coordinator, every one of a backlog's:
    /// refused at load, naming both settings.
    #[test]
    fn exactly_once_transactions_must_fit_the_transaction_timeout() {
        let eos = |delivery: &str, kafka: &str| {
            let text = format!(
                "{MINIMAL}[delivery]\nmode = \"exactly-once\"\ntransactional_id = \"t\"\n{delivery}\n[kafka]\nbootstrap_servers = \"x:9092\"\n{kafka}\n"
            );
            Config::parse(&text, Path::new("t.toml")).map(|_| ())
        };
        let err = eos("commit_backlog_ms = \"5m\"", "")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("delivery.commit_backlog_ms") && err.contains("transaction.timeout.ms"),
            "{err}"
        );
        assert!(eos("", "").is_ok(), "the defaults fit");
        let short = "properties = { \"transaction.timeout.ms\" = \"1500\" }";
        let err = eos("commit_backlog_ms = 1000", short)
            .unwrap_err()
            .to_string();
        assert!(err.contains("(1500 ms)"), "{err}");
        assert!(eos("commit_backlog_ms = 700", short).is_ok());
        let long = "properties = { \"transaction.timeout.ms\" = \"900000\" }";
        assert!(eos("commit_backlog_ms = \"5m\"", long).is_ok());
    }

    /// Unset, a backlog's transaction lasts 5 s — or half a shorter
    /// `transaction.timeout.ms`, which a user may have set for other reasons; set, the
    /// value is kept (and refused when it does not fit, above).
    #[test]
    fn the_backlog_commit_default_fits_the_transaction_timeout() {
        let backlog_ms = |delivery: &str, kafka: &str| {
            let text = format!(
                "{MINIMAL}[delivery]\nmode = \"exactly-once\"\ntransactional_id = \"t\"\n{delivery}\n[kafka]\nbootstrap_servers = \"x:9092\"\n{kafka}\n"
            );
            Config::parse(&text, Path::new("t.toml"))
                .expect("valid")
                .delivery
                .commit_backlog_ms()
        };
        assert_eq!(backlog_ms("", ""), 5_000);
        let short = "properties = { \"message.timeout.ms\" = \"3000\" }";
        assert_eq!(backlog_ms("", short), 1_500);
        assert_eq!(backlog_ms("commit_backlog_ms = 700", short), 700);
    }
}
