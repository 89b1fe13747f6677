//! A connector's `producer.override.*` properties as librdkafka properties: secrets
//! become `${env:…}` references (the value never reaches the output), Java's JAAS text
//! becomes librdkafka's SASL user and password, and what librdkafka cannot take is
//! listed rather than written.

use std::fmt::Write;

use crate::secret::is_secret_key;

/// What an import writes under `[kafka.properties]`, the environment variables it
/// references, and the properties left out.
#[derive(Debug, Default)]
pub struct Translated {
    /// TOML lines.
    pub toml: String,
    /// `(variable, what it must hold)`.
    pub env: Vec<(String, String)>,
    /// `(key, reason)`.
    pub unmapped: Vec<(String, String)>,
}

impl Translated {
    /// Adds the producer property `key` (without its `producer.override.` prefix), as
    /// the connector config's `source_key` held it.
    pub fn add(&mut self, source_key: &str, key: &str, value: &str) {
        if key == "sasl.jaas.config" {
            return self.add_jaas(source_key, value);
        }
        if let Some(reason) = crate::kafka::property_problem(key, value) {
            self.unmapped.push((
                source_key.to_string(),
                format!("librdkafka does not take it ({reason})"),
            ));
            return;
        }
        if is_secret_key(key) {
            let var = env_name(key);
            self.reference(key, &var);
            self.env.push((var, source_key.to_string()));
        } else {
            self.line(key, value);
        }
    }

    /// `… LoginModule required username="u" password="p";`: PLAIN and SCRAM map to
    /// `sasl.username` and a referenced `sasl.password`; other modules have no
    /// librdkafka form.
    fn add_jaas(&mut self, source_key: &str, value: &str) {
        let module = value.split_whitespace().next().unwrap_or_default();
        let user_and_password =
            module.ends_with(".PlainLoginModule") || module.ends_with(".ScramLoginModule");
        match (user_and_password, jaas_option(value, "username")) {
            (true, Some(user)) => {
                self.line("sasl.username", &user);
                let var = "OUTBOX_KAFKA_SASL_PASSWORD".to_string();
                self.reference("sasl.password", &var);
                self.env.push((var, format!("the password in {source_key}")));
            }
            (true, None) => self.unmapped.push((
                source_key.to_string(),
                "its JAAS text has no username=\"…\": set sasl.username and sasl.password (as ${env:…})".into(),
            )),
            (false, _) => self.unmapped.push((
                source_key.to_string(),
                format!("JAAS login module {module:?} has no librdkafka equivalent: set the sasl.* properties (docs/security.md; OAUTHBEARER: sasl.oauthbearer.method = \"oidc\" and sasl.oauthbearer.client.secret as ${{env:…}})"),
            )),
        }
    }

    fn line(&mut self, key: &str, value: &str) {
        writeln!(self.toml, "{} = {}", quoted(key), quoted(value)).ok();
    }

    fn reference(&mut self, key: &str, var: &str) {
        self.line(key, &format!("${{env:{var}}}"));
    }
}

fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// `OUTBOX_KAFKA_SSL_KEY_PASSWORD` for `ssl.key.password`.
fn env_name(key: &str) -> String {
    let tail: String = key
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c.to_ascii_uppercase(),
            false => '_',
        })
        .collect();
    format!("OUTBOX_KAFKA_{tail}")
}

/// The value of `name="…"` (or `name=…`) among a JAAS entry's options.
fn jaas_option(text: &str, name: &str) -> Option<String> {
    let mut rest = text;
    while let Some(at) = rest.find(name) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + name.len()..].trim_start();
        rest = &rest[at + name.len()..];
        if before.is_some_and(|c| c.is_alphanumeric()) {
            continue;
        }
        let Some(value) = after.strip_prefix('=') else {
            continue;
        };
        let value = value.trim_start();
        return Some(match value.strip_prefix('"') {
            Some(quoted) => quoted.split('"').next().unwrap_or_default().to_string(),
            None => value
                .split(|c: char| c.is_whitespace() || c == ';')
                .next()
                .unwrap_or_default()
                .to_string(),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const CANARY: &str = "canary-import-secret";

    #[test]
    fn jaas_becomes_a_user_and_a_referenced_password() {
        let mut t = Translated::default();
        t.add(
            "producer.override.sasl.jaas.config",
            "sasl.jaas.config",
            &format!("org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" password=\"{CANARY}\";"),
        );
        assert_eq!(
            t.toml,
            "\"sasl.username\" = \"alice\"\n\"sasl.password\" = \"${env:OUTBOX_KAFKA_SASL_PASSWORD}\"\n"
        );
        assert_eq!(t.env[0].0, "OUTBOX_KAFKA_SASL_PASSWORD");
        assert!(t.unmapped.is_empty());
    }

    #[test]
    fn secret_properties_become_references_and_java_ones_are_listed() {
        let mut t = Translated::default();
        for (key, value) in [
            ("ssl.key.password", CANARY),
            ("ssl.keystore.password", CANARY),
            ("ssl.truststore.password", CANARY),
            ("ssl.truststore.location", "/etc/kafka/truststore.jks"),
            ("linger.ms", "2"),
        ] {
            t.add(&format!("producer.override.{key}"), key, value);
        }
        let mut jaas = Translated::default();
        jaas.add(
            "producer.override.sasl.jaas.config",
            "sasl.jaas.config",
            &format!("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientSecret=\"{CANARY}\";"),
        );
        let all = format!("{t:?}{jaas:?}");
        assert!(!all.contains(CANARY), "{all}");
        assert!(
            t.toml
                .contains("\"ssl.key.password\" = \"${env:OUTBOX_KAFKA_SSL_KEY_PASSWORD}\""),
            "{}",
            t.toml
        );
        assert!(t.toml.contains("\"linger.ms\" = \"2\""), "{}", t.toml);
        let left: Vec<&str> = t.unmapped.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            left,
            [
                "producer.override.ssl.truststore.password",
                "producer.override.ssl.truststore.location"
            ]
        );
        assert!(
            jaas.unmapped[0].1.contains("OAuthBearerLoginModule"),
            "{jaas:?}"
        );
    }

    #[test]
    fn jaas_options() {
        let text = r#"x.PlainLoginModule required myusername="no" username="bob" password=p;"#;
        assert_eq!(jaas_option(text, "username").as_deref(), Some("bob"));
        assert_eq!(jaas_option(text, "password").as_deref(), Some("p"));
        assert_eq!(jaas_option(text, "clientId"), None);
    }
}
