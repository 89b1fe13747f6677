//! Kafka as the tests see it: a handle per cluster that counts and reads what arrived,
//! private brokers, and stopping the shared one.

use super::*;

/// A Kafka cluster the tests read: the local broker (`Kafka::local()`, also behind the
/// free functions below) or another one by its address (the 3-node cluster, a private
/// broker).
#[derive(Clone, Debug)]
pub struct Kafka {
    bootstrap: String,
}

/// `Kafka::local().drain_and_stop(…)`.
pub fn drain_and_stop(router: &mut RouterProcess, topics: &[String], total: usize) -> String {
    Kafka::local().drain_and_stop(router, topics, total)
}

/// `Kafka::local().count(…)`.
pub fn count(topics: &[String]) -> i64 {
    Kafka::local().count(topics)
}

/// `Kafka::local().wait_for_count(…)`.
pub fn wait_for_count(topics: &[String], n: i64, timeout: Duration) -> i64 {
    Kafka::local().wait_for_count(topics, n, timeout)
}

/// Waits until `n` distinct event ids are in the topics of the local broker (offsets
/// count transaction markers and re-sent records too); returns how many there are.
pub fn wait_for_ids(topics: &[String], n: usize, timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    loop {
        let ids: std::collections::HashSet<String> = read_all(topics).iter().map(Msg::id).collect();
        if ids.len() >= n || Instant::now() > deadline {
            return ids.len();
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// `Kafka::local().read_all(…)`.
pub fn read_all(topics: &[String]) -> Vec<Msg> {
    Kafka::local().read_all(topics)
}

impl Kafka {
    /// The single local broker most tests use.
    pub fn local() -> Self {
        Self::at(&kafka_bootstrap())
    }

    /// The cluster at `bootstrap`.
    pub fn at(bootstrap: &str) -> Self {
        Self {
            bootstrap: bootstrap.to_string(),
        }
    }

    /// Waits until the topics hold `total` events, then stops the router gracefully;
    /// returns its log.
    pub fn drain_and_stop(
        &self,
        router: &mut RouterProcess,
        topics: &[String],
        total: usize,
    ) -> String {
        let seen = self.wait_for_count(topics, total as i64, Duration::from_secs(120));
        assert!(
            seen >= total as i64,
            "only {seen} of {total} events arrived:\n{}",
            router.log()
        );
        // Re-sent records count too: wait until `total` distinct event ids are there, or a
        // stop while the router still catches up reads as a loss.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let ids: std::collections::HashSet<String> =
                self.read_all(topics).iter().map(Msg::id).collect();
            if ids.len() >= total || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        std::thread::sleep(Duration::from_secs(1));
        let status = router.stop(Duration::from_secs(30));
        let log = router.log();
        assert!(status.success(), "graceful stop failed ({status}):\n{log}");
        // rust-rdkafka reports the end of a followed partition as an error too
        // (`kafka::Reader`): an operator must not see one ERROR line per record.
        assert!(
            !log.contains("PartitionEOF"),
            "the end of a partition logged as an error:\n{log}"
        );
        log
    }

    /// Total messages now in the topics (0 for topics that do not exist yet).
    pub fn count(&self, topics: &[String]) -> i64 {
        let c = consumer(&self.bootstrap);
        let mut total = 0;
        for t in topics {
            let Ok(md) = c.fetch_metadata(Some(t), Duration::from_secs(5)) else {
                continue;
            };
            for topic in md.topics() {
                if topic.error().is_some() {
                    continue;
                }
                for p in topic.partitions() {
                    if let Ok((lo, hi)) = c.fetch_watermarks(t, p.id(), Duration::from_secs(5)) {
                        total += hi - lo;
                    }
                }
            }
        }
        total
    }

    /// Waits until the topics hold at least `n` messages; returns the count seen.
    pub fn wait_for_count(&self, topics: &[String], n: i64, timeout: Duration) -> i64 {
        let deadline = Instant::now() + timeout;
        loop {
            let c = self.count(topics);
            if c >= n || Instant::now() > deadline {
                return c;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Every message now in the topics, in offset order per partition.
    pub fn read_all(&self, topics: &[String]) -> Vec<Msg> {
        let c = consumer(&self.bootstrap);
        let mut tpl = TopicPartitionList::new();
        let mut remaining: HashMap<(String, i32), i64> = HashMap::new();
        for t in topics {
            // A topic skipped because its metadata did not come in time would read as
            // a loss: asked again, and a failure is the harness's, said as such.
            let md = retried(&format!("metadata of {t}"), || {
                c.fetch_metadata(Some(t), Duration::from_secs(5))
            });
            for topic in md.topics().iter().filter(|t| t.error().is_none()) {
                for p in topic.partitions() {
                    let (lo, hi) = watermarks(&c, t, p.id());
                    if hi > lo {
                        tpl.add_partition_offset(t, p.id(), Offset::Offset(lo))
                            .unwrap();
                        remaining.insert((t.clone(), p.id()), hi);
                    }
                }
            }
        }
        let mut out = Vec::new();
        if remaining.is_empty() {
            return out;
        }
        c.assign(&tpl).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !remaining.is_empty() && Instant::now() < deadline {
            let Some(m) = c.poll(Duration::from_millis(500)) else {
                continue;
            };
            let m = match m {
                Ok(m) => m,
                Err(rdkafka::error::KafkaError::PartitionEOF(_)) => {
                    let positions = c.position().unwrap();
                    for e in positions.elements() {
                        let key = (e.topic().to_string(), e.partition());
                        if let (Offset::Offset(at), Some(hi)) = (e.offset(), remaining.get(&key)) {
                            if at >= *hi {
                                remaining.remove(&key);
                            }
                        }
                    }
                    continue;
                }
                Err(e) => panic!("kafka read: {e}"),
            };
            let key = (m.topic().to_string(), m.partition());
            let mut headers = HashMap::new();
            if let Some(h) = m.headers() {
                for hd in h.iter() {
                    headers.insert(hd.key.to_string(), hd.value.unwrap_or_default().to_vec());
                }
            }
            out.push(Msg {
                topic: m.topic().to_string(),
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().unwrap_or_default().to_vec(),
                payload: m.payload().map(<[u8]>::to_vec),
                headers,
                timestamp_ms: m.timestamp().to_millis(),
            });
            if remaining.get(&key).is_some_and(|hi| m.offset() + 1 >= *hi) {
                remaining.remove(&key);
            }
        }
        assert!(
            remaining.is_empty(),
            "could not read partitions {remaining:?} to their end"
        );
        out
    }
}

/// A message as read back from Kafka.
#[derive(Clone, Debug)]
pub struct Msg {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Vec<u8>,
    pub payload: Option<Vec<u8>>,
    pub headers: HashMap<String, Vec<u8>>,
    pub timestamp_ms: Option<i64>,
}

impl Msg {
    pub fn id(&self) -> String {
        String::from_utf8(self.headers.get("id").cloned().unwrap_or_default()).unwrap()
    }
}

fn consumer(bootstrap: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "outbox-router-tests")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        // Transactions end in control records no message has the offset of: the end
        // of a partition is told by EOF and the position, not the last offset.
        .set("enable.partition.eof", "true")
        .set("fetch.message.max.bytes", "16000000")
        .create()
        .unwrap()
}

/// A partition's watermarks, asked again while its leader is not answering yet (a
/// topic the router just created, a loaded machine).
fn watermarks(c: &BaseConsumer, topic: &str, partition: i32) -> (i64, i64) {
    retried(&format!("watermarks of {topic}/{partition}"), || {
        c.fetch_watermarks(topic, partition, Duration::from_secs(5))
    })
}

/// `ask`, asked again for 30 s while it fails; then the harness panics, naming `what`.
fn retried<T>(what: &str, ask: impl Fn() -> rdkafka::error::KafkaResult<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match ask() {
            Ok(answer) => return answer,
            Err(e) if Instant::now() < deadline => {
                eprintln!("{what}: {e}; asking again");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("test harness: {what}: {e}"),
        }
    }
}

/// `[delivery]` keys of exactly-once mode with a transactional id and a checkpoint
/// topic of the test's own (on a shared one, a router a test killed inside a Kafka
/// transaction holds every other test's marker read back until that transaction times
/// out); `small`: Kafka transactions of at most 500 records / 50 ms, so crashes land
/// inside and between them.
pub fn exactly_once_delivery(name: &str, small: bool) -> String {
    let small = if small {
        "\ncommit_max_records = 500\ncommit_max_ms = 50"
    } else {
        ""
    };
    let pid = std::process::id();
    format!(
        "mode = \"exactly-once\"\ntransactional_id = \"it-{name}-{pid}\"\ncheckpoint_topic = \"it.checkpoints.{name}.{pid}\"{small}"
    )
}

/// A single Kafka broker of the test's own on `port` (state in a temp dir, the shared
/// broker's jars): for tests that stop it or need it brand new without disturbing the
/// broker every other test uses. Stopped when dropped.
pub struct PrivateBroker {
    state: tempfile::TempDir,
    pub port: u16,
}

impl PrivateBroker {
    /// Prepares (does not start) a broker on `port`.
    pub fn new(port: u16) -> Self {
        let state = tempfile::tempdir().unwrap();
        let local = std::env::var("OUTBOX_LOCAL_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| repo_root().join(".local"));
        std::fs::create_dir_all(state.path().join("kafka")).unwrap();
        std::os::unix::fs::symlink(local.join("kafka/libs"), state.path().join("kafka/libs"))
            .unwrap();
        Self { state, port }
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `scripts/services ACTION kafka` for this broker.
    pub fn services(&self, action: &str) {
        let status = Command::new(repo_root().join("scripts/services"))
            .args([action, "kafka"])
            .env("OUTBOX_LOCAL_DIR", self.state.path())
            .env("OUTBOX_KAFKA_PORT", self.port.to_string())
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "private broker {action} failed");
    }

    /// SIGSTOP (`-STOP`) or SIGCONT (`-CONT`) to the broker: frozen, its sockets stay
    /// open and nothing answers — a broker in a long GC pause or a stalled VM.
    pub fn signal(&self, sig: &str) {
        let pid = std::fs::read_to_string(self.state.path().join("kafka/kafka.pid"))
            .expect("private broker pid file");
        let status = Command::new("kill")
            .args([sig, pid.trim()])
            .status()
            .unwrap();
        assert!(status.success(), "kill {sig} of the private broker failed");
    }

    /// Forgets all topics (the next `up` is a brand-new cluster).
    pub fn wipe(&self) {
        let _ = std::fs::remove_dir_all(self.state.path().join("kafka/data"));
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("scripts/services"))
            .args(["down", "kafka"])
            .env("OUTBOX_LOCAL_DIR", self.state.path())
            .env("OUTBOX_KAFKA_PORT", self.port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// SIGKILLs the local Kafka broker.
pub fn kill_kafka() {
    let local = std::env::var("OUTBOX_LOCAL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo_root().join(".local"));
    let pid = std::fs::read_to_string(local.join("kafka/kafka.pid")).expect("kafka pid file");
    let status = Command::new("kill")
        .args(["-9", pid.trim()])
        .status()
        .unwrap();
    assert!(status.success());
    // Wait until it is gone, so `services up` starts a new one.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Command::new("kill")
        .args(["-0", pid.trim()])
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
    {
        assert!(Instant::now() < deadline, "kafka survived SIGKILL");
        std::thread::sleep(Duration::from_millis(100));
    }
}
