//! Name patterns for tables and topics: `*` matches any run of characters, `?` one;
//! everything else matches itself.

use regex::Regex;

/// A compiled name pattern.
#[derive(Debug, Clone)]
pub struct Pattern {
    text: String,
    regex: Regex,
}

impl Pattern {
    /// Compiles a pattern such as `tenant_*.outbox`.
    pub fn new(text: &str) -> Self {
        let mut re = String::from("^");
        for c in text.chars() {
            match c {
                '*' => re.push_str(".*"),
                '?' => re.push('.'),
                c => re.push_str(&regex::escape(&c.to_string())),
            }
        }
        re.push('$');
        Self {
            text: text.to_string(),
            regex: Regex::new(&re).expect("an escaped pattern is a valid regex"),
        }
    }

    /// True when the whole name matches.
    pub fn matches(&self, name: &str) -> bool {
        self.regex.is_match(name)
    }

    /// True when the pattern has wildcards.
    pub fn is_wildcard(&self) -> bool {
        self.text.contains(['*', '?'])
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::Pattern;

    #[test]
    fn globs() {
        let p = Pattern::new("tenant_*.outbox");
        assert!(p.matches("tenant_a.outbox") && p.matches("tenant_.outbox"));
        assert!(!p.matches("tenant_a.outboxes") && !p.matches("xtenant_a.outbox"));
        assert!(Pattern::new("shop.outbox").matches("shop.outbox"));
        assert!(
            !Pattern::new("shop.outbox").matches("shopXoutbox"),
            "dots are literal"
        );
        assert!(Pattern::new("t?.o").matches("t1.o"));
    }
}
