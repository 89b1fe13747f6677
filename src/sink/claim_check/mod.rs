//! The claim check: a record whose value is too large for Kafka (or of an aggregate type
//! always sent this way) has the value written to an S3-compatible bucket first; the
//! record, same topic, key, partition and headers, carries a reference to it. A sink
//! wrapped around the producer, so the object exists before its record is handed over:
//! before it can be acknowledged, and before an exactly-once transaction holding it can
//! commit. A crash between the two leaves an object without a record (the re-sent
//! record overwrites it, same key); never a record without its object.

mod config;
mod reference;
mod store;

pub use config::ClaimCheckConfig;
pub use reference::Reference;
pub use store::Bucket;

use std::time::Instant;

use futures::future::BoxFuture;
use futures::StreamExt;

use super::{Delivery, Sink, SinkError, Transactions};
use crate::monitor::Metrics;
use crate::route::Record;

/// Objects written at once within one batch.
const PARALLEL_PUTS: usize = 4;

/// A sink that writes marked values to the bucket, then hands the records on.
pub struct ClaimCheckSink {
    inner: Box<dyn Sink>,
    bucket: Bucket,
    metrics: Metrics,
}

impl ClaimCheckSink {
    /// `inner` with the claim check of `bucket` in front.
    pub fn new(inner: Box<dyn Sink>, bucket: Bucket, metrics: &Metrics) -> Self {
        Self {
            inner,
            bucket,
            metrics: metrics.clone(),
        }
    }

    /// Writes the value of every marked record, several at once, and puts the reference
    /// in its place; the first failure (after object_store's retries) fails the batch,
    /// naming the event and the object.
    async fn check_in(&self, records: &mut [Record]) -> Result<(), SinkError> {
        let mut jobs = Vec::new();
        for (i, r) in records.iter_mut().enumerate() {
            if !r.claim_check {
                continue;
            }
            if let Some(value) = r.value.take() {
                jobs.push((i, self.bucket.key(&r.topic, &r.event.id), value));
            }
        }
        let mut written = futures::stream::iter(jobs)
            .map(|(i, key, value)| async move {
                let len = value.len();
                let started = Instant::now();
                let put = self.bucket.put(&key, value).await;
                (i, key, len, started.elapsed(), put)
            })
            .buffer_unordered(PARALLEL_PUTS);
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
        }
        Ok(())
    }
}

impl Sink for ClaimCheckSink {
    fn send(&self, mut records: Vec<Record>) -> BoxFuture<'_, Result<Delivery, SinkError>> {
        Box::pin(async move {
            self.check_in(&mut records).await?;
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
