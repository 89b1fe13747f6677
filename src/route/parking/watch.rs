//! Operators' requests as they arrive: a `read_committed` consumer on the parking topic,
//! from where the start's read ended, handing each request to the leader's read loop
//! (which carries it out between two binlog transactions).

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::record::{Entry, Request};
use crate::kafka::KafkaConfig;

/// Tails `topic` from `from` until `stop` or until the receiver is gone, sending every
/// request; a record it cannot read is logged and passed (the next start reads the
/// topic whole and stops on it).
pub fn watch(
    kafka: &KafkaConfig,
    topic: &str,
    from: i64,
    requests: mpsc::UnboundedSender<Request>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let mut c = crate::kafka::consumer_config(kafka);
    c.set("group.id", "outbox-router-parking")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed");
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = match c.create() {
            Ok(c) => c,
            Err(e) => {
                warn!(%topic, error = %e, "cannot watch the parking topic for requests: `parked release` / `drop` wait until the next start");
                return;
            }
        };
        let mut tpl = TopicPartitionList::new();
        if tpl
            .add_partition_offset(&topic, 0, Offset::Offset(from))
            .and_then(|()| consumer.assign(&tpl))
            .is_err()
        {
            warn!(%topic, "cannot watch the parking topic for requests");
            return;
        }
        while !stop.is_cancelled() && !requests.is_closed() {
            let m = match consumer.poll(Duration::from_millis(250)) {
                None | Some(Err(KafkaError::PartitionEOF(_))) => continue,
                Some(Err(e)) => {
                    warn!(%topic, error = %e, "reading the parking topic for requests");
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                }
                Some(Ok(m)) => m,
            };
            match super::RawRecord::of(&m).entry(m.offset()) {
                Ok(Entry::Request(request)) => {
                    info!(request = %request.id, action = ?request.action, aggregates = request.aggregates.len(), by = %request.by, "an operator's parking request arrived");
                    if requests.send(request).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(why) => {
                    warn!(%topic, offset = m.offset(), %why, "a record of the parking topic this router cannot read")
                }
            }
        }
    })
}
