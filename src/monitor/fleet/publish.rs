//! This instance's reports: every source it runs, leader or standby, on the status
//! topic every `monitor.interval_secs`, and at once when a source's role or state
//! changes (a takeover shows on every instance's console within a second of it). A
//! report that cannot be sent is logged and the next one tried: the status topic is
//! never in the way of the stream.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::report::{Previous, Reporter};
use super::{Board, SourceReport};
use crate::kafka::{KafkaConfig, TopicCreator};
use crate::monitor::Served;

/// How often the sources' role and state are looked at.
const LOOK: Duration = Duration::from_secs(1);

/// How long a stopping instance waits for its last reports to be acknowledged.
const LAST_WORDS: Duration = Duration::from_secs(5);

/// Publishes `served`'s sources to `board` and, when given, the status topic, until
/// `stop`, then once more as stopped.
pub fn publish(
    to: Option<(&KafkaConfig, &str)>,
    reporter: Reporter,
    served: Arc<Served>,
    board: Arc<Board>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let mut out = to.map(|(kafka, topic)| Outbox::new(kafka, topic));
    tokio::spawn(async move {
        let interval = Duration::from_secs(reporter.interval_secs.max(1));
        let mut last: HashMap<String, (SourceReport, Previous, Instant)> = HashMap::new();
        let mut look = tokio::time::interval(LOOK);
        loop {
            let stopping = tokio::select! {
                _ = stop.cancelled() => true,
                _ = look.tick() => false,
            };
            let sources = served.sources();
            let mut due = Vec::new();
            for (name, metrics) in &sources {
                let entry = last.get(name);
                let changed = entry.is_none_or(|(r, _, at)| {
                    r.shape() != SourceReport::shape_of(metrics) || at.elapsed() >= interval
                });
                if !(changed || stopping) {
                    continue;
                }
                let mut previous = entry.map(|(_, p, _)| *p).unwrap_or_default();
                let report = SourceReport::of(&reporter, name, metrics, &mut previous, stopping);
                last.insert(name.clone(), (report.clone(), previous, Instant::now()));
                due.push(report);
            }
            // A source this instance no longer runs (removed from the pool): it says so.
            let gone: Vec<String> = last
                .keys()
                .filter(|n| !sources.iter().any(|(s, _)| s == *n))
                .cloned()
                .collect();
            for name in gone {
                if let Some((mut report, _, _)) = last.remove(&name) {
                    report.state = super::SourceState::Stopped;
                    report.at_ms = crate::checkpoint::now_ms();
                    due.push(report);
                }
            }
            for report in due {
                if let Some(out) = out.as_mut() {
                    out.send(&report);
                }
                board.add(report);
            }
            if stopping {
                if let Some(out) = &out {
                    out.flush(LAST_WORDS);
                }
                return;
            }
        }
    })
}

/// The producer of reports, and the topic made sure of before the first one.
struct Outbox {
    kafka: KafkaConfig,
    topic: String,
    producer: Option<FutureProducer>,
    ready: bool,
    /// When sending last failed (a failure is logged once a minute).
    failed_at: Option<Instant>,
}

impl Outbox {
    fn new(kafka: &KafkaConfig, topic: &str) -> Self {
        Self {
            kafka: kafka.clone(),
            topic: topic.to_string(),
            producer: None,
            ready: false,
            failed_at: None,
        }
    }

    fn failed(&mut self, what: &str, error: String) {
        if self
            .failed_at
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(60))
        {
            warn!(topic = %self.topic, %error, "{what}: the fleet view misses this instance's reports until it works");
            self.failed_at = Some(Instant::now());
        }
    }

    /// Sends `report` without waiting for it: the next report supersedes a lost one.
    fn send(&mut self, report: &SourceReport) {
        if !self.ready {
            let made = TopicCreator::new(&self.kafka)
                .and_then(|c| c.ensure_reports(&self.topic, "status"));
            match made {
                Ok(()) => self.ready = true,
                Err(e) => return self.failed("cannot make the status topic", e.to_string()),
            }
        }
        if self.producer.is_none() {
            let mut c = crate::kafka::client_config(&self.kafka);
            c.set("linger.ms", "50").set("statistics.interval.ms", "0");
            match c.create() {
                Ok(p) => self.producer = Some(p),
                Err(e) => return self.failed("cannot create the status producer", e.to_string()),
            }
        }
        let producer = self.producer.as_ref().expect("created above");
        let key = report.key();
        let value = serde_json::to_vec(report).expect("a report serialises");
        let record = FutureRecord::to(&self.topic)
            .partition(0)
            .key(&key)
            .payload(&value);
        match producer.send_result(record) {
            Ok(delivery) => {
                let topic = self.topic.clone();
                tokio::spawn(async move {
                    if let Ok(Err((e, _))) = delivery.await {
                        info!(%topic, error = %e, "a status report was not delivered");
                    }
                });
                self.failed_at = None;
            }
            Err((e, _)) => self.failed("cannot queue a status report", e.to_string()),
        }
    }

    fn flush(&self, within: Duration) {
        if let Some(p) = &self.producer {
            let _ = tokio::task::block_in_place(|| p.flush(within));
        }
    }
}
