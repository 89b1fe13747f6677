//! What happens to rows that cannot be records (`outbox.on_invalid`): stop, a dead
//! letter, a skip, or parking their aggregate.

use tracing::warn;

use super::PipelineError;
use crate::config::Config;
use crate::monitor::Metrics;
use crate::outbox::OnInvalid;
use crate::route::parking::Parking;
use crate::route::{Batch, InvalidAt, Router};

/// What to do with rows that cannot be records (`outbox.on_invalid`).
#[derive(Debug)]
pub(crate) struct InvalidPolicy {
    on_invalid: OnInvalid,
    dead_letter_topic: String,
    /// `park`: the parked aggregates, read back from the parking topic when the run
    /// started; `None` where nothing parks (rows read from tables).
    parking: Option<Parking>,
}

impl InvalidPolicy {
    pub(crate) fn of(config: &Config) -> Self {
        Self {
            on_invalid: config.outbox.on_invalid,
            dead_letter_topic: config.outbox.dead_letter_topic.clone(),
            parking: None,
        }
    }

    /// With `park` on the binlog stream, the parked aggregates.
    pub(crate) fn parking(&mut self) -> Option<&mut Parking> {
        self.parking.as_mut()
    }

    /// The binlog stream's policy: with `park`, the parked aggregates `parking` holds.
    pub(crate) fn with_parking(mut self, parking: Option<Parking>) -> Self {
        self.parking = parking;
        self
    }

    /// Fails on the first invalid row, or dead-letters / skips each one, logged with
    /// table, position, event id and reason, and counted; or parks its aggregate and
    /// diverts the parked aggregates' events, in order.
    pub(crate) fn apply(
        &mut self,
        router: &Router,
        metrics: &Metrics,
        batch: &mut Batch,
    ) -> Result<(), PipelineError> {
        let policy = self.on_invalid.as_str();
        for _ in &batch.invalid {
            metrics.invalid(policy);
        }
        if self.on_invalid == OnInvalid::Park {
            return self.park(router, metrics, batch);
        }
        for InvalidAt { event: bad, .. } in std::mem::take(&mut batch.invalid) {
            match self.on_invalid {
                OnInvalid::Fail => return Err(PipelineError::Invalid(bad)),
                OnInvalid::DeadLetter => {
                    warn!(error = %bad, topic = %self.dead_letter_topic, policy, "invalid outbox row sent to the dead-letter topic");
                    metrics.dead_letter(&self.dead_letter_topic);
                    batch.records.push(router.dead_letter(
                        &self.dead_letter_topic,
                        &bad,
                        batch.commit_time_ms,
                    ));
                }
                OnInvalid::Skip => warn!(error = %bad, policy, "invalid outbox row skipped"),
                OnInvalid::Park => unreachable!("parked above"),
            }
        }
        Ok(())
    }

    fn park(
        &mut self,
        router: &Router,
        metrics: &Metrics,
        batch: &mut Batch,
    ) -> Result<(), PipelineError> {
        let Some(parking) = self.parking.as_mut() else {
            // Rows read from a table (snapshot, recover, replay) have no stream order to
            // keep: the first invalid one stops them, as `fail` would.
            return match std::mem::take(&mut batch.invalid).into_iter().next() {
                Some(InvalidAt { event, .. }) => Err(PipelineError::InvalidTableRow(event)),
                None => Ok(()),
            };
        };
        let before = parking.events();
        parking.divert(router, batch)?;
        if parking.events() != before {
            metrics.set_parked(parking.aggregates(), parking.events(), parking.oldest_ms());
        }
        Ok(())
    }
}
