//! `docs/configuration.md` against the code: every key a section accepts is listed there,
//! and every key listed there is accepted; every default it gives is the code's, every
//! key it calls required is. The accepted keys are read from the code itself, from
//! serde's answer to an unknown key ("expected one of …"); a default, by setting the key
//! to it and finding the configuration unchanged.

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
    "value.cloudevents",
    "kafka",
    "kafka.topics",
    "kafka.topics.rule",
    "delivery",
    "claim_check",
    "checkpoint",
    "ha",
    "pipeline",
    "monitor",
    "monitor.tracing",
    "ops",
];

/// The minimal configuration with `section` present, changed by `edit`, as TOML.
fn with_section(section: &str, edit: impl FnOnce(&mut toml::Table)) -> String {
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
    if section == "claim_check" {
        at.insert("bucket".into(), "outbox-payloads".into());
    }
    if section == "kafka.topics.rule" {
        at.insert("pattern".into(), "*".into());
    }
    edit(at);
    toml::to_string(&doc).unwrap()
}

fn parse(text: &str) -> Result<Config, String> {
    Config::parse(text, Path::new("reference.toml")).map_err(|e| e.to_string())
}

/// The keys `section` accepts, from serde's rejection of one it does not.
fn accepted(section: &str) -> BTreeSet<String> {
    let text = with_section(section, |at| {
        at.insert("zz_not_a_key".into(), 1.into());
    });
    let error = parse(&text)
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
    rows(text, section).into_iter().map(|(k, _)| k).collect()
}

/// `(key, default cell)` of each row under `section`'s heading.
fn rows(text: &str, section: &str) -> Vec<(String, String)> {
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
        .filter_map(|l| {
            let (key, rest) = l.split_once('`')?;
            let default = rest.split('|').nth(1)?.trim();
            Some((key.to_string(), default.to_string()))
        })
        .collect()
}

/// What a default cell says: a value in backticks, `required`, `unset`, or words
/// (a default that depends on other settings, checked where it is described).
enum Default {
    Value(toml::Value),
    Required,
    Unset,
    Described,
}

fn default_of(cell: &str) -> Default {
    match cell {
        "required" => return Default::Required,
        "unset" => return Default::Unset,
        _ => {}
    }
    let Some(literal) = cell
        .strip_prefix('`')
        .and_then(|c| c.strip_suffix('`'))
        .filter(|c| !c.contains('`') && !c.contains('<'))
    else {
        return Default::Described;
    };
    let value = toml::from_str::<toml::Table>(&format!("v = {literal}"))
        .map(|mut t| t.remove("v").unwrap())
        .unwrap_or_else(|_| toml::Value::String(literal.to_string()));
    Default::Value(value)
}

#[test]
fn the_reference_gives_the_code_s_defaults_and_required_keys() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .unwrap();
    let config = |t: &str| format!("{:?}", parse(t).unwrap_or_else(|e| panic!("{e}\n{t}")));
    let mut checked = 0;
    let mut wrong = Vec::new();
    for section in SECTIONS {
        let base = config(&with_section(section, |_| {}));
        for (key, cell) in rows(&text, section) {
            match default_of(&cell) {
                Default::Value(value) => {
                    let set = with_section(section, |at| {
                        at.insert(key.clone(), value.clone());
                    });
                    let differs = parse(&set).map(|c| format!("{c:?}") != base);
                    if differs != Ok(false) {
                        wrong.push(format!(
                            "[{section}] {key}: docs/configuration.md gives the default {cell}, but setting it {}",
                            match differs {
                                Ok(_) => "changes the configuration".to_string(),
                                Err(e) => format!("is refused: {e}"),
                            }
                        ));
                    }
                    checked += 1;
                }
                Default::Required => {
                    let without = with_section(section, |at| {
                        at.remove(&key);
                    });
                    let without = if section.is_empty() {
                        let mut doc: toml::Table = toml::from_str(&without).unwrap();
                        doc.remove(&key);
                        toml::to_string(&doc).unwrap()
                    } else {
                        without
                    };
                    if parse(&without).is_ok() {
                        wrong.push(format!("[{section}] {key}: docs/configuration.md says required, but a config without it is accepted"));
                    }
                    checked += 1;
                }
                Default::Unset => {
                    let without = with_section(section, |at| {
                        at.remove(&key);
                    });
                    if parse(&without).is_err() {
                        wrong.push(format!("[{section}] {key}: docs/configuration.md says unset (optional), but a config without it is refused"));
                    }
                }
                Default::Described => {}
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(checked >= 60, "{checked} defaults checked");
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

/// `config/example.toml` by section (headers commented out or not), keyed by name.
fn example_sections(text: &str) -> std::collections::BTreeMap<String, String> {
    let mut sections = std::collections::BTreeMap::new();
    let mut name = String::new();
    for line in text.lines() {
        let bare = line.trim_start_matches('#').trim();
        let header = bare
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .map(|h| h.trim_matches(['[', ']']))
            .filter(|h| !h.is_empty() && !h.contains([' ', '=']));
        match header {
            Some(h) => name = h.to_string(),
            None => {
                let body: &mut String = sections.entry(name.clone()).or_default();
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    sections
}

/// Whether `body` sets `key` (or shows it commented out, or names it in a comment as
/// the alternative: `# or password_file = …`).
fn shows(body: &str, key: &str) -> bool {
    let needle = format!("{key} =");
    body.match_indices(&needle).any(|(at, _)| {
        body[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '.'))
    })
}

#[test]
fn the_example_shows_every_key_and_commented_keys_their_default() {
    let root = env!("CARGO_MANIFEST_DIR");
    let example = std::fs::read_to_string(format!("{root}/config/example.toml")).unwrap();
    let reference = std::fs::read_to_string(format!("{root}/docs/configuration.md")).unwrap();
    let sections = example_sections(&example);
    let mut wrong = Vec::new();
    for section in SECTIONS.iter().filter(|s| !s.is_empty()) {
        // An inline table (`registry = { url = … }`) shows its keys in the parent's body.
        let parent = section.rsplit_once('.').map_or("", |(p, _)| p);
        let body = sections
            .get(*section)
            .or_else(|| sections.get(parent))
            .map(String::as_str)
            .unwrap_or("");
        let defaults: std::collections::BTreeMap<String, String> =
            rows(&reference, section).into_iter().collect();
        let base = format!("{:?}", parse(&with_section(section, |_| {})).unwrap());
        for key in accepted(section) {
            let subtable = format!("{section}.{key}");
            if !shows(body, &key) && !sections.contains_key(&subtable) {
                wrong.push(format!("[{section}] {key} is not in config/example.toml"));
                continue;
            }
            // A commented-out `key = value` shows the default where there is one.
            let Some(Default::Value(_)) = defaults.get(&key).map(|c| default_of(c)) else {
                continue;
            };
            for line in body.lines() {
                let Some(rest) = line
                    .trim_start()
                    .strip_prefix('#')
                    .map(str::trim_start)
                    .and_then(|l| l.strip_prefix(&format!("{key} =")))
                else {
                    continue;
                };
                let Ok(mut shown) = toml::from_str::<toml::Table>(&format!("v = {rest}")) else {
                    continue;
                };
                let value = shown.remove("v").unwrap();
                let set = with_section(section, |at| {
                    at.insert(key.clone(), value.clone());
                });
                if parse(&set).map(|c| format!("{c:?}")).as_deref() != Ok(base.as_str()) {
                    wrong.push(format!(
                        "[{section}] config/example.toml shows `{}` commented out, which is not the default ({})",
                        line.trim(),
                        defaults[&key]
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
