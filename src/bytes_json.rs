//! Bytes as JSON, wherever the router shows a key, value or column to a person (dry
//! runs, dead-letter records): text stays text, anything else is base64.

/// Text as a JSON string; other bytes as `{"base64": …}`.
pub fn bytes_json(b: &[u8]) -> serde_json::Value {
    use base64::Engine;
    match std::str::from_utf8(b) {
        Ok(s) => serde_json::Value::String(s.to_string()),
        Err(_) => {
            serde_json::json!({ "base64": base64::engine::general_purpose::STANDARD.encode(b) })
        }
    }
}
