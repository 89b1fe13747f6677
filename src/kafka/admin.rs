//! Before a topic's first record: a missing topic is created through the admin client,
//! with partitions, replication and configs from the first matching rule (else the
//! broker's defaults), so production brokers can keep `auto.create.topics.enable=false`.
//! With creation off (`kafka.topics.create = false`) the topic is looked up instead, so
//! a missing one stops the router at once, naming it, rather than after a full
//! `message.timeout.ms` on every restart.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;

use super::{KafkaClientError, KafkaConfig, TopicRule};
use crate::pattern::Pattern;

/// Creates (or, with creation off, looks up) topics once each.
pub struct TopicCreator {
    admin: Arc<AdminClient<DefaultClientContext>>,
    rules: Vec<(Pattern, TopicRule)>,
    known: Mutex<HashSet<String>>,
    create: bool,
}

impl Drop for TopicCreator {
    /// The admin client's last handle closes in the background (`close_in_background`).
    fn drop(&mut self) {
        super::close_in_background(self.admin.clone());
    }
}

/// Errors of topic creation that no retry fixes: the operator must act.
fn needs_operator(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode::*;
    matches!(
        code,
        TopicAuthorizationFailed
            | ClusterAuthorizationFailed
            | PolicyViolation
            | InvalidReplicationFactor
            | InvalidPartitions
            | InvalidConfig
            | InvalidTopic
            | InvalidReplicaAssignment
    )
}

/// What to change for a creation refused with `code`.
fn creation_fix(code: RDKafkaErrorCode) -> &'static str {
    use RDKafkaErrorCode::*;
    match code {
        TopicAuthorizationFailed | ClusterAuthorizationFailed => "the Kafka user may not create it: grant it CREATE on the topic (or the cluster), or create the topic beforehand and set kafka.topics.create = false",
        InvalidReplicationFactor | InvalidPartitions | InvalidReplicaAssignment => "fix partitions / replication_factor in the matching [[kafka.topics.rule]] (the cluster has fewer brokers than asked for?)",
        InvalidConfig | PolicyViolation => "fix the topic configs in the matching [[kafka.topics.rule]] (the broker's create-topic policy refused them)",
        _ => "fix route.topic so it yields a valid topic name (letters, digits, '.', '_', '-', at most 249)",
    }
}

/// A creation the broker answered with `code`: for the operator when no retry fixes it.
fn creation_failed(topic: String, code: RDKafkaErrorCode) -> KafkaClientError {
    if needs_operator(code) {
        KafkaClientError::TopicRefused {
            topic,
            code,
            fix: creation_fix(code),
        }
    } else {
        KafkaClientError::CreateTopic {
            topic,
            reason: code.to_string(),
        }
    }
}

impl TopicCreator {
    /// An admin client with the producer's connection settings.
    pub fn new(cfg: &KafkaConfig) -> Result<Self, KafkaClientError> {
        let admin = super::client_config(cfg)
            .create()
            .map_err(KafkaClientError::Create)?;
        let rules = cfg
            .topics
            .rules
            .iter()
            .map(|r| (Pattern::new(&r.pattern), r.clone()))
            .collect();
        Ok(Self {
            admin: Arc::new(admin),
            rules,
            known: Mutex::new(HashSet::new()),
            create: cfg.topics.create,
        })
    }

