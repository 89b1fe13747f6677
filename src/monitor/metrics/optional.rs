//! A gauge whose series is left out while its value is unknown: a sentinel such as -1
//! would break `max()`, averages and alert thresholds; an absent series does not.

use std::sync::{Arc, Mutex};

use prometheus_client::encoding::{EncodeGaugeValue, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::MetricType;

/// A gauge with no series until it is set, and none again once cleared.
#[derive(Debug)]
pub(super) struct OptionalGauge<N>(Arc<Mutex<Option<N>>>);

impl<N> Default for OptionalGauge<N> {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(None)))
    }
}

impl<N> Clone for OptionalGauge<N> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<N: Copy> OptionalGauge<N> {
    /// Sets the value, or leaves the series out when it is unknown.
    pub(super) fn set(&self, value: Option<N>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = value;
    }

    /// The value, when known.
    pub(super) fn get(&self) -> Option<N> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<N> EncodeMetric for OptionalGauge<N>
where
    N: EncodeGaugeValue + Copy + std::fmt::Debug + Send + Sync + 'static,
{
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        match self.get() {
            Some(value) => encoder.encode_gauge(&value),
            None => Ok(()),
        }
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Gauge
    }

    fn is_empty(&self) -> bool {
        self.get().is_none()
    }
}
