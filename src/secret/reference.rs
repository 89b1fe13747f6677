//! `${env:NAME}` and `${file:PATH}` in any string value of the config file, resolved
//! before the file is read as settings: every secret (Kafka's `sasl.password`, a key's
//! password, the registry's credentials) can come from the environment or a mounted
//! file, as Kafka Connect's config providers and Vector users expect. Other `${…}` text
//! (the route's `${routedByValue}`) is left as written.

use std::path::Path;

use super::{Secret, SecretError};

/// Replaces every reference in the string values under `root`; `path` names the key in
/// messages, which never hold a resolved value.
pub fn resolve_references(root: &mut toml::Value) -> Result<(), SecretError> {
    walk_mut(root, &mut Vec::new())
}

fn walk_mut(value: &mut toml::Value, path: &mut Vec<String>) -> Result<(), SecretError> {
    match value {
        toml::Value::String(s) if s.contains("${") => {
            let key = key_path(path);
            if !RESOLVED_ON_CONNECT.contains(&key.as_str()) {
                *s = expand(s, &key)?;
            }
        }
        toml::Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                path.push(format!("[{i}]"));
                walk_mut(item, path)?;
                path.pop();
            }
        }
        toml::Value::Table(table) => {
            for (k, v) in table.iter_mut() {
                path.push(k.clone());
                walk_mut(v, path)?;
                path.pop();
            }
        }
        _ => {}
    }
    Ok(())
}

/// `a.b."sasl.password"`: a key path as TOML writes it.
fn key_path(path: &[String]) -> String {
    let mut out = String::new();
    for p in path {
        if p.starts_with('[') {
            out.push_str(p);
            continue;
        }
        if !out.is_empty() {
            out.push('.');
        }
        if p.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            out.push_str(p);
        } else {
            out.push_str(&format!("{p:?}"));
        }
    }
    out
}

/// One value with its references resolved.
pub(super) fn expand(text: &str, key: &str) -> Result<String, SecretError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = next_reference(rest) {
        out.push_str(&rest[..start]);
        let tail = &rest[start + 2..];
        let end = tail.find('}').ok_or_else(|| {
            SecretError::new(format!(
                "{key}: a reference `${{{}` is not closed with `}}`",
                shorten(tail)
            ))
        })?;
        let (kind, name) = tail[..end]
            .split_once(':')
            .expect("next_reference saw the colon");
        out.push_str(&match kind {
            "env" => std::env::var(name).map_err(|_| {
                SecretError::new(format!(
                    "{key}: environment variable {name} (${{env:{name}}}) is not set"
                ))
            })?,
            _ => read_file(Path::new(name), key)?,
        });
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Where the next `${env:` or `${file:` starts.
fn next_reference(text: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = text[from..].find("${") {
        let at = from + i;
        let tail = &text[at + 2..];
        if tail.starts_with("env:") || tail.starts_with("file:") {
            return Some(at);
        }
        from = at + 2;
    }
    None
}

/// A file's text without its trailing line break (mounted secrets usually end in one).
fn read_file(path: &Path, key: &str) -> Result<String, SecretError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        SecretError::new(format!(
            "{key}: cannot read {} (${{file:…}}): {e}",
            path.display()
        ))
    })?;
    Ok(text.trim_end_matches(['\n', '\r']).to_string())
}

fn shorten(text: &str) -> String {
    text.chars().take(12).collect()
}

/// Keys under `root` whose value is a secret written into the file itself rather than a
/// reference: `validate` and `run` warn about each (names only, never values).
pub fn inline_secrets(root: &toml::Value) -> Vec<String> {
    let mut found = Vec::new();
    walk(root, &mut Vec::new(), &mut found);
    found
}

fn walk(value: &toml::Value, path: &mut Vec<String>, found: &mut Vec<String>) {
    match value {
        toml::Value::String(s) => {
            let named_secret = path.last().is_some_and(|k| is_secret_key(k));
            if named_secret && !s.is_empty() && next_reference(s).is_none() {
                found.push(key_path(path));
            }
        }
        toml::Value::Table(table) => {
            for (k, v) in table {
                path.push(k.clone());
                walk(v, path, found);
                path.pop();
            }
        }
        _ => {}
    }
}

/// Whether a key names a secret, in librdkafka's, Kafka's Java and Confluent's spelling:
/// passwords (`sasl.password`, `ssl.key.password`, key and trust store passwords, any
/// `*.password`), secrets (`sasl.oauthbearer.client.secret`, any `*.secret`), tokens
/// (`bearer_token`, `*.token`), JAAS text (`sasl.jaas.config`, which holds a password),
/// credentials (`basic.auth.user.info`, `*.credentials`, `sasl.oauthbearer.config`),
/// private keys given as text (`ssl.key.pem`, `ssl.keystore.key`) and API keys.
/// `*_env` / `*_file` keys name where a secret is, not the secret; `*.location`,
/// `*.type`, `*.source` and `*.endpoint.url` name a file, a kind or a server.
pub fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    if key.ends_with("_env") || key.ends_with("_file") {
        return false;
    }
    let names_a_place_or_kind = [".location", ".type", ".source"]
        .iter()
        .any(|end| key.ends_with(end));
    if names_a_place_or_kind || key.contains("endpoint.url") {
        return false;
    }
    const WORDS: [&str; 12] = [
        "password",
        "passwd",
        "secret",
        "token",
        "jaas",
        "user.info",
        "userinfo",
        "credential",
        "key.pem",
        "keystore.key",
        "api.key",
        "oauthbearer.config",
    ];
    WORDS.iter().any(|word| key.contains(word)) || key.ends_with("apikey")
}

