//! `[claim_check]`: which records leave their value in an S3-compatible bucket, and how
//! the router reaches the bucket.

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::Deserialize;

use super::reference::{object_key, Reference};
use crate::secret::Secret;

/// The claim check. Present: values over `threshold_bytes`, and every value of the
/// aggregate types listed, are written to the bucket before their record is sent; the
/// record carries a reference instead.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimCheckConfig {
    /// The bucket objects are written to (it must exist).
    pub bucket: String,
    /// Values larger than this many bytes are written to the bucket.
    #[serde(default = "default_threshold")]
    pub threshold_bytes: usize,
    /// Aggregate types (route values) whose every value is written to the bucket.
    #[serde(default)]
    pub aggregate_types: BTreeSet<String>,
    /// Put before every object key (`<prefix><topic>/<event id>/<sha-256 of the value>`).
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Bytes of values read from the binlog and not yet written to the bucket: reading
    /// waits while they are spent (a larger value goes alone, and nothing is read
    /// until it is written).
    #[serde(
        default = "default_max_pending_bytes",
        deserialize_with = "crate::units::bytes"
    )]
    pub max_pending_bytes: usize,
    /// The S3 endpoint (`https://…`); unset: AWS S3 in `region`, or `AWS_ENDPOINT`.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// The bucket's region; unset: `AWS_DEFAULT_REGION` / `AWS_REGION`, else us-east-1.
    #[serde(default)]
    pub region: Option<String>,
    /// `https://endpoint/bucket/key` (most S3-compatible servers); false:
    /// `https://bucket.endpoint/key` (AWS S3's virtual-hosted style).
    #[serde(default = "default_true")]
    pub path_style: bool,
    /// Access key; unset: `AWS_ACCESS_KEY_ID`, the container or instance credentials.
    #[serde(default)]
    pub access_key_id: Option<Secret>,
    /// Its secret (as `${env:…}` or `${file:…}`); unset: `AWS_SECRET_ACCESS_KEY`.
    #[serde(default)]
    pub secret_access_key: Option<Secret>,
    /// A session token for temporary credentials; unset: `AWS_SESSION_TOKEN`.
    #[serde(default)]
    pub session_token: Option<Secret>,
    /// Server-side encryption: `AES256` (SSE-S3) or `aws:kms` (SSE-KMS, with
    /// `sse_kms_key_id`); unset: the bucket's default.
    #[serde(default)]
    pub server_side_encryption: Option<String>,
    /// The KMS key of `server_side_encryption = "aws:kms"`.
    #[serde(default)]
    pub sse_kms_key_id: Option<String>,
    /// PEM file of the CA(s) that signed an `https://` endpoint's certificate, trusted
    /// besides the system's roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Plain `http://` endpoints are refused unless this is true (a local test store).
    #[serde(default)]
    pub allow_http: bool,
    /// Attempts after a failed write, with backoff, before the router stops naming the
    /// event.
    #[serde(default = "default_max_retries")]
    pub max_retries: usize,
    /// No retry starts later than this after the first attempt.
    #[serde(default = "default_retry_timeout_secs")]
    pub retry_timeout_secs: u64,
    /// One request's limit (a 50 MB value needs time on a slow link).
    #[serde(default = "default_request_timeout_secs")]
    pub request_timeout_secs: u64,
}

impl ClaimCheckConfig {
    /// What is wrong with these settings, if anything; `max_record_bytes` is the
    /// producer's `message.max.bytes`, which a value under the threshold must fit.
    pub fn check(&self, max_record_bytes: usize) -> Result<(), String> {
        if self.bucket.trim().is_empty() {
            return Err("claim_check.bucket is empty: name the bucket objects go to".into());
        }
        // Key, headers and the reference value come on top of a value kept inline.
        if self.threshold_bytes + 64 * 1024 > max_record_bytes {
            return Err(format!(
                "claim_check.threshold_bytes = {} leaves no room under the producer's message.max.bytes ({max_record_bytes}) for key and headers: set it at least 64 KiB lower",
                self.threshold_bytes
            ));
        }
        match (self.server_side_encryption.as_deref(), &self.sse_kms_key_id) {
            (None | Some("AES256"), None) | (Some("aws:kms"), _) => {}
            (Some("AES256") | None, Some(_)) => {
                return Err("claim_check.sse_kms_key_id needs server_side_encryption = \"aws:kms\"".into())
            }
            (Some(other), _) => {
                return Err(format!(
                    "claim_check.server_side_encryption must be \"AES256\" or \"aws:kms\", not {other:?}"
                ))
            }
        }
        if self.access_key_id.is_some() != self.secret_access_key.is_some() {
            return Err(
                "claim_check: access_key_id and secret_access_key go together (or leave both to the AWS environment)".into(),
            );
        }
        if let Some(endpoint) = &self.endpoint {
            let url = reqwest::Url::parse(endpoint)
                .map_err(|e| format!("claim_check.endpoint {endpoint:?}: {e}"))?;
            if url.scheme() == "http" && !self.allow_http {
                return Err(format!("claim_check.endpoint {endpoint:?} is plain HTTP: use https://, or set allow_http = true for a local store"));
            }
        }
        Ok(())
    }

    /// The reference a record of `topic` carrying event `id` gets for `value`.
    pub fn reference(&self, topic: &str, id: &crate::outbox::EventId, value: &[u8]) -> Reference {
        Reference {
            bucket: self.bucket.clone(),
            key: object_key(&self.prefix, topic, id, value).to_string(),
            size: value.len(),
        }
    }
}

fn default_threshold() -> usize {
    256 * 1024
}
fn default_max_pending_bytes() -> usize {
    // Sixteen 1 MiB values written at once keep the bucket busy; a larger value spends
    // it alone, so a 50 MB row is held whole once, not once with the bucket and again
    // in the reader.
    16 << 20
}
fn default_prefix() -> String {
    "outbox/".into()
}
fn default_true() -> bool {
    true
}
fn default_max_retries() -> usize {
    10
}
fn default_retry_timeout_secs() -> u64 {
    60
}
fn default_request_timeout_secs() -> u64 {
    120
}
