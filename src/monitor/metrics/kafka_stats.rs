//! librdkafka's statistics (every `statistics.interval.ms`) as gauges: the producer
//! queue and each broker's state and round trip.

use super::Metrics;

/// What a producer has sent, from its statistics: records per produce request is what
/// the broker pays per record (a request's cost is mostly fixed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Produced {
    pub records: u64,
    pub requests: u64,
}

impl Produced {
    /// Since the producer was created.
    pub fn of(stats: &rdkafka::Statistics) -> Self {
        Self {
            records: stats.txmsgs.max(0) as u64,
            requests: stats
                .brokers
                .values()
                .filter_map(|b| b.req.get("Produce"))
                .map(|n| (*n).max(0) as u64)
                .sum(),
        }
    }

    /// Records per produce request (0 before the first request).
    pub fn records_per_request(&self) -> f64 {
        match self.requests {
            0 => 0.0,
            n => self.records as f64 / n as f64,
        }
    }
}

impl Metrics {
    /// Publishes librdkafka's statistics.
    pub fn kafka_statistics(&self, stats: &rdkafka::Statistics) {
        let i = &self.0;
        i.m.producer_queue_messages.set(stats.msg_cnt as i64);
        i.m.producer_queue_bytes.set(stats.msg_size as i64);
        let produced = Produced::of(stats);
        i.m.produce_records.set(produced.records as i64);
        i.m.produce_requests.set(produced.requests as i64);
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
