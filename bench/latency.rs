//! Steady-state latency probe: commits single-row outbox transactions at a fixed rate
//! and measures, per event, the time from the writer's COMMIT returning to a consumer
//! receiving the record (matched by the event id header). Works for any contender that
//! routes `Type<n>` aggregate types to `<prefix>.Type<n>` topics with an `id` header.
//!
//!   cargo run --release --example latency -- --db bench --prefix bench.x --rate 5000 --seconds 60
//!
//! Prints one line: `rate=… sent=… received=… p50_ms=… p99_ms=… max_ms=…`; exits 1 if
//! any event did not arrive.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use mysql_async::binlog::value::BinlogValue;
use mysql_async::prelude::Queryable;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

#[derive(Parser)]
struct Args {
    /// Database holding the `outbox` table.
    #[arg(long)]
    db: String,
    /// Topic prefix: events go to `<prefix>.Type0` … `<prefix>.Type<types-1>`.
    #[arg(long)]
    prefix: String,
    /// Committed events per second.
    #[arg(long, default_value_t = 1000)]
    rate: u32,
    /// How long to write.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Aggregate types (topics).
    #[arg(long, default_value_t = 10)]
    types: u32,
    /// Concurrent writer connections (one commit at a time each).
    #[arg(long, default_value_t = 8)]
    writers: u32,
    #[arg(long, default_value = "mysql://app:app-secret@127.0.0.1:3307")]
    mysql: String,
    #[arg(long, default_value = "127.0.0.1:9092")]
    bootstrap: String,
    /// No CDC at all: each writer also produces its event to Kafka itself right after
    /// COMMIT (acks=all, linger 0). Measures the floor any binlog connector sits on.
    #[arg(long)]
    direct: bool,
    /// With --direct: hand each event to the producer and go on without waiting for its
    /// delivery (as a connector does), instead of one event in flight per writer.
    #[arg(long)]
    no_wait: bool,
    /// With --direct: the producer's linger.ms (0: send at once; the router's default is 5)
    /// and compression (the router's default is lz4).
    #[arg(long, default_value_t = 0)]
    linger_ms: u32,
    #[arg(long, default_value = "none")]
    compression: String,
    /// Switch the topics to broker (LogAppendTime) timestamps first and also report the
    /// commit → broker part of the latency, to tell the source side from the consumer's.
    #[arg(long)]
    split: bool,
    /// No Kafka: the probe reads the binlog itself with the router's own reader and
    /// measures commit → transaction in the reader (MariaDB's dump thread plus decoding).
    #[arg(long)]
    source_only: bool,
}

/// Where the probe sees events arrive.
enum Arrivals {
    Kafka(StreamConsumer),
    Binlog(
        Box<outbox_router::source::BinlogReader>,
        std::collections::VecDeque<String>,
    ),
}

impl Arrivals {
    /// The next event id seen, with the broker's append time when it carries one.
    async fn next(&mut self) -> Result<Option<(String, Option<i64>)>> {
        match self {
            Arrivals::Kafka(consumer) => {
                let msg = consumer.recv().await.context("consuming")?;
                let ts = match msg.timestamp() {
                    rdkafka::Timestamp::LogAppendTime(ms) => Some(ms),
                    _ => None,
                };
                Ok(msg
                    .headers()
                    .and_then(|h| {
                        h.iter()
                            .find(|h| h.key == "id")
                            .and_then(|h| h.value)
                            .map(|v| String::from_utf8_lossy(v).trim_matches('"').to_string())
                    })
                    .map(|id| (id, ts)))
            }
            Arrivals::Binlog(reader, pending) => {
                while pending.is_empty() {
                    let txn = reader.next_transaction().await?;
                    for change in txn.changes {
                        // event_id is the table's first column.
                        if let Some(BinlogValue::Value(mysql_async::Value::Bytes(b))) =
                            change.row.as_ref().and_then(|r| r.get(0))
                        {
                            pending.push_back(String::from_utf8_lossy(b).into_owned());
                        }
                    }
                }
                Ok(pending.pop_front().map(|id| (id, None)))
            }
        }
    }
}

