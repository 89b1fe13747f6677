//! `docs/configuration.md` against the code: every key a section accepts is listed there,
//! and every key listed there is accepted. The accepted keys are read from the code
//! itself, from serde's answer to an unknown key ("expected one of …").

use std::collections::BTreeSet;
use std::path::Path;

use super::tests::MINIMAL as BASE;
use super::Config;

/// The section paths of the reference, as its headings name them.
const SECTIONS: &[&str] = &[
    "",
    "source",
    "outbox",
    "outbox.columns",
    "route",
    "value",
    "value.registry",
    "kafka",
    "kafka.topics",
    "kafka.topics.rule",
    "delivery",
    "checkpoint",
    "ha",
    "pipeline",
    "monitor",
    "ops",
];

/// The keys `section` accepts, from serde's rejection of one it does not.
fn accepted(section: &str) -> BTreeSet<String> {
    let mut doc: toml::Table = toml::from_str(BASE).unwrap();
    let mut at = &mut doc;
    let path: Vec<&str> = section.split('.').filter(|p| !p.is_empty()).collect();
    for (i, key) in path.iter().enumerate() {
        let last = i + 1 == path.len();
        let entry = at
            .entry(key.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if last && *key == "rule" {
            *entry = toml::Value::Array(vec![toml::Value::Table(toml::Table::new())]);
        }
        at = match entry {
            toml::Value::Table(t) => t,
            toml::Value::Array(a) => a[0].as_table_mut().unwrap(),
            _ => unreachable!("sections are tables"),
        };
    }
    if section == "value.registry" {
        at.insert("url".into(), "http://127.0.0.1:8081".into());
    }
    at.insert("zz_not_a_key".into(), 1.into());
    let text = toml::to_string(&doc).unwrap();
    let error = Config::parse(&text, Path::new("reference.toml"))
        .expect_err("an unknown key is refused")
        .to_string();
    let expected = error
        .split("expected")
        .nth(1)
        .unwrap_or_else(|| panic!("[{section}]: {error}"));
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The keys the reference lists under `section`'s heading.
fn documented(text: &str, section: &str) -> BTreeSet<String> {
    let heading = match section {
        "" => "### Top level".to_string(),
        "kafka.topics.rule" => "### [[kafka.topics.rule]]".to_string(),
        s => format!("### [{s}]"),
    };
    let body = text
        .split(&format!("{heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("docs/configuration.md has no {heading}"));
    body.split("\n#")
        .next()
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_reference_lists_exactly_the_keys_the_code_accepts() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .unwrap();
    let mut keys = 0;
    for section in SECTIONS {
        let code = accepted(section);
        let docs = documented(&text, section);
        let undocumented: Vec<_> = code.difference(&docs).collect();
        let unknown: Vec<_> = docs.difference(&code).collect();
        assert!(
            undocumented.is_empty() && unknown.is_empty(),
            "[{section}]: accepted but not in docs/configuration.md: {undocumented:?}; \
             listed there but not accepted: {unknown:?}"
        );
        keys += code.len();
    }
    assert!(keys > 90, "{keys} keys");
}