    /// Looks each topic up; a missing or forbidden one is an error for the operator.
    async fn verify(&self, topics: &[&str]) -> Result<(), KafkaClientError> {
        let admin = self.admin.clone();
        let wanted: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            for topic in &wanted {
                // A broker that auto-creates answers the first lookup with "unknown"
                // too, and knows the topic a moment later.
                let deadline = Instant::now() + AUTO_CREATE_WAIT;
                let error = loop {
                    let md = admin
                        .inner()
                        .fetch_metadata(Some(topic), Duration::from_secs(10))
                        .map_err(|e| KafkaClientError::CreateTopic {
                            topic: topic.clone(),
                            reason: format!("looking it up failed: {e}"),
                        })?;
                    let error = md
                        .topics()
                        .iter()
                        .find(|t| t.name() == topic)
                        .and_then(|t| t.error())
                        .map(RDKafkaErrorCode::from);
                    if error != Some(RDKafkaErrorCode::UnknownTopicOrPartition)
                        || Instant::now() >= deadline
                    {
                        break error;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                };
                match error {
                    Some(RDKafkaErrorCode::UnknownTopicOrPartition) => {
                        return Err(KafkaClientError::TopicMissing {
                            topic: topic.clone(),
                        })
                    }
                    Some(code) if needs_operator(code) => {
                        return Err(KafkaClientError::TopicRefused {
                            topic: topic.clone(),
                            code,
                            fix: "the Kafka user may not see it: grant it DESCRIBE and WRITE on the topic",
                        })
                    }
                    // Anything else (a leader election, a topic the broker is just
                    // auto-creating) is waited for like a topic of our own.
                    _ => wait_for_leaders(&admin, std::slice::from_ref(topic))?,
                }
            }
            Ok(())
        })
        .await
        .map_err(|e| KafkaClientError::CreateTopic {
            topic: topics.join(","),
            reason: format!("looking it up failed: {e}"),
        })?
    }

    /// Whether `topic` exists with at least one partition. Asked as a consumer that may
    /// not create topics: a producer's (or the admin client's) metadata request for a
    /// missing topic makes a broker with `auto.create.topics.enable` create it, in its
    /// default shape.
    pub fn exists(cfg: &KafkaConfig, topic: &str) -> Result<bool, KafkaClientError> {
        let failed = |e: String| KafkaClientError::CreateTopic {
            topic: topic.to_string(),
            reason: format!("looking it up failed: {e}"),
        };
        let mut c = super::consumer_config(cfg);
        c.set("allow.auto.create.topics", "false");
        let consumer: rdkafka::consumer::BaseConsumer =
            c.create().map_err(|e| failed(e.to_string()))?;
        let md = rdkafka::consumer::Consumer::fetch_metadata(
            &consumer,
            Some(topic),
            Duration::from_secs(10),
        )
        .map_err(|e| failed(e.to_string()))?;
        Ok(md
            .topics()
            .iter()
            .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty()))
    }

    /// Makes sure the one-partition compacted `topic` of exactly-once mode's commit
    /// markers (or a lock) exists (created even with `kafka.topics.create = false`: the
    /// router owns it).
    pub fn ensure_compacted(
        &self,
        topic: &str,
        what: &'static str,
    ) -> Result<(), KafkaClientError> {
        self.ensure_owned(topic, what, OwnedShape::Compacted)
    }

    /// Makes sure the one-partition `topic` that keeps every record forever exists (the
    /// parking topic: its records are the set of parked aggregates), created so even
    /// with `kafka.topics.create = false`, an existing one checked.
    pub fn ensure_kept_forever(
        &self,
        topic: &str,
        what: &'static str,
    ) -> Result<(), KafkaClientError> {
        self.ensure_owned(topic, what, OwnedShape::KeptForever)
    }

    /// Makes sure the one-partition status topic of the fleet's reports exists:
    /// compacted (each instance's newest report of each source stays) and deleted after
    /// a week, with a day of every report kept uncompacted for the console's history.
    pub fn ensure_reports(&self, topic: &str, what: &'static str) -> Result<(), KafkaClientError> {
        self.ensure_owned(topic, what, OwnedShape::Reports)
    }

    fn ensure_owned(
        &self,
        topic: &str,
        what: &'static str,
        shape: OwnedShape,
    ) -> Result<(), KafkaClientError> {
        let mut new = NewTopic::new(topic, 1, TopicReplication::Fixed(-1));
        for (key, value) in shape.settings() {
            new = new.set(key, value);
        }
        for (key, value) in shape.created_with() {
            new = new.set(key, value);
        }
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let failed = |reason: String| KafkaClientError::CreateTopic {
            topic: topic.to_string(),
            reason,
        };
        let results = tokio::task::block_in_place(|| {
            futures::executor::block_on(self.admin.create_topics(&[new], &opts))
        })
        .map_err(|e| failed(e.to_string()))?;
        for result in results {
            let existed = match result {
                Ok(_) => {
                    tracing::info!(%topic, "created the {what} topic");
                    false
                }
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => true,
                Err((topic, code)) => return Err(creation_failed(topic, code)),
            };
            // Ours or another instance's of a moment ago: until its partitions answer,
            // the broker describes it as having none, which is not a shape to refuse.
            tokio::task::block_in_place(|| {
                wait_for_leaders(&self.admin, &[topic.to_string()])?;
                match existed {
                    true => self.check_shape(topic, what, shape),
                    false => Ok(()),
                }
            })?;
        }
        Ok(())
    }

    /// An existing topic of the router's own must be what the router would have made:
    /// one partition (the newest marker is the newest record of partition 0; a lock is
    /// one partition's assignment; parked events keep one order) and its cleanup: a
    /// marker or lock topic `compact` (with `delete` an idle router's only marker
    /// expires and the next start finds none), the parking topic `delete` with no
    /// retention limit (compaction or expiry would unpark an aggregate silently).
    fn check_shape(
        &self,
        topic: &str,
        what: &'static str,
        shape: OwnedShape,
    ) -> Result<(), KafkaClientError> {
        let timeout = Duration::from_secs(10);
        let lookup = |e: String| KafkaClientError::CreateTopic {
            topic: topic.to_string(),
            reason: format!("looking it up failed: {e}"),
        };
        let md = self
            .admin
            .inner()
            .fetch_metadata(Some(topic), timeout)
            .map_err(|e| lookup(e.to_string()))?;
        let partitions = md
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .map_or(0, |t| t.partitions().len());
        let opts = AdminOptions::new().request_timeout(Some(timeout));
        let described = futures::executor::block_on(
            self.admin
                .describe_configs(&[ResourceSpecifier::Topic(topic)], &opts),
        )
        .map_err(|e| lookup(e.to_string()))?;
        // A lookup the broker answered with an error says nothing about the settings.
        let mut configs = HashMap::new();
        for resource in described {
            let resource =
                resource.map_err(|code| lookup(format!("describing its configs: {code}")))?;
            for e in resource.entries {
                if let Some(v) = e.value {
                    configs.insert(e.name, v);
                }
            }
        }
        let mut problems = Vec::new();
        if partitions != 1 {
            problems.push(format!("{partitions} partitions, it needs exactly 1"));
        }
        for (key, wanted) in shape.settings() {
            let found = configs
                .get(*key)
                .ok_or_else(|| lookup(format!("the broker described no {key}")))?;
            if found != wanted {
                problems.push(format!(
                    "{key}={found}, it needs {wanted}{}",
                    shape.why(key)
                ));
            }
        }
        match problems.is_empty() {
            true => Ok(()),
            false => Err(KafkaClientError::TopicShape {
                topic: topic.to_string(),
                what,
                problems: problems.join("; "),
            }),
        }
    }

    /// Makes sure every topic exists, creating the unknown ones in one admin request;
    /// cheap once they are known.
    pub async fn ensure<'t>(
        &self,
        topics: impl IntoIterator<Item = &'t str>,
    ) -> Result<(), KafkaClientError> {
        let unknown: Vec<&str> = {
            let known = self.known.lock().expect("topic set");
            let mut unknown: Vec<&str> =
                topics.into_iter().filter(|t| !known.contains(*t)).collect();
            unknown.sort_unstable();
            unknown.dedup();
            unknown
        };
        if unknown.is_empty() {
            return Ok(());
        }
        if !self.create {
            self.verify(&unknown).await?;
            self.remember(&unknown);
            return Ok(());
        }
        let new: Vec<NewTopic> = unknown
            .iter()
            .map(|topic| {
                let rule = self
                    .rules
                    .iter()
                    .find(|(p, _)| p.matches(topic))
                    .map(|(_, r)| r);
                let (partitions, replication) =
                    rule.map_or((-1, -1), |r| (r.partitions, r.replication_factor));
                let mut new =
                    NewTopic::new(topic, partitions, TopicReplication::Fixed(replication));
                for (k, v) in rule.iter().flat_map(|r| r.config.iter()) {
                    new = new.set(k, v);
                }
                new
            })
            .collect();
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = self
            .admin
            .create_topics(&new, &opts)
            .await
            .map_err(|error| match error.rdkafka_error_code() {
                Some(code) if needs_operator(code) => KafkaClientError::TopicRefused {
                    topic: unknown.join(","),
                    code,
                    fix: creation_fix(code),
                },
                _ => KafkaClientError::CreateTopic {
                    topic: unknown.join(","),
                    reason: error.to_string(),
                },
            })?;
        // Ours, and those another instance of the fleet created a moment ago.
        let mut new_topics = Vec::new();
        for result in results {
            match result {
                Ok(topic) => {
                    tracing::info!(%topic, "created topic");
                    new_topics.push(topic);
                }
                Err((topic, RDKafkaErrorCode::TopicAlreadyExists)) => new_topics.push(topic),
                Err((topic, code)) => return Err(creation_failed(topic, code)),
            }
        }
        if !new_topics.is_empty() && !skip_leader_wait() {
            let admin = self.admin.clone();
            tokio::task::spawn_blocking(move || wait_for_leaders(&admin, &new_topics))
                .await
                .map_err(|e| KafkaClientError::CreateTopic {
                    topic: unknown.join(","),
                    reason: format!("waiting for leaders failed: {e}"),
                })??;
        }
        self.remember(&unknown);
        Ok(())
    }

    fn remember(&self, topics: &[&str]) {
        self.known
            .lock()
            .expect("topic set")
            .extend(topics.iter().map(|t| t.to_string()));
    }
}

