//! Waits until the topics `<prefix>.Type0…` together hold `count` more records than when
//! it started, by the brokers' end offsets (one batched ListOffsets request per poll, so
//! polling every 50 ms costs the broker next to nothing). Prints `baseline <n>` once it
//! has its starting point and `done <unix seconds>` when the count is reached.
//!
//!   cargo run --release --example await_offsets -- --prefix bench.x --count 1000000

use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Result};
use clap::Parser;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

#[derive(Parser)]
struct Args {
    /// Topic prefix: `<prefix>.Type0` … `<prefix>.Type<topics-1>`.
    #[arg(long)]
    prefix: String,
    /// Records to wait for, on top of what the topics hold at start.
    #[arg(long)]
    count: i64,
    #[arg(long, default_value_t = 100)]
    topics: u32,
    #[arg(long, default_value_t = 3)]
    partitions: i32,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 1800)]
    timeout_secs: u64,
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &args.bootstrap)
        .set("group.id", "bench-await-offsets")
        .create()?;
    let mut latest = TopicPartitionList::new();
    for t in 0..args.topics {
        for p in 0..args.partitions {
            latest.add_partition_offset(&format!("{}.Type{t}", args.prefix), p, Offset::End)?;
        }
    }
    let total = |c: &BaseConsumer| -> Result<i64> {
        let ends = c.offsets_for_times(latest.clone(), Duration::from_secs(10))?;
        Ok(ends
            .elements()
            .iter()
            .map(|e| e.offset().to_raw().unwrap_or(0).max(0))
            .sum())
    };
    let baseline = total(&consumer)?;
    println!("baseline {baseline}");
    std::io::stdout().flush()?;
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    loop {
        let now = total(&consumer)?;
        if now >= baseline + args.count {
            let t = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
            println!("done {t:.3} records {}", now - baseline);
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "only {} of {} records after {} s",
                now - baseline,
                args.count,
                args.timeout_secs
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
