//! The bucket, through object_store's S3 client: signed requests, retries with backoff,
//! TLS with an extra CA.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::{BackoffConfig, ClientOptions, ObjectStoreExt, PutPayload, RetryConfig};

use super::ClaimCheckConfig;
use crate::outbox::EventId;

/// An S3-compatible bucket.
#[derive(Debug, Clone)]
pub struct Bucket {
    store: Arc<AmazonS3>,
    name: String,
    prefix: String,
}

impl Bucket {
    /// The client for `cfg`, credentials from the file first, then the usual AWS
    /// environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
    /// `AWS_DEFAULT_REGION`, `AWS_ENDPOINT`, container and instance credentials).
    /// Nothing is contacted yet.
    pub fn new(cfg: &ClaimCheckConfig) -> Result<Self, String> {
        // object_store's reqwest takes rustls's process-wide provider: ring, as everywhere
        // else here. Err only means one is installed already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut options = ClientOptions::new()
            .with_timeout(Duration::from_secs(cfg.request_timeout_secs))
            .with_connect_timeout(Duration::from_secs(10))
            .with_allow_http(cfg.allow_http);
        if let Some(ca) = &cfg.ca_file {
            let pem = std::fs::read(ca)
                .map_err(|e| format!("claim_check.ca_file {}: {e}", ca.display()))?;
            let certs = object_store::Certificate::from_pem_bundle(&pem)
                .map_err(|e| format!("claim_check.ca_file {}: {e}", ca.display()))?;
            for cert in certs {
                options = options.with_root_certificate(cert);
            }
        }
        let mut b = AmazonS3Builder::from_env()
            .with_bucket_name(&cfg.bucket)
            .with_virtual_hosted_style_request(!cfg.path_style)
            .with_allow_http(cfg.allow_http)
            .with_client_options(options)
            .with_retry(RetryConfig {
                backoff: BackoffConfig::default(),
                max_retries: cfg.max_retries,
                retry_timeout: Duration::from_secs(cfg.retry_timeout_secs),
            });
        if std::env::var_os("AWS_DEFAULT_REGION").is_none()
            && std::env::var_os("AWS_REGION").is_some()
        {
            b = b.with_region(std::env::var("AWS_REGION").unwrap_or_default());
        }
        if let Some(region) = &cfg.region {
            b = b.with_region(region);
        }
        if let Some(endpoint) = &cfg.endpoint {
            b = b.with_endpoint(endpoint);
        }
        if let (Some(id), Some(secret)) = (&cfg.access_key_id, &cfg.secret_access_key) {
            b = b
                .with_access_key_id(id.expose())
                .with_secret_access_key(secret.expose());
        }
        if let Some(token) = &cfg.session_token {
            b = b.with_token(token.expose());
        }
        if let Some(sse) = &cfg.server_side_encryption {
            // The key's type is not exported; its documented name is.
            let key: AmazonS3ConfigKey = "aws_server_side_encryption"
                .parse()
                .map_err(|e| format!("claim_check.server_side_encryption: {e}"))?;
            b = b.with_config(key, sse);
        }
        if let Some(key) = &cfg.sse_kms_key_id {
            b = b.with_sse_kms_encryption(key);
        }
        let store = b
            .build()
            .map_err(|e| format!("claim_check: {}", without_secrets(&e.to_string())))?;
        Ok(Self {
            store: Arc::new(store),
            name: cfg.bucket.clone(),
            prefix: cfg.prefix.clone(),
        })
    }

    /// The bucket's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where an event's value goes (see `object_key`).
    pub fn key(&self, topic: &str, id: &EventId, value: &[u8]) -> Path {
        super::reference::object_key(&self.prefix, topic, id, value)
    }

    /// Writes `value` at `key` (object_store retries within the configured limits).
    pub async fn put(&self, key: &Path, value: Vec<u8>) -> Result<(), String> {
        self.store
            .put(key, PutPayload::from(value))
            .await
            .map(|_| ())
            .map_err(|e| without_secrets(&e.to_string()))
    }
}

/// Elements of an S3 error body that quote the request's credentials or what was
/// signed with them (AWS's `InvalidAccessKeyId`, `SignatureDoesNotMatch`).
const SECRET_ELEMENTS: [&str; 6] = [
    "AWSAccessKeyId",
    "StringToSign",
    "StringToSignBytes",
    "SignatureProvided",
    "CanonicalRequest",
    "CanonicalRequestBytes",
];

/// An error text with any `Credential=…` / signature parts cut, and the contents of
/// an error body's credential elements: object_store's HTTP errors may quote the
/// request and the store's answer.
fn without_secrets(text: &str) -> String {
    let mut text = text.to_string();
    for element in SECRET_ELEMENTS {
        text = without_element(&text, element);
    }
    let mut out = String::with_capacity(text.len());
    for word in text.split_inclusive(char::is_whitespace) {
        let lower = word.to_ascii_lowercase();
        if [
            "signature=",
            "credential=",
            "x-amz-security-token",
            "x-amz-signature",
        ]
        .iter()
        .any(|s| lower.contains(s))
        {
            out.push_str("[redacted] ");
        } else {
            out.push_str(word);
        }
    }
    out
}

/// `text` with what every `<element>…</element>` holds replaced by `[redacted]` (an
/// element left open: everything after its start).
fn without_element(text: &str, element: &str) -> String {
    let (open, close) = (format!("<{element}>"), format!("</{element}>"));
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(&open) {
        let inner = start + open.len();
        out.push_str(&rest[..inner]);
        out.push_str("[redacted]");
        match rest[inner..].find(&close) {
            Some(end) => rest = &rest[inner + end..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_s3_error_body_loses_its_credentials() {
        let body = "Client error with status 403 Forbidden: <?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code><AWSAccessKeyId>AKIACANARY1234</AWSAccessKeyId><StringToSign>AWS4-HMAC-SHA256\n20261205T000000Z\nCANARYSCOPE</StringToSign><SignatureProvided>canarysig</SignatureProvided><CanonicalRequest>PUT /b/k\nx-amz-content-sha256:canaryhash</CanonicalRequest><RequestId>r-1</RequestId></Error> Authorization: AWS4-HMAC-SHA256 Credential=AKIACANARY1234/x, Signature=canarysig2";
        let out = without_secrets(body);
        for canary in ["AKIACANARY1234", "CANARYSCOPE", "canarysig", "canaryhash"] {
            assert!(!out.contains(canary), "{canary} in {out}");
        }
        assert!(
            out.contains("SignatureDoesNotMatch") && out.contains("r-1"),
            "{out}"
        );
        assert_eq!(without_element("<A>x", "A"), "<A>[redacted]");
    }
}
