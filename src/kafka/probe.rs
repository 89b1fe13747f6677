//! Whether a cluster is reachable with these properties, and what this build of
//! librdkafka can speak: asked before anything else happens (`validate`, `run`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, Producer};
use rdkafka::util::Timeout;
use rdkafka::ClientContext;

use super::{client_config, KafkaConfig};

/// Asks the cluster for metadata, to tell early whether it is reachable.
pub async fn check_reachable(cfg: &KafkaConfig, timeout: Duration) -> Result<usize, Unreachable> {
    let context = ProbeContext::default();
    let last_error = context.last_error.clone();
    let producer: FutureProducer<ProbeContext> = client_config(cfg)
        .create_with_context(context)
        .map_err(|error| Unreachable {
            error,
            reason: None,
        })?;
    tokio::task::spawn_blocking(move || {
        producer
            .client()
            .fetch_metadata(None, Timeout::After(timeout))
            .map(|m| m.brokers().len())
            .map_err(|error| Unreachable {
                error,
                reason: last_error.lock().unwrap().take(),
            })
    })
    .await
    .unwrap_or(Err(Unreachable {
        error: KafkaError::Canceled,
        reason: None,
    }))
}

/// Whether librdkafka accepts these properties: a protocol or mechanism this build
/// lacks, or a malformed value, is refused here, before anything else happens.
/// The error's text hides any property value (see `without_values`).
pub fn check_properties(cfg: &KafkaConfig) -> Result<(), String> {
    client_config(cfg)
        .create::<rdkafka::producer::BaseProducer>()
        .map(drop)
        .map_err(|e| super::without_values(&e))
}

/// The features of the linked librdkafka (`builtin.features`: ssl, sasl_scram,
/// sasl_oauthbearer, http, …) and its version.
pub fn client_features() -> (String, String) {
    let features = ClientConfig::new()
        .create_native_config()
        .and_then(|c| c.get("builtin.features"))
        .unwrap_or_default();
    (rdkafka::util::get_rdkafka_version().1, features)
}

/// Kafka did not answer a metadata request; `reason` is librdkafka's own account of the
/// last connection failure (a TLS handshake, an authentication), which the request's
/// error code alone does not say.
#[derive(Debug, thiserror::Error)]
#[error("{error}{}", reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
pub struct Unreachable {
    error: KafkaError,
    reason: Option<String>,
}

/// Keeps the last error librdkafka reported on a probe's connections.
#[derive(Default)]
struct ProbeContext {
    last_error: Arc<Mutex<Option<String>>>,
}

impl ClientContext for ProbeContext {
    fn error(&self, error: KafkaError, reason: &str) {
        let mut last = self.last_error.lock().unwrap();
        // "All brokers are down" follows the failure that says why.
        let summary = error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown);
        if !(summary && last.is_some()) {
            *last = Some(reason.to_string());
        }
    }
}
