//! librdkafka's statistics (every `statistics.interval.ms`) as gauges: the producer
//! queue and each broker's state and round trip.

use super::Metrics;

impl Metrics {
    /// Publishes librdkafka's statistics.
    pub fn kafka_statistics(&self, stats: &rdkafka::Statistics) {
        let i = &self.0;
        i.m.producer_queue_messages.set(stats.msg_cnt as i64);
        i.m.producer_queue_bytes.set(stats.msg_size as i64);
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
                for (quantile, micros) in [("avg", rtt.avg), ("p99", rtt.p99)] {
                    i.m.broker_rtt_seconds
                        .get_or_create(&vec![
                            ("broker", broker.clone()),
                            ("quantile", quantile.to_string()),
                        ])
                        .set(micros as f64 / 1e6);
                }
            }
        }
    }
}
