//! Missing topics are created through the admin client before their first record, with
//! partitions, replication and configs from the first matching rule (else the broker's
//! defaults), so production brokers can keep `auto.create.topics.enable=false`.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::RDKafkaErrorCode;

use super::SinkError;
use crate::config::{KafkaConfig, TopicRule};
use crate::pattern::Pattern;

/// Creates topics once each.
pub struct TopicCreator {
    admin: AdminClient<DefaultClientContext>,
    rules: Vec<(Pattern, TopicRule)>,
    known: Mutex<HashSet<String>>,
}

impl TopicCreator {
    /// An admin client with the producer's connection settings.
    pub fn new(cfg: &KafkaConfig) -> Result<Self, SinkError> {
        let admin = super::kafka::client_config(cfg)
            .create()
            .map_err(SinkError::Create)?;
        let rules = cfg
            .topics
            .rules
            .iter()
            .map(|r| (Pattern::new(&r.pattern), r.clone()))
            .collect();
        Ok(Self {
            admin,
            rules,
            known: Mutex::new(HashSet::new()),
        })
    }

    /// Makes sure every topic exists, creating the unknown ones in one admin request;
    /// cheap once they are known.
    pub async fn ensure<'t>(
        &self,
        topics: impl IntoIterator<Item = &'t str>,
    ) -> Result<(), SinkError> {
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
            .map_err(|error| SinkError::CreateTopic {
                topic: unknown.join(","),
                reason: error.to_string(),
            })?;
        for result in results {
            match result {
                Ok(topic) => tracing::info!(%topic, "created topic"),
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((topic, code)) => {
                    return Err(SinkError::CreateTopic {
                        topic,
                        reason: code.to_string(),
                    })
                }
            }
        }
        self.known
            .lock()
            .expect("topic set")
            .extend(unknown.iter().map(|t| t.to_string()));
        Ok(())
    }
}