/// Tests turn the wait off to reach the race it avoids (and prove the delivery check
/// that stands behind it).
fn skip_leader_wait() -> bool {
    fail::fail_point!("sink.skip_leader_wait", |_| true);
    false
}

/// How long a missing topic may take to appear when the broker auto-creates it.
const AUTO_CREATE_WAIT: Duration = Duration::from_secs(5);

/// How long a new topic's partition leaders may take to answer.
const LEADER_WAIT: Duration = Duration::from_secs(30);

/// Waits until every partition of the new topics answers a ListOffsets request from its
/// leader. A topic the controller has just created is announced before its leaders have
/// taken over; a new producer's first batch then fails with NOT_LEADER while the next
/// one succeeds, and librdkafka reports the first as delivered ("implicitly acked").
/// The router refuses such reports (no offset), but not producing into that moment
/// avoids the re-send altogether.
fn wait_for_leaders(
    admin: &AdminClient<DefaultClientContext>,
    topics: &[String],
) -> Result<(), KafkaClientError> {
    let client = admin.inner();
    let started = Instant::now();
    let deadline = started + LEADER_WAIT;
    let timeout = Duration::from_secs(5);
    for topic in topics {
        let mut last_error = String::new();
        loop {
            let answered = client
                .fetch_metadata(Some(topic), timeout)
                .map_err(|e| e.to_string())
                .and_then(|md| {
                    let partitions: Vec<i32> = md
                        .topics()
                        .iter()
                        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
                        .collect();
                    if partitions.is_empty() {
                        return Err("no partitions in metadata yet".to_string());
                    }
                    partitions.iter().try_for_each(|&p| {
                        client
                            .fetch_watermarks(topic, p, timeout)
                            .map(drop)
                            .map_err(|e| format!("partition {p}: {e}"))
                    })
                });
            match answered {
                Ok(()) => {
                    let waited_ms = started.elapsed().as_millis() as u64;
                    tracing::info!(%topic, waited_ms, "new topic's leaders answer");
                    break;
                }
                Err(e) if Instant::now() < deadline => {
                    last_error = e;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => {
                    return Err(KafkaClientError::CreateTopic {
                        topic: topic.clone(),
                        reason: format!(
                            "its partition leaders did not answer within {} s: {e} (before: {last_error})",
                            LEADER_WAIT.as_secs()
                        ),
                    })
                }
            }
        }
    }
    Ok(())
}

/// The shapes of the router's own one-partition topics.
#[derive(Debug, Clone, Copy)]
enum OwnedShape {
    /// Commit markers, locks: the newest record of each key is what counts.
    Compacted,
    /// Parked events: every record counts, for ever.
    KeptForever,
    /// The fleet's status reports: the newest of each key, and a day of history.
    Reports,
}

impl OwnedShape {
    /// The topic settings it is created with and checked for.
    fn settings(self) -> &'static [(&'static str, &'static str)] {
        match self {
            OwnedShape::Compacted => &[("cleanup.policy", "compact")],
            OwnedShape::KeptForever => &[
                ("cleanup.policy", "delete"),
                ("retention.ms", "-1"),
                ("retention.bytes", "-1"),
            ],
            OwnedShape::Reports => &[("cleanup.policy", "compact,delete")],
        }
    }

    /// Settings it is created with, not checked: tuning an operator may change.
    fn created_with(self) -> &'static [(&'static str, &'static str)] {
        match self {
            // A marker written a moment ago stays readable.
            OwnedShape::Compacted => &[("min.compaction.lag.ms", "60000")],
            OwnedShape::KeptForever => &[],
            // Every report of the last day stays for the console's history (24 h at
            // 10 s); after a week without a report an instance's key is gone.
            OwnedShape::Reports => &[
                ("min.compaction.lag.ms", "86400000"),
                ("retention.ms", "604800000"),
                ("segment.ms", "3600000"),
            ],
        }
    }

    /// Why a setting must be as it is.
    fn why(self, key: &str) -> &'static str {
        match (self, key) {
            (OwnedShape::Compacted, _) => {
                " (alone: with delete the newest record expires)"
            }
            (OwnedShape::KeptForever, "cleanup.policy") => {
                " (alone: compaction keeps one record per aggregate and drops the parked events before it)"
            }
            (OwnedShape::KeptForever, _) => {
                " (a parked event that expires unparks its aggregate without a release)"
            }
            (OwnedShape::Reports, _) => {
                " (compaction keeps each instance's newest report, deletion bounds the topic)"
            }
        }
    }
}
