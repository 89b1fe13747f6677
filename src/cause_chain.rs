//! An error as one line for people: each cause once.

/// The error and its causes, each once: many messages already quote their source
/// (`query … failed: Server error: …`), and a client library's error quotes its own.
pub fn cause_chain(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
    }
    text
}
