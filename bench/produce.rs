//! Raw produce limit for the benchmark's data shape: N records spread like the backlog
//! (100 topics `<prefix>.Type<n>`, keys `agg-<n % 10000>`, an `id` header, ≈200-byte
//! JSON values) produced as fast as librdkafka takes them, with the router's producer
//! settings (acks=all, idempotence, lz4, linger 5 ms). No binlog, no checkpoint: what
//! Kafka alone allows on this machine for exactly this traffic.
//!
//!   cargo run --release --example produce -- --prefix bench.raw --count 1000000
//!
//! `--transactional-id ID` sends them all in one Kafka transaction instead.
//!
//! Prints `records=… seconds=… records_per_sec=… records_per_request=…` once every record
//! is acknowledged (the last from librdkafka's statistics: records per produce request).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Parser;
use outbox_router::kafka::KafkaConfig;
use outbox_router::kafka::{client_config, transactional_config};
use outbox_router::monitor::Produced;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::ClientContext;

#[derive(Parser)]
struct Args {
    #[arg(long)]
    prefix: String,
    #[arg(long, default_value_t = 1_000_000)]
    count: u64,
    #[arg(long, default_value_t = 100)]
    topics: u64,
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    /// Produce everything in one Kafka transaction of this `transactional.id` (the
    /// raw limit for exactly-once mode: Kafka's own cost of transactional appends).
    #[arg(long)]
    transactional_id: Option<String>,
}

/// Counts acknowledgements and failures, and keeps the newest statistics' totals.
#[derive(Default)]
struct Counts {
    acked: AtomicU64,
    failed: AtomicU64,
    produced: Mutex<Produced>,
}

struct Ctx(Arc<Counts>);
impl ClientContext for Ctx {
    fn stats(&self, stats: rdkafka::Statistics) {
        *self.0.produced.lock().unwrap() = Produced::of(&stats);
    }
}
impl ProducerContext for Ctx {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => self.0.acked.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.0.failed.fetch_add(1, Ordering::Relaxed),
        };
    }
}

fn main() -> Result<()> {
    // From process start, as the router is timed: client creation and the first
    // metadata count.
    let start = Instant::now();
    let args = Args::parse();
    let counts = Arc::new(Counts::default());
    // Exactly the router's producer configuration.
    let kafka = KafkaConfig {
        bootstrap_servers: args.bootstrap.clone(),
        ..Default::default()
    };
    let mut config = match &args.transactional_id {
        // Exactly the router's exactly-once producer settings.
        Some(id) => transactional_config(&kafka, id),
        None => client_config(&kafka),
    };
    // Statistics often enough to see the last requests soon after the flush.
    config.set("statistics.interval.ms", "500");
    let producer: ThreadedProducer<Ctx> = config.create_with_context(Ctx(counts.clone()))?;
    if args.transactional_id.is_some() {
        producer.init_transactions(Duration::from_secs(30))?;
        producer.begin_transaction()?;
    }
    let topics: Vec<String> = (0..args.topics)
        .map(|t| format!("{}.Type{t}", args.prefix))
        .collect();
    let pad = "x".repeat(160);
    for seq in 1..=args.count {
        let id = format!("raw-{seq}");
        let key = format!("agg-{}", seq % 10_000);
        let value = format!("{{\"seq\":{seq},\"pad\":\"{pad}\"}}");
        let headers = OwnedHeaders::new_with_capacity(1).insert(Header {
            key: "id",
            value: Some(&id),
        });
        let mut record = BaseRecord::to(&topics[(seq % args.topics) as usize])
            .key(&key)
            .payload(&value)
            .headers(headers);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => bail!("produce failed: {e}"),
            }
        }
    }
    match args.transactional_id {
        Some(_) => producer.commit_transaction(Duration::from_secs(120))?,
        None => producer.flush(Duration::from_secs(120))?,
    }
    let secs = start.elapsed().as_secs_f64();
    let (acked, failed) = (
        counts.acked.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed),
    );
    if acked != args.count || failed > 0 {
        bail!("{acked} of {} acknowledged, {failed} failed", args.count);
    }
    // The statistics after the last request (two intervals).
    std::thread::sleep(Duration::from_millis(1100));
    let produced = *counts.produced.lock().unwrap();
    println!(
        "records={acked} seconds={secs:.2} records_per_sec={:.0} records_per_request={:.1}",
        acked as f64 / secs,
        produced.records_per_request()
    );
    Ok(())
}
