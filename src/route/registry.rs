//! Confluent-compatible schema registry client (Confluent, Apicurio's `ccompat` API,
//! Karapace): registers a schema under a subject and learns its id. Registering an
//! identical schema again returns the existing id, so a restart is harmless.

use std::time::Duration;

use apache_avro::Schema;
use reqwest::Url;

/// Registry failures; the URL is shown without credentials.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("schema registry URL {url:?} is not valid: {reason}")]
    Url { url: String, reason: String },
    #[error("schema registry {url} did not register subject {subject:?}: {reason}")]
    Register {
        url: String,
        subject: String,
        reason: String,
    },
    #[error("schema registry {url} refused the schema for subject {subject:?}: {reason} (an incompatible schema under the subject's compatibility rule, or missing rights: fix the registry or the schema, then start again)")]
    Refused {
        url: String,
        subject: String,
        reason: String,
    },
}

impl RegistryError {
    /// True when asking again later may succeed (registry down, overloaded, 5xx); a
    /// refusal (4xx: incompatible schema, no rights) needs an operator.
    pub fn is_transient(&self) -> bool {
        matches!(self, RegistryError::Register { .. })
    }
}

/// A registry at one base URL.
#[derive(Debug)]
pub struct Registry {
    client: reqwest::Client,
    base: Url,
}

impl Registry {
    /// A client for the registry at `url` (basic-auth credentials may be in the URL).
    pub fn new(url: &str) -> Result<Self, RegistryError> {
        let invalid = |reason: String| RegistryError::Url {
            url: redact_str(url),
            reason,
        };
        let mut base = Url::parse(url).map_err(|e| invalid(e.to_string()))?;
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| invalid(e.to_string()))?;
        Ok(Self { client, base })
    }

    /// Registers `schema` under `subject` (or finds it registered) and returns its id.
    pub async fn register(&self, subject: &str, schema: &Schema) -> Result<u32, RegistryError> {
        let fail = |reason: String| RegistryError::Register {
            url: redact(&self.base),
            subject: subject.to_string(),
            reason,
        };
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|_| fail("base URL cannot have a path".into()))?
            .pop_if_empty()
            .extend(["subjects", subject, "versions"]);
        let text = serde_json::to_string(schema).map_err(|e| fail(e.to_string()))?;
        let mut request = self
            .client
            .post(url)
            .header("Content-Type", "application/vnd.schemaregistry.v1+json")
            .json(&serde_json::json!({ "schema": text }));
        if !self.base.username().is_empty() {
            request = request.basic_auth(self.base.username(), self.base.password());
        }
        let response = request
            .send()
            .await
            .map_err(|e| fail(e.without_url().to_string()))?;
        let status = response.status();
        let body: serde_json::Value = response.json().await.map_err(|e| {
            fail(format!(
                "HTTP {status}, unreadable body: {}",
                e.without_url()
            ))
        })?;
        if status.is_client_error()
            && status != reqwest::StatusCode::REQUEST_TIMEOUT
            && status != reqwest::StatusCode::TOO_MANY_REQUESTS
        {
            return Err(RegistryError::Refused {
                url: redact(&self.base),
                subject: subject.to_string(),
                reason: format!("HTTP {status}: {body}"),
            });
        }
        if !status.is_success() {
            return Err(fail(format!("HTTP {status}: {body}")));
        }
        body.get("id")
            .and_then(serde_json::Value::as_u64)
            .and_then(|id| u32::try_from(id).ok())
            .ok_or_else(|| fail(format!("no schema id in the answer {body}")))
    }
}

/// The URL without user name and password.
fn redact(url: &Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.to_string()
}

fn redact_str(url: &str) -> String {
    Url::parse(url)
        .map(|u| redact(&u))
        .unwrap_or_else(|_| "<unparsable URL>".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_shown() {
        let e = Registry::new("http://user:s3cret@127.0.0.1:1/x")
            .unwrap()
            .base
            .clone();
        assert!(!redact(&e).contains("s3cret"));
        let bad = Registry::new("not a url with s3cret")
            .unwrap_err()
            .to_string();
        assert!(!bad.contains("s3cret"), "{bad}");
    }
}
