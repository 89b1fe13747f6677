//! Kafka plumbing beside the stages: the `[kafka]` section, client configuration, the
//! admin client (topics created and looked up), the consumers that read topics back
//! (newest record per key of a compacted topic, a topic from a time to its end) and
//! the probe that tells whether a cluster is reachable. The sink, the standby lock and
//! the operator commands each build on it; it knows nothing of them.

mod admin;
mod config;
mod consumer_markers;
mod consumer_scan;
mod error;
mod probe;
mod reader_context;
mod tail;
mod topic_name;

use rdkafka::config::ClientConfig;

pub use admin::TopicCreator;
pub use config::{KafkaConfig, TopicRule, TopicsConfig};
pub use consumer_markers::{last, newest, newest_of_keys, Newest};
pub use consumer_scan::{scan, Scanned};
pub use error::KafkaClientError;
pub use probe::{check_properties, check_reachable, client_features, Unreachable};
pub use reader_context::Reader;
pub use tail::{tail, Tailed};
pub use topic_name::check_topic;

/// Defaults chosen for an outbox stream; every one can be overridden in config.
const DEFAULTS: &[(&str, &str)] = &[
    // Kafka's Java producer (and so Debezium) picks a key's partition by murmur2; with
    // librdkafka's CRC32 default an aggregate would move partitions on a switch.
    ("partitioner", "murmur2_random"),
    ("linger.ms", "5"),
    ("compression.type", "lz4"),
    // Beyond librdkafka's internal retries the pipeline restarts from the checkpoint.
    ("message.timeout.ms", "120000"),
    // Queue depth and broker round trips for /metrics; parsing costs little at 10 s.
    ("statistics.interval.ms", "10000"),
];

/// The producer configuration: defaults, the user's properties, then what the contract fixes.
pub fn client_config(cfg: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    for (k, v) in DEFAULTS {
        c.set(*k, *v);
    }
    for (k, v) in &cfg.properties {
        c.set(k, v);
    }
    c.set("bootstrap.servers", &cfg.bootstrap_servers);
    // Per-aggregate order and no loss: idempotence keeps retries from reordering.
    c.set("enable.idempotence", "true");
    c.set("acks", "all");
    c
}

/// The exactly-once producer's `transaction.timeout.ms` as configured: the property,
/// else `message.timeout.ms` (librdkafka requires message.timeout.ms <=
/// transaction.timeout.ms).
pub fn transaction_timeout_ms(cfg: &KafkaConfig) -> u64 {
    let client = client_config(cfg);
    client
        .get("transaction.timeout.ms")
        .or_else(|| client.get("message.timeout.ms"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(300_000)
}

/// The producer settings of `[kafka]` for a transactional producer of this id (the
/// router's exactly-once sink, and the benchmark's raw transactional producer beside it).
pub fn transactional_config(cfg: &KafkaConfig, transactional_id: &str) -> ClientConfig {
    let mut client = client_config(cfg);
    client.set("transactional.id", transactional_id).set(
        "transaction.timeout.ms",
        transaction_timeout_ms(cfg).to_string(),
    );
    // Back-to-back transactions: the next one's AddPartitionsToTxn meets
    // CONCURRENT_TRANSACTIONS until the last one's markers are written, and librdkafka
    // asks again after retry.backoff.ms (100) — a floor of 100 ms per transaction.
    // Java's producer retries that request after 20 ms (KAFKA-5477); other retries
    // still back off exponentially to retry.backoff.max.ms.
    if !cfg.properties.contains_key("retry.backoff.ms") {
        client.set("retry.backoff.ms", "5");
    }
    // `init_transactions` needs a connected broker that is not the bootstrap one; with
    // sparse connections librdkafka connects it only when a timer next picks it, and
    // its PID state machine, finding none, sleeps a fixed 500 ms: a start or standby
    // takeover paid 50 or 500 ms where 6 suffice (bench/eos-start). Connecting to every
    // broker at once costs a connection per broker, which a router writing to many
    // topics opens anyway.
    if !cfg.properties.contains_key("enable.sparse.connections") {
        client.set("enable.sparse.connections", "false");
    }
    client
}

/// What is wrong with `[kafka]`, if anything: a property the router fixes, or one
/// librdkafka refuses. Asked at load, so no later client creation prints a property's
/// value (librdkafka's error text carries it, and it may be a secret resolved from
/// `${env:}` or `${file:}`).
pub fn check(cfg: &KafkaConfig) -> Result<(), String> {
    for fixed in ["acks", "enable.idempotence", "bootstrap.servers"] {
        if cfg.properties.contains_key(fixed) {
            return Err(format!(
                "kafka.properties.{fixed} cannot be set: the router fixes it (bootstrap.servers: use kafka.bootstrap_servers)"
            ));
        }
    }
    client_config(cfg)
        .create_native_config()
        .map(drop)
        .map_err(|e| {
            format!("{} (librdkafka's names: https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md; Java-only properties such as sasl.jaas.config have librdkafka equivalents, e.g. sasl.username / sasl.password)", without_values(&e))
        })
}

/// librdkafka's objection to one property on its own (unknown, Java-only, a bad value),
/// its value hidden; `None` when librdkafka takes it.
pub fn property_problem(key: &str, value: &str) -> Option<String> {
    ClientConfig::new()
        .set(key, value)
        .create_native_config()
        .err()
        .map(|e| without_values(&e))
}

/// A librdkafka error as text, any configuration value it carries hidden.
pub fn without_values(e: &rdkafka::error::KafkaError) -> String {
    match e {
        rdkafka::error::KafkaError::ClientConfig(_, desc, key, value) => {
            let desc = match value.is_empty() {
                true => desc.clone(),
                false => desc.replace(value.as_str(), "(value hidden)"),
            };
            format!("kafka.properties.\"{key}\": {desc}")
        }
        other => other.to_string(),
    }
}

/// A consumer's configuration: the user's properties (security, …) and the brokers.
pub fn consumer_config(cfg: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    for (k, v) in &cfg.properties {
        c.set(k, v);
    }
    c.set("bootstrap.servers", &cfg.bootstrap_servers);
    // Producer properties among them would each log a warning.
    c.set("log_level", "3");
    c
}

/// Drops a librdkafka client on a thread of its own: its destroy waits for the client's
/// threads (about 100 ms each here), and a start that looks a topic up or reads an
/// empty one would wait for every client it used.
pub(crate) fn close_in_background<T: Send + 'static>(client: T) {
    std::thread::spawn(move || drop(client));
}
