//! The claim check: a record whose value is too large for Kafka (or of an aggregate type
//! always sent this way) has the value written to an S3-compatible bucket first; the
//! record, same topic, key, partition and headers, carries a reference to it. In the
//! pipeline it is a stage between route and sink (`CheckIn::ahead`, the values of a few
//! transactions written at once, the batches passed on in order); in front of the
//! producer, a sink (`ClaimCheckSink`) does the same for whatever arrives still marked
//! (the operator commands' republished rows). Either way the object exists before its
//! record is handed over: before it can be acknowledged, and before an exactly-once
//! transaction holding it can commit. A crash between the two leaves an object without
//! a record (the re-sent record writes the same bytes under the same key, the value's
//! hash); never a record without its object, and never an object whose bytes change.
//!
//! Everything of the claim check is here: its settings (`config.rs`), which values it
//! takes (`policy.rs`, asked by the route stage through `route::Offload`), the object
//! keys and the reference a record carries (`reference.rs`), the bucket's client
//! (`store.rs`), the bytes in flight (`budget.rs`), and its two places in the stream.

mod budget;
mod config;
mod policy;
mod reference;
mod store;

pub use budget::ValueBudget;
pub use config::ClaimCheckConfig;
pub use policy::offload;
pub use reference::Reference;
pub use store::Bucket;

use std::time::Instant;

use futures::future::BoxFuture;
use futures::StreamExt;
use tokio::sync::mpsc;

use super::{Delivery, Sink, SinkError, Transactions};
use crate::monitor::Metrics;
use crate::route::{Batch, Record};

/// Objects written at once within one batch.
const PARALLEL_PUTS: usize = 4;

/// Batches whose values are written at once ahead of the one being handed to Kafka: with
/// one large row per transaction (the usual outbox), the writes overlap instead of
/// following each other at the store's latency.
const BATCHES_AHEAD: usize = 4;

/// Writes marked values to the bucket and puts the references in their place.
#[derive(Clone)]
pub struct CheckIn {
    bucket: Bucket,
    metrics: Metrics,
    budget: ValueBudget,
}

impl CheckIn {
    /// The claim check of `cfg`, counting into `metrics`.
    pub fn new(cfg: &ClaimCheckConfig, metrics: &Metrics) -> Result<Self, SinkError> {
        Ok(Self {
            bucket: Bucket::new(cfg).map_err(SinkError::ClaimCheckSetup)?,
            metrics: metrics.clone(),
            budget: ValueBudget::new(cfg.max_pending_bytes),
        })
    }

    /// The bytes of values read and not yet written: the reader takes each batch's
    /// cost before handing it here.
    pub fn budget(&self) -> &ValueBudget {
        &self.budget
    }

    /// Writes the value of every marked record, several at once, and puts the reference
    /// in its place (the record is then no longer marked). Results are taken in record
    /// order, so a failure (after object_store's retries) names the earliest event whose
    /// object could not be written, whichever write finished first.
    pub async fn records(&self, records: &mut [Record]) -> Result<(), SinkError> {
        let mut jobs = Vec::new();
        for (i, r) in records.iter_mut().enumerate() {
            if !r.claim_check {
                continue;
            }
            if let Some(value) = r.value.take() {
                jobs.push((i, r.topic.clone(), r.event.id.clone(), value));
            }
        }
        let mut written = futures::stream::iter(jobs)
            .map(|(i, topic, id, value)| async move {
                let len = value.len();
                let started = Instant::now();
                // The key is the value's hash: tens of milliseconds for a large value,
                // off the runtime's threads.
                let bucket = self.bucket.clone();
                let (key, value) =
                    tokio::task::spawn_blocking(move || (bucket.key(&topic, &id, &value), value))
                        .await
                        .expect("hashing a value does not panic");
                let put = self.bucket.put(&key, value).await;
                (i, key, len, started.elapsed(), put)
            })
            .buffered(PARALLEL_PUTS);
        while let Some((i, key, len, took, put)) = written.next().await {
            let record = &mut records[i];
            if let Err(error) = put {
                return Err(SinkError::ClaimCheck {
                    event: Box::new(record.event.clone()),
                    location: format!("s3://{}/{key}", self.bucket.name()),
                    error,
                });
            }
            // The object is written, its record not yet handed over.
            crash_point!("claim_check.after_put");
            self.metrics.claim_checked(len as u64, took.as_secs_f64());
            let reference = Reference {
                bucket: self.bucket.name().to_string(),
                key: key.to_string(),
                size: len,
            };
            record.value = Some(reference.value());
            record.headers.extend(reference.headers());
            record.claim_check = false;
        }
        Ok(())
    }

    /// The pipeline's claim-check stage between route and sink: the values of up to
    /// `BATCHES_AHEAD` batches written at once, the batches passed on in their order.
    /// Ends when either channel closes, or with the first write that failed.
    pub async fn ahead(
        self,
        mut routed: mpsc::Receiver<Batch>,
        checked: mpsc::Sender<Batch>,
    ) -> Result<(), SinkError> {
        let this = &self;
        let mut batches = futures::stream::poll_fn(move |cx| routed.poll_recv(cx))
            .map(|mut batch: Batch| async move {
                // The reader took this cost; the values become references here.
                let cost = this.budget.cost(&batch.records);
                let written = this.records(&mut batch.records).await;
                this.budget.give_back(cost);
                written.map(|()| batch)
            })
            .buffered(BATCHES_AHEAD);
        while let Some(batch) = batches.next().await {
            if checked.send(batch?).await.is_err() {
                return Ok(()); // the acker stopped; it says why
            }
        }
        Ok(())
    }
}

/// A sink that writes marked values to the bucket, then hands the records on: what
/// `CheckIn::ahead` left marked (nothing, in the pipeline), and the operator commands'
/// republished rows.
pub struct ClaimCheckSink {
    inner: Box<dyn Sink>,
    check_in: CheckIn,
}

impl ClaimCheckSink {
    /// `inner` with `check_in` in front.
    pub fn new(inner: Box<dyn Sink>, check_in: CheckIn) -> Self {
        Self { inner, check_in }
    }
}

impl Sink for ClaimCheckSink {
    fn send(&self, mut records: Vec<Record>) -> BoxFuture<'_, Result<Delivery, SinkError>> {
        Box::pin(async move {
            self.check_in.records(&mut records).await?;
            self.inner.send(records).await
        })
    }

    fn abandon(&self) {
        self.inner.abandon()
    }

    fn explain(&self, error: SinkError) -> SinkError {
        self.inner.explain(error)
    }

    fn transactions(&self) -> Option<&dyn Transactions> {
        self.inner.transactions()
    }

    fn discards(&self) -> bool {
        self.inner.discards()
    }
}
