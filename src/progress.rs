//! Progress of a long operator command (`reconcile`, `prune`, `recover`, `replay`, the
//! initial snapshot): rows done, the total when known, the rate and the time left. A bar
//! on a terminal; elsewhere (a log file, a container) a log line every
//! `OUTBOX_ROUTER_PROGRESS_SECS` seconds (10 by default; 0: after every step).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// One task's progress; dropped or `finish`ed when the task ends.
pub struct CommandProgress {
    task: &'static str,
    total: Option<u64>,
    done: u64,
    started: Instant,
    last_line: Instant,
    every: Duration,
    bar: Option<ProgressBar>,
}

impl CommandProgress {
    /// Starts reporting `task` (e.g. "recover: rows published") of `total` units when known.
    pub fn new(task: &'static str, total: Option<u64>) -> Self {
        let every = std::env::var("OUTBOX_ROUTER_PROGRESS_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .map_or(Duration::from_secs(10), Duration::from_secs);
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = match total {
                Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()),
                None => ProgressBar::new_spinner(),
            };
            let template = match total {
                Some(_) => "{msg} {wide_bar} {human_pos}/{human_len} {per_sec} ETA {eta}",
                None => "{msg} {spinner} {human_pos} {per_sec}",
            };
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style);
            }
            bar.set_message(task);
            bar
        });
        let now = Instant::now();
        Self {
            task,
            total,
            done: 0,
            started: now,
            last_line: now,
            every,
            bar,
        }
    }

    /// Counts `n` more units done.
    pub fn add(&mut self, n: u64) {
        self.done += n;
        if let Some(bar) = &self.bar {
            bar.set_position(self.done);
            return;
        }
        if self.last_line.elapsed() >= self.every {
            self.last_line = Instant::now();
            self.log_line();
        }
    }

    /// Rows done per second so far.
    fn rate(&self) -> f64 {
        self.done as f64 / self.started.elapsed().as_secs_f64().max(1e-3)
    }

    fn log_line(&self) {
        let rate = self.rate();
        let eta_secs = self
            .total
            .filter(|_| rate > 0.0)
            .map(|t| (t.saturating_sub(self.done) as f64 / rate).round() as u64);
        tracing::info!(
            task = self.task,
            done = self.done,
            total = ?self.total,
            per_sec = rate.round() as u64,
            eta_secs = ?eta_secs,
            "progress"
        );
    }

    /// Ends the report: the bar is cleared, the log gets its last line.
    pub fn finish(self) {
        match &self.bar {
            Some(bar) => bar.finish_and_clear(),
            None => self.log_line(),
        }
    }
}
