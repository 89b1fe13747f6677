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

    /// Makes sure `topic` exists (creating it if needed); cheap after the first call.
    pub async fn ensure(&self, topic: &str) -> Result<(), SinkError> {
        if self.known.lock().expect("topic set").contains(topic) {
            return Ok(());
        }
        let rule = self
            .rules
            .iter()
            .find(|(p, _)| p.matches(topic))
            .map(|(_, r)| r);
        let (partitions, replication) =
            rule.map_or((-1, -1), |r| (r.partitions, r.replication_factor));
        let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(replication));
        if let Some(r) = rule {
            for (k, v) in &r.config {
                new = new.set(k, v);
            }
        }
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let results = self
            .admin
            .create_topics([&new], &opts)
            .await
            .map_err(|error| SinkError::CreateTopic {
                topic: topic.to_string(),
                reason: error.to_string(),
            })?;
        for result in results {
            match result {
                Ok(_) => tracing::info!(topic, partitions, replication, "created topic"),
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => {
                    return Err(SinkError::CreateTopic {
                        topic: topic.to_string(),
                        reason: code.to_string(),
                    })
                }
            }
        }
        self.known
            .lock()
            .expect("topic set")
            .insert(topic.to_string());
        Ok(())
    }
}