/// The router's binlog reader on the probe's table, from the current position.
async fn binlog_arrivals(args: &Args) -> Result<Arrivals> {
    use outbox_router::pattern::Pattern;
    use outbox_router::source::{server, BinlogReader};
    let url = args.mysql.replace("app:app-secret", "cdc:cdc-secret");
    let mut conn = mysql_async::Conn::from_url(&url).await?;
    let flavor = server::flavor(&mut conn).await?;
    let start = server::current_position(&mut conn, flavor).await?;
    let server_id = 900_000 + std::process::id() % 90_000;
    let table = Pattern::new(&format!("{}.outbox", args.db));
    let reader = BinlogReader::start(
        conn,
        flavor,
        server_id,
        start,
        false,
        &[table],
        Duration::from_secs(1),
    )
    .await?;
    Ok(Arrivals::Binlog(Box::new(reader), Default::default()))
}

/// Commit instants by event id, filled by writers, drained by the consumer.
type Committed = Arc<Mutex<HashMap<String, (Instant, i64)>>>;

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.split {
        log_append_time(&args).await?;
    }
    let mut arrivals = if args.source_only {
        binlog_arrivals(&args).await?
    } else {
        Arrivals::Kafka(assigned_consumer(&args).await?)
    };
    let committed: Committed = Default::default();
    let total = args.rate as u64 * args.seconds;
    let run = format!("{}", chrono_free_run_id());

    let started = Instant::now();
    let direct: Option<FutureProducer> = if args.direct {
        // The router's producer configuration with this run's linger and compression.
        let mut kafka = outbox_router::kafka::KafkaConfig {
            bootstrap_servers: args.bootstrap.clone(),
            ..Default::default()
        };
        for (k, v) in [
            ("linger.ms", args.linger_ms.to_string()),
            ("compression.type", args.compression.clone()),
        ] {
            kafka.properties.insert(k.into(), v);
        }
        Some(outbox_router::kafka::client_config(&kafka).create()?)
    } else {
        None
    };
    let mut writers = Vec::new();
    for w in 0..args.writers {
        writers.push(tokio::spawn(write(
            args.mysql.clone(),
            args.db.clone(),
            run.clone(),
            w,
            args.writers,
            args.rate,
            args.types,
            total,
            committed.clone(),
            direct
                .clone()
                .map(|p| (p, args.prefix.clone(), args.no_wait)),
        )));
    }

    let mut latencies_us: Vec<u64> = Vec::with_capacity(total as usize);
    let mut to_broker_us: Vec<i64> = Vec::new();
    let write_deadline = Duration::from_secs(args.seconds + 30);
    let mut writers_done = false;
    let mut drain_deadline = None;
    while (latencies_us.len() as u64) < total {
        if !writers_done && writers.iter().all(|w| w.is_finished()) {
            writers_done = true;
            drain_deadline = Some(Instant::now() + Duration::from_secs(30));
        }
        if drain_deadline.is_some_and(|d| Instant::now() > d)
            || started.elapsed() > write_deadline * 2
        {
            break;
        }
        let next = match tokio::time::timeout(Duration::from_millis(200), arrivals.next()).await {
            Err(_) => continue,
            Ok(n) => n?,
        };
        let received = Instant::now();
        let Some((id, append_ms)) = next else {
            continue;
        };
        if !id.starts_with(&run) {
            continue; // an earlier run's record
        }
        // The consumer can see a record before its writer has noted the commit instant.
        let at = loop {
            if let Some(at) = committed.lock().unwrap().remove(&id) {
                break Some(at);
            }
            if writers_done {
                break None;
            }
            tokio::task::yield_now().await;
        };
        if let Some((at, wall_us)) = at {
            latencies_us.push(received.saturating_duration_since(at).as_micros() as u64);
            if let Some(ms) = append_ms {
                to_broker_us.push(ms * 1000 - wall_us);
            }
        }
    }
    for w in writers {
        w.await?.context("writer")?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    latencies_us.sort_unstable();
    let pct = |p: f64| -> f64 {
        if latencies_us.is_empty() {
            return f64::NAN;
        }
        let i = ((latencies_us.len() as f64 - 1.0) * p).round() as usize;
        latencies_us[i] as f64 / 1000.0
    };
    if !to_broker_us.is_empty() {
        to_broker_us.sort_unstable();
        let q = |p: f64| {
            to_broker_us[((to_broker_us.len() as f64 - 1.0) * p).round() as usize] as f64 / 1000.0
        };
        println!(
            "commit_to_broker_append: p50_ms={:.1} p99_ms={:.1} max_ms={:.1} (broker clock in ms)",
            q(0.5),
            q(0.99),
            q(1.0)
        );
    }
    println!(
        "rate={} seconds={} sent={} received={} p50_ms={:.1} p99_ms={:.1} max_ms={:.1} wall_s={:.1}",
        args.rate,
        args.seconds,
        total,
        latencies_us.len(),
        pct(0.5),
        pct(0.99),
        pct(1.0),
        elapsed
    );
    if (latencies_us.len() as u64) < total {
        bail!(
            "{} of {total} events never arrived",
            total - latencies_us.len() as u64
        );
    }
    Ok(())
}

