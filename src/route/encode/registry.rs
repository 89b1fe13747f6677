//! Confluent-compatible schema registry client (Confluent, Apicurio's `ccompat` API,
//! Karapace): registers a schema under a subject and learns its id. Registering an
//! identical schema again returns the existing id, so a restart is harmless.

use std::time::Duration;

use std::path::Path;

use apache_avro::Schema;
use reqwest::Url;

use super::config::RegistryConfig;
use crate::secret::Secret;

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
    #[error("schema registry {url}: {reason}")]
    Setup { url: String, reason: String },
    #[error("schema registry {url}: TLS failed: {reason}. Trust the CA that signed the registry's certificate (value.registry.ca_file), or give the client certificate it asks for (client_cert_file, client_key_file)")]
    Tls { url: String, reason: String },
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

/// How requests authenticate.
#[derive(Debug)]
enum Auth {
    None,
    Basic {
        user: String,
        password: Option<Secret>,
    },
    Bearer(Secret),
}

/// A registry at one base URL.
#[derive(Debug)]
pub struct Registry {
    client: reqwest::Client,
    base: Url,
    auth: Auth,
}

impl Registry {
    /// A client for the registry `cfg` names: its TLS trust and client certificate, and
    /// basic (in the URL or `username` / `password`) or bearer authentication.
    pub fn new(cfg: &RegistryConfig) -> Result<Self, RegistryError> {
        let invalid = |reason: String| RegistryError::Url {
            url: redact_str(&cfg.url),
            reason,
        };
        let mut base = Url::parse(&cfg.url).map_err(|e| invalid(e.to_string()))?;
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        let setup = |reason: String| RegistryError::Setup {
            url: redact(&base),
            reason,
        };
        let read = |key: &str, path: &Path| {
            std::fs::read(path).map_err(|e| {
                setup(format!(
                    "cannot read value.registry.{key} {}: {e}",
                    path.display()
                ))
            })
        };
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .timeout(Duration::from_secs(10));
        if let Some(path) = &cfg.ca_file {
            let certs =
                reqwest::Certificate::from_pem_bundle(&read("ca_file", path)?).map_err(|e| {
                    setup(format!(
                        "value.registry.ca_file {}: {}",
                        path.display(),
                        chain(&e)
                    ))
                })?;
            if certs.is_empty() {
                return Err(setup(format!(
                    "value.registry.ca_file {} holds no PEM certificate",
                    path.display()
                )));
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        if let (Some(cert), Some(key)) = (&cfg.client_cert_file, &cfg.client_key_file) {
            let mut pem = read("client_cert_file", cert)?;
            pem.push(b'\n');
            pem.extend(read("client_key_file", key)?);
            let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
                setup(format!(
                    "client certificate {} / key {}: {}",
                    cert.display(),
                    key.display(),
                    chain(&e)
                ))
            })?;
            builder = builder.identity(identity);
        }
        let client = builder.build().map_err(|e| setup(chain(&e)))?;
        let auth = match (&cfg.bearer_token, &cfg.username) {
            (Some(token), _) => Auth::Bearer(token.clone()),
            (None, Some(user)) => Auth::Basic {
                user: user.clone(),
                password: cfg.password.clone(),
            },
            (None, None) if !base.username().is_empty() => Auth::Basic {
                user: base.username().to_string(),
                password: base.password().map(Secret::new),
            },
            (None, None) => Auth::None,
        };
        // Credentials travel in the Authorization header only, never in a URL that an
        // error could print.
        let _ = base.set_username("");
        let _ = base.set_password(None);
        Ok(Self { client, base, auth })
    }

    /// The URL where the registry serves the schema with this id (Confluent's
    /// `GET /schemas/ids/{id}`), without credentials.
    pub fn schema_uri(&self, id: u32) -> String {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("an http(s) base URL")
            .pop_if_empty()
            .extend(["schemas", "ids", &id.to_string()]);
        url.to_string()
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
        request = match &self.auth {
            Auth::None => request,
            Auth::Basic { user, password } => {
                request.basic_auth(user, password.as_ref().map(Secret::expose))
            }
            Auth::Bearer(token) => request.bearer_auth(token.expose()),
        };
        let response = request.send().await.map_err(|e| {
            let tls = tls_failure(&e);
            let reason = chain(&e.without_url());
            match tls {
                true => RegistryError::Tls {
                    url: redact(&self.base),
                    reason,
                },
                false => fail(reason),
            }
        })?;
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

/// An error with every cause after it: reqwest's own message is "error sending
/// request", the reason (a refused certificate, a reset connection) is in its sources.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// Whether a request failed in the TLS handshake (a certificate refused either way):
/// no retry helps, the configuration must change.
fn tls_failure(e: &reqwest::Error) -> bool {
    let mut source: Option<&dyn std::error::Error> = Some(e);
    while let Some(s) = source {
        if s.is::<rustls::Error>() {
            return true;
        }
        // rustls reports through io::Errors (nested), whose `source()` skips the error
        // they wrap.
        source = match s
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &dyn std::error::Error),
            None => s.source(),
        };
    }
    false
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
        let cfg = |url: &str| RegistryConfig {
            url: url.into(),
            ..toml::from_str("url = \"\"").unwrap()
        };
        let registry = Registry::new(&cfg("http://user:s3cret@127.0.0.1:1/x")).unwrap();
        assert!(!format!("{registry:?}").contains("s3cret"), "{registry:?}");
        assert!(matches!(&registry.auth, Auth::Basic { user, .. } if user == "user"));
        let bad = Registry::new(&cfg("not a url with s3cret"))
            .unwrap_err()
            .to_string();
        assert!(!bad.contains("s3cret"), "{bad}");
    }
}
