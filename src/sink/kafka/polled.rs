//! The producer's own thread for its delivery reports, woken by librdkafka when one is
//! queued instead of waking on a timer.
//!
//! rdkafka's `ThreadedProducer` polls in 100 ms waits, and its poll loop truncates the
//! time left to whole milliseconds: through the last millisecond of every wait it polls
//! with a zero timeout, over and over. That is about 1 % of a core per producer, idle
//! (measured: 45 % of a core for a pool of 50 idle sources, 93 % of it in those
//! threads). Here the thread sleeps until librdkafka's queue callback says the queue is
//! no longer empty, then serves it with non-blocking polls until it is.

use std::ffi::c_void;
use std::ops::Deref;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::config::{ClientConfig, FromClientConfigAndContext};
use rdkafka::error::KafkaResult;
use rdkafka::producer::{BaseProducer, Producer, ProducerContext};

/// The longest the thread sleeps without being woken: a bound on a wake-up that never
/// came, not a poll interval.
const IDLE_CHECK: Duration = Duration::from_millis(250);

/// The thread's name (as `/proc` shows it: at most 15 bytes).
const THREAD_NAME: &str = "kafka reports";

/// A `BaseProducer` whose delivery reports are served on a thread of its own.
pub(super) struct PolledProducer<C: ProducerContext + 'static> {
    // Dropped in this order: the queue handle is released before the client it is of.
    thread: Option<JoinHandle<()>>,
    queue: Arc<MainQueue>,
    wake: Arc<Wake>,
    producer: Arc<BaseProducer<C>>,
}

impl<C: ProducerContext + 'static> PolledProducer<C> {
    pub(super) fn from_config_and_context(config: &ClientConfig, context: C) -> KafkaResult<Self> {
        let producer = Arc::new(BaseProducer::from_config_and_context(config, context)?);
        let wake = Arc::new(Wake::default());
        // SAFETY: the client pointer is valid while `producer` lives, and the queue
        // handle holds its own reference to the queue until `MainQueue` drops it.
        let queue = Arc::new(MainQueue(unsafe {
            rd::rd_kafka_queue_get_main(producer.client().native_ptr())
        }));
        // SAFETY: the callback only touches the `Wake` behind the pointer, which lives
        // (held by `self.wake`) until `Drop` has switched the callback off; librdkafka
        // calls it under the queue's lock, which switching it off also takes, so no call
        // is under way once that returns.
        unsafe {
            rd::rd_kafka_queue_cb_event_enable(
                queue.0,
                Some(on_queued),
                Arc::as_ptr(&wake) as *mut c_void,
            )
        };
        let thread = {
            let (producer, wake, queue) = (producer.clone(), wake.clone(), queue.clone());
            std::thread::Builder::new()
                .name(THREAD_NAME.into())
                .spawn(move || serve(&producer, &wake, &queue))
                .expect("cannot start the producer's thread")
        };
        Ok(Self {
            thread: Some(thread),
            queue,
            wake,
            producer,
        })
    }
}

impl<C: ProducerContext + 'static> Deref for PolledProducer<C> {
    type Target = BaseProducer<C>;

    fn deref(&self) -> &BaseProducer<C> {
        &self.producer
    }
}

impl<C: ProducerContext + 'static> Drop for PolledProducer<C> {
    fn drop(&mut self) {
        self.wake.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // SAFETY: see `from_config_and_context`; after this no callback can reach `wake`.
        unsafe { rd::rd_kafka_queue_cb_event_enable(self.queue.0, None, std::ptr::null_mut()) };
        // The producer's own drop (purge, flush) polls for itself.
    }
}

/// Serves the queue until stopped: everything in it, then sleep until woken.
fn serve<C: ProducerContext>(producer: &BaseProducer<C>, wake: &Wake, queue: &MainQueue) {
    loop {
        while queue.len() > 0 {
            // One event, without waiting: no deadline for rdkafka to spin out.
            producer.poll(Duration::ZERO);
        }
        if !wake.wait(IDLE_CHECK) {
            return;
        }
    }
}

/// librdkafka's queue callback: the queue was empty and has an event now. Runs on one
/// of librdkafka's threads, under the queue's lock: it only sets a flag.
unsafe extern "C" fn on_queued(_client: *mut rd::rd_kafka_t, opaque: *mut c_void) {
    // SAFETY: `opaque` is the `Wake` registered with the callback, alive until the
    // callback is switched off.
    let wake = unsafe { &*(opaque as *const Wake) };
    wake.notify();
}

#[derive(Default)]
struct Wake {
    state: Mutex<WakeState>,
    changed: Condvar,
}

#[derive(Default)]
struct WakeState {
    queued: bool,
    stopped: bool,
}

impl Wake {
    fn notify(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).queued = true;
        self.changed.notify_one();
    }

    fn stop(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).stopped = true;
        self.changed.notify_one();
    }

    /// Sleeps until something was queued, stopped, or `longest` passed; false once
    /// stopped. A notification that came while the thread was serving is not lost: the
    /// flag stays set until this takes it.
    fn wait(&self, longest: Duration) -> bool {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (mut state, _) = self
            .changed
            .wait_timeout_while(state, longest, |s| !s.queued && !s.stopped)
            .unwrap_or_else(|p| p.into_inner());
        state.queued = false;
        !state.stopped
    }
}

/// A handle on the client's main queue, where the producer's events arrive.
struct MainQueue(*mut rd::rd_kafka_queue_t);

// SAFETY: librdkafka's queue handles may be used from any thread.
unsafe impl Send for MainQueue {}
unsafe impl Sync for MainQueue {}

impl MainQueue {
    fn len(&self) -> usize {
        // SAFETY: a valid handle until dropped.
        unsafe { rd::rd_kafka_queue_length(self.0) }
    }
}

impl Drop for MainQueue {
    fn drop(&mut self) {
        // SAFETY: the handle came from `rd_kafka_queue_get_main` and is released once.
        unsafe { rd::rd_kafka_queue_destroy(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::producer::DefaultProducerContext;
    use std::time::Instant;

    /// CPU time of this process's threads named `name`, from the scheduler's account.
    fn cpu_of_threads(name: &str) -> Duration {
        let mut ns = 0;
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim_end() == name {
                let stat = std::fs::read_to_string(task.path().join("schedstat")).unwrap();
                ns += stat
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap();
            }
        }
        Duration::from_nanos(ns)
    }

    fn unreachable_broker() -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", "127.0.0.1:1")
            .set("log_level", "0");
        config
    }

    fn idle_cpu(thread: &str, idle: Duration) -> Duration {
        let before = cpu_of_threads(thread);
        let started = Instant::now();
        std::thread::sleep(idle);
        assert!(started.elapsed() >= idle);
        cpu_of_threads(thread) - before
    }

    /// The same check run on rdkafka's `ThreadedProducer` (its thread is "producer
    /// pollin" in /proc) failed: 17.3 ms of CPU in the 2 s.
    #[test]
    fn an_idle_producer_does_not_spin() {
        let producer =
            PolledProducer::from_config_and_context(&unreachable_broker(), DefaultProducerContext)
                .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let spent = idle_cpu(THREAD_NAME, Duration::from_secs(2));
        drop(producer);
        assert!(
            spent < Duration::from_millis(4),
            "the idle report thread spent {spent:?} of CPU in 2 s"
        );
    }
}