/// A consumer assigned to the end of every partition of the contender's topics, so it
/// sees exactly what is written from now on.
async fn assigned_consumer(args: &Args) -> Result<StreamConsumer> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &args.bootstrap)
        .set("group.id", format!("latency-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .set("isolation.level", "read_committed")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for t in 0..args.types {
        let topic = format!("{}.Type{t}", args.prefix);
        let meta = consumer
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .with_context(|| format!("metadata of {topic}"))?;
        let partitions = meta
            .topics()
            .first()
            .map(|t| t.partitions().len())
            .unwrap_or(0);
        if partitions == 0 {
            bail!("topic {topic} does not exist: create it before measuring");
        }
        for p in 0..partitions as i32 {
            let (_, high) = consumer.fetch_watermarks(&topic, p, Duration::from_secs(10))?;
            tpl.add_partition_offset(&topic, p, Offset::Offset(high))?;
        }
    }
    consumer.assign(&tpl)?;
    Ok(consumer)
}

/// Writer `w` of `n`: commits its share of the events, one row per transaction, on a
/// fixed schedule (no catching up in bursts beyond the schedule).
#[allow(clippy::too_many_arguments)]
async fn write(
    url: String,
    db: String,
    run: String,
    w: u32,
    n: u32,
    rate: u32,
    types: u32,
    total: u64,
    committed: Committed,
    direct: Option<(FutureProducer, String, bool)>,
) -> Result<()> {
    let mut conn = mysql_async::Conn::from_url(&url).await?;
    conn.query_drop(format!("USE `{db}`")).await?;
    let interval = Duration::from_secs_f64(n as f64 / rate as f64);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let pad = "x".repeat(150);
    let mut seq = w as u64;
    while seq < total {
        tick.tick().await;
        let id = format!("{run}-{seq}");
        conn.exec_drop(
            "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES (?, ?, ?, 'Created', ?)",
            (
                &id,
                format!("Type{}", seq % types as u64),
                format!("agg-{}", seq % 1000),
                format!("{{\"seq\":{seq},\"pad\":\"{pad}\"}}"),
            ),
        )
        .await?;
        committed
            .lock()
            .unwrap()
            .insert(id.clone(), (Instant::now(), wall_micros()));
        if let Some((producer, prefix, no_wait)) = &direct {
            let topic = format!("{prefix}.Type{}", seq % types as u64);
            let key = format!("agg-{}", seq % 1000);
            let record = FutureRecord::to(&topic).key(&key).payload("{}").headers(
                OwnedHeaders::new().insert(Header {
                    key: "id",
                    value: Some(&id),
                }),
            );
            if *no_wait {
                let delivery = producer
                    .send_result(record)
                    .map_err(|(e, _)| anyhow::anyhow!("direct produce: {e}"))?;
                tokio::spawn(delivery);
            } else {
                producer
                    .send(record, Duration::from_secs(30))
                    .await
                    .map_err(|(e, _)| anyhow::anyhow!("direct produce: {e}"))?;
            }
        }
        seq += n as u64;
    }
    conn.disconnect().await?;
    Ok(())
}

fn wall_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or_default()
}

/// Sets `message.timestamp.type=LogAppendTime` on the contender's topics.
async fn log_append_time(args: &Args) -> Result<()> {
    use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &args.bootstrap)
        .create()?;
    let names: Vec<String> = (0..args.types)
        .map(|t| format!("{}.Type{t}", args.prefix))
        .collect();
    let changes: Vec<AlterConfig> = names
        .iter()
        .map(|n| {
            AlterConfig::new(ResourceSpecifier::Topic(n))
                .set("message.timestamp.type", "LogAppendTime")
        })
        .collect();
    for r in admin.alter_configs(&changes, &AdminOptions::new()).await? {
        if let Err((resource, code)) = r {
            bail!("altering {resource:?}: {code}");
        }
    }
    Ok(())
}

/// A run id unique enough to tell this run's records from earlier ones.
fn chrono_free_run_id() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
}
