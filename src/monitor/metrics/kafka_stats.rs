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
