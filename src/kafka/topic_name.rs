//! Kafka's rules for a topic name, checked before any client asks.

/// Kafka's topic name rules: 1–249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn check_topic(topic: &str) -> Result<(), String> {
    if topic.is_empty() {
        return Err("topic name is empty".into());
    }
    if topic.len() > 249 {
        return Err(format!(
            "topic name {topic:?} is longer than 249 characters"
        ));
    }
    if topic == "." || topic == ".." {
        return Err(format!("topic name {topic:?} is not allowed"));
    }
    if let Some(bad) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "topic name {topic:?} contains {bad:?}; allowed are a-z A-Z 0-9 . _ -"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_topic_names() {
        assert!(check_topic("outbox.event.Order").is_ok());
        assert!(check_topic("has space").is_err());
        assert!(check_topic(&"x".repeat(300)).is_err());
        assert!(check_topic("").is_err());
        assert!(check_topic("..").is_err());
    }
}