/// A database password, written one way of three: `password = "${env:NAME}"` or
/// `"${file:PATH}"` (the form every secret of the file takes), or the shorthands
/// `password_env = "NAME"` / `password_file = "PATH"` for the same references. Resolved
/// here, when a command connects, not when the file is loaded: commands that only read
/// local state (`health`, `checkpoint show`) run without it. `None` when none is set.
pub fn resolve_password(
    password: Option<&Secret>,
    env: Option<&str>,
    file: Option<&Path>,
    key: &str,
) -> Result<Option<Secret>, SecretError> {
    let reference = match (password, env, file) {
        (Some(text), None, None) => text.expose().to_string(),
        (None, Some(var), None) => format!("${{env:{var}}}"),
        (None, None, Some(path)) => format!("${{file:{}}}", path.display()),
        (None, None, None) => return Ok(None),
        _ => {
            return Err(SecretError::new(format!(
                "set only one of {key}, {key}_env and {key}_file"
            )))
        }
    };
    expand(&reference, key).map(|p| Some(Secret::new(p)))
}

/// The config keys `resolve_references` leaves for `resolve_password`.
const RESOLVED_ON_CONNECT: [&str; 2] = ["source.password", "ops.password"];

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> toml::Value {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn references_resolve_from_the_environment_and_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "from-file\n").unwrap();
        std::env::set_var("OUTBOX_REF_TEST_USER", "alice");
        let mut v = parse(&format!(
            r#"
[kafka.properties]
"sasl.username" = "${{env:OUTBOX_REF_TEST_USER}}"
"sasl.password" = "${{file:{}}}"
[route]
topic = "outbox.${{routedByValue}}"
url = "https://${{env:OUTBOX_REF_TEST_USER}}:${{file:{}}}@registry"
"#,
            file.display(),
            file.display()
        ));
        resolve_references(&mut v).unwrap();
        assert_eq!(
            v["kafka"]["properties"]["sasl.username"].as_str(),
            Some("alice")
        );
        assert_eq!(
            v["kafka"]["properties"]["sasl.password"].as_str(),
            Some("from-file")
        );
        assert_eq!(
            v["route"]["topic"].as_str(),
            Some("outbox.${routedByValue}")
        );
        assert_eq!(
            v["route"]["url"].as_str(),
            Some("https://alice:from-file@registry")
        );
    }

    #[test]
    fn a_missing_reference_names_the_key_and_never_a_value() {
        let mut v = parse(
            r#"[kafka.properties]
"sasl.password" = "${env:OUTBOX_REF_TEST_UNSET}""#,
        );
        let e = resolve_references(&mut v).unwrap_err().to_string();
        assert!(
            e.contains(r#"kafka.properties."sasl.password""#)
                && e.contains("OUTBOX_REF_TEST_UNSET"),
            "{e}"
        );
        let mut v = parse(r#"x = { password = "${file:/nonexistent/pw}" }"#);
        let e = resolve_references(&mut v).unwrap_err().to_string();
        assert!(
            e.contains("x.password") && e.contains("/nonexistent/pw"),
            "{e}"
        );
        let mut v = parse(r#"password = "abc${env:NAME""#);
        let e = resolve_references(&mut v).unwrap_err().to_string();
        assert!(e.contains("not closed") && !e.contains("abc"), "{e}");
    }

    #[test]
    fn secret_named_keys() {
        for key in [
            "sasl.password",
            "ssl.key.password",
            "ssl.keystore.password",
            "ssl.truststore.password",
            "database.password",
            "sasl.jaas.config",
            "producer.override.sasl.jaas.config",
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.config",
            "basic.auth.user.info",
            "schema.registry.basic.auth.user.info",
            "bearer.auth.token",
            "bearer_token",
            "password",
            "ssl.key.pem",
            "ssl.keystore.key",
            "aws.credentials",
            "confluent.api.key",
        ] {
            assert!(is_secret_key(key), "{key} is a secret");
        }
        for key in [
            "sasl.username",
            "password_env",
            "password_file",
            "ssl.keystore.location",
            "ssl.truststore.location",
            "ssl.truststore.type",
            "sasl.oauthbearer.token.endpoint.url",
            "sasl.oauthbearer.client.id",
            "ssl.certificate.pem",
            "basic.auth.credentials.source",
        ] {
            assert!(!is_secret_key(key), "{key} is not a secret");
        }
    }

    #[test]
    fn inline_secrets_are_named() {
        let v = parse(
            r#"
[source]
password_env = "DB_PASSWORD"
[kafka.properties]
"sasl.username" = "alice"
"sasl.password" = "inline"
"ssl.key.password" = "${env:KEY_PASSWORD}"
"sasl.oauthbearer.client.secret" = "inline-too"
"sasl.oauthbearer.token.endpoint.url" = "https://idp/token"
[value.registry]
bearer_token = "${file:/run/secrets/token}"
password = "inline"
"#,
        );
        assert_eq!(
            inline_secrets(&v),
            vec![
                r#"kafka.properties."sasl.oauthbearer.client.secret""#.to_string(),
                r#"kafka.properties."sasl.password""#.to_string(),
                "value.registry.password".to_string(),
            ]
        );
    }
}
