//! Who leads a fleet now, as the group coordinator sees it: the member whose
//! assignment holds the lock topic's partition. For an operator's command to say which
//! instance its move fences; never used to decide anything.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::kafka::{consumer_config, KafkaConfig};

/// The client id (the instance's name) and host of the member of `group` assigned
/// `lock_topic`, `Ok(None)` when no member holds it.
pub fn leader_of(
    kafka: &KafkaConfig,
    group: &str,
    lock_topic: &str,
) -> Result<Option<String>, String> {
    let consumer: BaseConsumer = consumer_config(kafka).create().map_err(|e| e.to_string())?;
    let groups = consumer
        .fetch_group_list(Some(group), Duration::from_secs(10))
        .map_err(|e| e.to_string())?;
    Ok(groups
        .groups()
        .iter()
        .flat_map(|g| g.members())
        .find(|m| {
            m.assignment()
                .is_some_and(|a| assigned_topics(a).iter().any(|t| t == lock_topic))
        })
        .map(|m| format!("{} ({})", m.client_id(), m.client_host())))
}

/// The topics of a consumer protocol assignment (version, then an array of topic name
/// and partition array); empty when it does not parse.
fn assigned_topics(bytes: &[u8]) -> Vec<String> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, tail) = (bytes.get(..n)?, bytes.get(n..)?);
        *bytes = tail;
        Some(head)
    }
    fn int(bytes: &mut &[u8], n: usize) -> Option<i64> {
        let raw = take(bytes, n)?;
        Some(raw.iter().fold(0i64, |acc, b| (acc << 8) | i64::from(*b)))
    }
    let mut at = bytes;
    let mut topics = Vec::new();
    let parsed = (|| {
        int(&mut at, 2)?;
        let count = int(&mut at, 4)?;
        for _ in 0..count {
            let len = int(&mut at, 2)?;
            let name = take(&mut at, usize::try_from(len).ok()?)?;
            topics.push(String::from_utf8_lossy(name).into_owned());
            let partitions = int(&mut at, 4)?;
            take(&mut at, usize::try_from(partitions).ok()? * 4)?;
        }
        Some(())
    })();
    if parsed.is_none() {
        topics.clear();
    }
    topics
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_topics_of_an_assignment() {
        let mut bytes = vec![0, 1, 0, 0, 0, 2];
        for (topic, partitions) in [("lock.a", 1u8), ("lock.b", 2)] {
            bytes.extend_from_slice(&[0, topic.len() as u8]);
            bytes.extend_from_slice(topic.as_bytes());
            bytes.extend_from_slice(&[0, 0, 0, partitions]);
            bytes.extend(std::iter::repeat_n(0, 4 * partitions as usize));
        }
        bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
        assert_eq!(assigned_topics(&bytes), ["lock.a", "lock.b"]);
        assert!(assigned_topics(&bytes[..9]).is_empty());
    }
}
