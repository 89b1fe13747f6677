//! librdkafka's statistics (every `statistics.interval.ms`) as gauges: the producer
//! queue and each broker's state and round trip.

use super::Metrics;

/// What a producer has sent, from its statistics: records per produce request and per
/// record batch (one partition's records in a request) are what the broker pays per
/// record — a request's and a batch's cost are mostly fixed (checksums, the log append,
/// compression working on few records).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Produced {
    pub records: u64,
    pub requests: u64,
    pub batches: u64,
}

impl Produced {
    /// Takes one statistics report of the same producer: records and requests are
    /// librdkafka's totals, batches are counted per report (its batch windows start
    /// afresh at every report).
    pub fn update(&mut self, stats: &rdkafka::Statistics) {
        self.records = stats.txmsgs.max(0) as u64;
        self.requests = stats
            .brokers
            .values()
            .filter_map(|b| b.req.get("Produce"))
            .map(|n| (*n).max(0) as u64)
            .sum();
        self.batches += stats
            .topics
            .values()
            .map(|t| t.batchcnt.cnt.max(0) as u64)
            .sum::<u64>();
    }

    /// Records per produce request (0 before the first request).
    pub fn records_per_request(&self) -> f64 {
        ratio(self.records, self.requests)
    }

    /// Records per record batch (0 before the first batch).
    pub fn records_per_batch(&self) -> f64 {
        ratio(self.records, self.batches)
    }
}

fn ratio(n: u64, per: u64) -> f64 {
    match per {
        0 => 0.0,
        per => n as f64 / per as f64,
    }
}

impl Metrics {
    /// Publishes librdkafka's statistics, and what the producer has sent (`produced`,
    /// updated with them).
    pub fn kafka_statistics(&self, stats: &rdkafka::Statistics, produced: &Produced) {
        let i = &self.0;
        i.m.producer_queue_messages.set(stats.msg_cnt as i64);
        i.m.producer_queue_bytes.set(stats.msg_size as i64);
        i.m.produce_records.set(produced.records as i64);
        i.m.produce_requests.set(produced.requests as i64);
        i.m.produce_batches.set(produced.batches as i64);
        for b in stats.brokers.values() {
            // librdkafka's bootstrap placeholders have no node id and never carry traffic.
            if b.nodeid < 0 {
                continue;
            }
            let broker = b.name.clone();
            i.m.broker_up
                .get_or_create(&vec![("broker", broker.clone())])
                .set(i64::from(b.state == "UP"));
            if let Some(rtt) = &b.rtt {
                let labels = vec![("broker", broker.clone())];
                i.m.broker_rtt_avg
                    .get_or_create(&labels)
                    .set(rtt.avg as f64 / 1e6);
                i.m.broker_rtt_p99
                    .get_or_create(&labels)
                    .set(rtt.p99 as f64 / 1e6);
            }
        }
    }
}
