//! What a Kafka client other than the sink's producer meets: a client that cannot be
//! created, topics that cannot be created or are the wrong shape, a topic that cannot
//! be read back.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum KafkaClientError {
    #[error("cannot create the Kafka client: {0}")]
    Create(KafkaError),
    #[error("cannot create topic {topic}: {reason}")]
    CreateTopic { topic: String, reason: String },
    #[error("Kafka refused topic {topic} ({code}): {fix}")]
    TopicRefused {
        topic: String,
        code: RDKafkaErrorCode,
        fix: &'static str,
    },
    #[error("topic {topic} does not exist and kafka.topics.create = false (nor does the broker create it): create the topic, or set kafka.topics.create = true")]
    TopicMissing { topic: String },
    #[error("the {what} topic {topic} exists in a shape the router cannot rely on: {problems}; delete it (the router creates it right) or point delivery.checkpoint_topic / ha.lock_topic at another")]
    TopicShape {
        topic: String,
        what: &'static str,
        problems: String,
    },
    #[error("cannot read topic {topic} back: {reason}")]
    ReadBack { topic: String, reason: String },
}

impl KafkaClientError {
    /// True when asking again later may succeed; false when the configuration or the
    /// cluster's permissions are the problem.
    pub fn is_transient(&self) -> bool {
        match self {
            KafkaClientError::CreateTopic { .. } | KafkaClientError::ReadBack { .. } => true,
            KafkaClientError::Create(_)
            | KafkaClientError::TopicRefused { .. }
            | KafkaClientError::TopicMissing { .. }
            | KafkaClientError::TopicShape { .. } => false,
        }
    }
}
