//! The client context of the router's own consumers. rust-rdkafka (0.39) hands every
//! end-of-partition event to the context's error callback as a "Global error" as well as
//! to the poll (fede1024/rust-rdkafka#820), and its default context logs those at ERROR:
//! a followed topic wrote one ERROR line for each record it read. The readers learn the
//! end from their poll; the log gets the real errors only.

use rdkafka::client::ClientContext;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// A consumer's context naming what it reads in its error lines.
pub struct Reader(pub &'static str);

impl ClientContext for Reader {
    fn error(&self, error: KafkaError, reason: &str) {
        if is_end_of_partition(&error) {
            return;
        }
        tracing::error!(%error, reason, reader = self.0, "kafka reader");
    }
}

impl ConsumerContext for Reader {}

/// Whether `error` is only the news that a partition's end was reached.
pub fn is_end_of_partition(error: &KafkaError) -> bool {
    matches!(
        error,
        KafkaError::Global(RDKafkaErrorCode::PartitionEOF) | KafkaError::PartitionEOF(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_a_partition_is_no_error_and_the_rest_are() {
        assert!(is_end_of_partition(&KafkaError::Global(
            RDKafkaErrorCode::PartitionEOF
        )));
        assert!(is_end_of_partition(&KafkaError::PartitionEOF(0)));
        assert!(!is_end_of_partition(&KafkaError::Global(
            RDKafkaErrorCode::BrokerTransportFailure
        )));
    }
}
