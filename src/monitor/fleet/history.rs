//! A source's figures over the last day, one sample per report of its leader: a ring
//! of fixed-size samples, so memory is bounded by the window, whoever leads.

use std::collections::VecDeque;

use serde::Serialize;

use super::SourceReport;

/// How far back a source's history goes.
pub const WINDOW_SECS: u32 = 24 * 3600;

/// The resolution at the default `monitor.interval_secs`: reports closer together than
/// their interval (at most this) replace the last sample (a takeover's immediate
/// report). A shorter interval keeps a finer, shorter history in the same memory.
pub const RESOLUTION_SECS: u32 = 10;

/// Samples kept per source at most: the window at the default resolution.
pub const CAPACITY: usize = (WINDOW_SECS / RESOLUTION_SECS) as usize;

/// One moment of one source: 24 bytes (`NaN` where a figure was unknown).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the epoch.
    pub at: u32,
    pub lag_secs: f32,
    pub runway_secs: f32,
    pub events_per_sec: f32,
    pub ack_latency_ms: f32,
    pub in_flight: f32,
}

impl Sample {
    fn of(report: &SourceReport) -> Self {
        let opt = |v: Option<f64>| v.map_or(f32::NAN, |v| v as f32);
        Self {
            at: (report.at_ms / 1000).max(0) as u32,
            lag_secs: opt(report.lag_ms.map(|ms| ms as f64 / 1000.0)),
            runway_secs: opt(report.runway_secs.map(|s| s as f64)),
            events_per_sec: report.events_per_sec as f32,
            ack_latency_ms: opt(report.ack_latency_ms),
            in_flight: report.in_flight as f32,
        }
    }
}

/// One source's samples, oldest first.
#[derive(Debug, Default)]
pub struct History {
    samples: VecDeque<Sample>,
}

/// A history as the API gives it: one array per figure, `null` where unknown.
#[derive(Debug, Serialize, PartialEq)]
pub struct Columns {
    pub at: Vec<u32>,
    pub lag_secs: Vec<Option<f32>>,
    pub runway_secs: Vec<Option<f32>>,
    pub events_per_sec: Vec<Option<f32>>,
    pub ack_latency_ms: Vec<Option<f32>>,
    pub in_flight: Vec<Option<f32>>,
}

impl History {
    /// Adds the leader's `report`, in time order; an older one than the newest sample
    /// (a former leader's last report read after the new one's) is left out.
    pub fn add(&mut self, report: &SourceReport) {
        let sample = Sample::of(report);
        let resolution = (report.interval_secs as u32).clamp(1, RESOLUTION_SECS);
        match self.samples.back_mut() {
            Some(last) if sample.at < last.at => return,
            Some(last) if sample.at - last.at < resolution => *last = sample,
            _ => self.samples.push_back(sample),
        }
        let oldest = sample.at.saturating_sub(WINDOW_SECS);
        while self.samples.len() > CAPACITY || self.samples.front().is_some_and(|s| s.at < oldest) {
            self.samples.pop_front();
        }
    }

    pub(super) fn len(&self) -> usize {
        self.samples.len()
    }

    /// The samples since `since` (seconds since the epoch), at most `points` of them:
    /// evenly thinned (each kept sample stands for its neighbours) when there are more.
    pub fn columns(&self, since: u32, points: usize) -> Columns {
        let chosen: Vec<&Sample> = self.samples.iter().filter(|s| s.at >= since).collect();
        let step = chosen.len().div_ceil(points.max(1)).max(1);
        let kept: Vec<&Sample> = chosen.into_iter().step_by(step).collect();
        let col = |f: fn(&Sample) -> f32| -> Vec<Option<f32>> {
            kept.iter()
                .map(|s| Some(f(s)).filter(|v| v.is_finite()))
                .collect()
        };
        Columns {
            at: kept.iter().map(|s| s.at).collect(),
            lag_secs: col(|s| s.lag_secs),
            runway_secs: col(|s| s.runway_secs),
            events_per_sec: col(|s| s.events_per_sec),
            ack_latency_ms: col(|s| s.ack_latency_ms),
            in_flight: col(|s| s.in_flight),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(at_secs: i64, lag_ms: Option<i64>) -> SourceReport {
        serde_json::from_value(serde_json::json!({
            "source": "orders", "instance": "a", "role": "leader", "state": "running",
            "at_ms": at_secs * 1000, "interval_secs": 10, "lag_ms": lag_ms,
            "events_per_sec": 5.0, "in_flight": 3,
        }))
        .unwrap()
    }

    #[test]
    fn a_day_at_ten_seconds_is_the_bound_and_the_oldest_go_first() {
        let mut h = History::default();
        let start = 1_700_000_000;
        for i in 0..(CAPACITY as i64 + 500) {
            h.add(&report(start + i * 10, Some(i)));
        }
        assert_eq!(h.len(), CAPACITY);
        let all = h.columns(0, usize::MAX);
        assert_eq!(all.at.len(), CAPACITY);
        assert_eq!(
            *all.at.last().unwrap() - all.at[0],
            WINDOW_SECS - RESOLUTION_SECS
        );
        assert_eq!(std::mem::size_of::<Sample>(), 24);
    }

    #[test]
    fn close_reports_replace_the_last_sample_and_late_ones_are_left_out() {
        let mut h = History::default();
        h.add(&report(1000, Some(1000)));
        h.add(&report(1003, Some(2000)));
        h.add(&report(995, Some(9000)));
        h.add(&report(1020, None));
        let c = h.columns(0, 100);
        assert_eq!(c.at, vec![1003, 1020]);
        assert_eq!(c.lag_secs, vec![Some(2.0), None]);
    }

    #[test]
    fn a_long_window_is_thinned_to_the_points_asked() {
        let mut h = History::default();
        for i in 0..1000 {
            h.add(&report(10_000 + i * 10, Some(0)));
        }
        assert_eq!(h.columns(0, 100).at.len(), 100);
        assert_eq!(h.columns(10_000 + 9_900, 100).at.len(), 10);
    }
}
