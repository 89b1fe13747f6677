//! Who may read the console and who may act on it. Reading needs no credential on a
//! loopback listener (only this machine reaches it); off loopback it needs a named
//! `read` or `admin` credential, acting always an `admin` one. A credential is a
//! token sent as `Authorization: Bearer …` — never a cookie, so no other site can make
//! a browser act with it — compared in constant time, and refused over plain HTTP off
//! loopback (it would cross the network in the clear). Failed attempts are rate-limited.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::secret::Secret;

/// What a credential allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// The console's pages and the read API.
    Read,
    /// Reading, and the actions (pause, resume, replay, release).
    Admin,
}

/// `[monitor.credentials.NAME]`: one person's or script's token (the audit trail names
/// them by `NAME`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credential {
    pub access: Access,
    /// The token: `"${env:NAME}"` or `"${file:PATH}"`, at least 16 characters.
    pub token: Secret,
}

/// Shortest token accepted: a guessable one is no protection.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Who is asking, as far as the console can tell.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Caller {
    /// The credential's name; `anonymous` for a loopback reader without one.
    pub name: String,
    pub access: Access,
}

/// Why a request was refused: its status and what to do.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("this monitor listens off loopback: reading the console needs a credential (Authorization: Bearer <token>, a [monitor.credentials.NAME] with access = \"read\" or \"admin\")")]
    ReadNeedsCredential,
    #[error("this action needs an admin credential (Authorization: Bearer <token> of a [monitor.credentials.NAME] with access = \"admin\")")]
    ActionNeedsAdmin,
    #[error("credential {name:?} may only read; this action needs access = \"admin\"")]
    ReadOnly { name: String },
    #[error("the credential is not one of monitor.credentials")]
    Unknown,
    #[error("the Authorization header is not `Bearer <token>`")]
    Malformed,
    #[error("credentials are refused over plain HTTP off loopback (they would cross the network in the clear): serve the monitor with TLS (monitor.tls) or listen on loopback and reach it through a tunnel")]
    PlainHttp,
    #[error("too many refused credentials: wait {retry_secs} s")]
    TooManyFailures { retry_secs: u64 },
    #[error("too many actions: wait {retry_secs} s")]
    TooManyActions { retry_secs: u64 },
    #[error("too many event lookups (each reads Kafka): wait {retry_secs} s")]
    TooManyLookups { retry_secs: u64 },
}

impl Refusal {
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::ReadNeedsCredential
            | Refusal::ActionNeedsAdmin
            | Refusal::Unknown
            | Refusal::Malformed => StatusCode::UNAUTHORIZED,
            Refusal::ReadOnly { .. } | Refusal::PlainHttp => StatusCode::FORBIDDEN,
            Refusal::TooManyFailures { .. }
            | Refusal::TooManyActions { .. }
            | Refusal::TooManyLookups { .. } => StatusCode::TOO_MANY_REQUESTS,
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.to_string() });
        (self.status(), axum::Json(body)).into_response()
    }
}

/// The console's door: its credentials and whether the listener is private.
pub struct Gate {
    /// Each credential's name, access and token digest.
    credentials: Vec<(String, Access, [u8; 32])>,
    /// The listener is bound to a loopback address.
    loopback: bool,
    /// The monitor port is served over TLS.
    tls: bool,
    failures: Mutex<Bucket>,
    actions: Mutex<Bucket>,
    lookups: Mutex<Bucket>,
}

impl Gate {
    pub fn new(credentials: &BTreeMap<String, Credential>, loopback: bool, tls: bool) -> Self {
        Self {
            credentials: credentials
                .iter()
                .map(|(name, c)| (name.clone(), c.access, digest(c.token.expose())))
                .collect(),
            loopback,
            tls,
            // Ten wrong tokens a minute: enough for typos, far too few to guess one.
            failures: Mutex::new(Bucket::new(10, Duration::from_secs(60))),
            // Thirty actions a minute over all callers.
            actions: Mutex::new(Bucket::new(30, Duration::from_secs(60))),
            // Twenty lookups a minute: each reads the tables and up to a few partitions.
            lookups: Mutex::new(Bucket::new(20, Duration::from_secs(60))),
        }
    }

    /// Who `parts` comes from, if they may read.
    pub fn reader(&self, parts: &Parts) -> Result<Caller, Refusal> {
        match self.presented(parts)? {
            Some(caller) => Ok(caller),
            None if self.loopback => Ok(Caller {
                name: "anonymous".into(),
                access: Access::Read,
            }),
            None => Err(Refusal::ReadNeedsCredential),
        }
    }

    /// Who `parts` comes from, if they may act (one action of the rate spent).
    pub fn admin(&self, parts: &Parts) -> Result<Caller, Refusal> {
        let caller = self.presented(parts)?.ok_or(Refusal::ActionNeedsAdmin)?;
        if caller.access != Access::Admin {
            return Err(Refusal::ReadOnly { name: caller.name });
        }
        self.actions
            .lock()
            .expect("action bucket")
            .take()
            .map_err(|retry_secs| Refusal::TooManyActions { retry_secs })?;
        Ok(caller)
    }

    /// One event lookup of the rate spent, or how long to wait.
    pub fn lookup(&self) -> Result<(), Refusal> {
        self.lookups
            .lock()
            .expect("lookup bucket")
            .take()
            .map_err(|retry_secs| Refusal::TooManyLookups { retry_secs })
    }

    /// The credential `parts` carries, checked; `None` when it carries none.
    fn presented(&self, parts: &Parts) -> Result<Option<Caller>, Refusal> {
        let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
            return Ok(None);
        };
        if !self.loopback && !self.tls {
            return Err(Refusal::PlainHttp);
        }
        let mut failures = self.failures.lock().expect("failure bucket");
        if let Some(retry_secs) = failures.empty_for() {
            return Err(Refusal::TooManyFailures { retry_secs });
        }
        let token = value
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let found = token.and_then(|t| self.find(t));
        match (token, found) {
            (_, Some(caller)) => Ok(Some(caller)),
            (None, _) => {
                let _ = failures.take();
                Err(Refusal::Malformed)
            }
            (Some(_), None) => {
                let _ = failures.take();
                Err(Refusal::Unknown)
            }
        }
    }

    /// The credential whose token is `token`: every one compared, in constant time.
    fn find(&self, token: &str) -> Option<Caller> {
        let presented = digest(token);
        let mut found = None;
        for (name, access, expected) in &self.credentials {
            if bool::from(expected.ct_eq(&presented)) {
                found = Some(Caller {
                    name: name.clone(),
                    access: *access,
                });
            }
        }
        found
    }
}

/// Digests are compared, not tokens: equal lengths, whatever was sent.
fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// At most `size` takes per `period`, refilled evenly.
struct Bucket {
    size: f64,
    per_sec: f64,
    level: f64,
    at: Instant,
}

impl Bucket {
    fn new(size: u32, period: Duration) -> Self {
        Self {
            size: f64::from(size),
            per_sec: f64::from(size) / period.as_secs_f64(),
            level: f64::from(size),
            at: Instant::now(),
        }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        self.level = (self.level + (now - self.at).as_secs_f64() * self.per_sec).min(self.size);
        self.at = now;
    }

    /// Seconds until one take is possible, when none is now.
    fn empty_for(&mut self) -> Option<u64> {
        self.refill();
        (self.level < 1.0).then(|| ((1.0 - self.level) / self.per_sec).ceil() as u64)
    }

    /// Takes one, or says how long to wait.
    fn take(&mut self) -> Result<(), u64> {
        if let Some(wait) = self.empty_for() {
            return Err(wait);
        }
        self.level -= 1.0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(loopback: bool, tls: bool) -> Gate {
        let mut creds = BTreeMap::new();
        creds.insert(
            "alice".to_string(),
            Credential {
                access: Access::Admin,
                token: Secret::new("alice-admin-token-0123"),
            },
        );
        creds.insert(
            "rob".to_string(),
            Credential {
                access: Access::Read,
                token: Secret::new("rob-read-token-012345"),
            },
        );
        Gate::new(&creds, loopback, tls)
    }

    fn parts(auth: Option<&str>) -> Parts {
        let mut b = axum::http::Request::builder().uri("/api/v1/fleet");
        if let Some(a) = auth {
            b = b.header(header::AUTHORIZATION, a);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn loopback_reads_without_a_credential_but_acts_only_with_an_admin_one() {
        let g = gate(true, false);
        assert_eq!(g.reader(&parts(None)).unwrap().name, "anonymous");
        assert_eq!(g.admin(&parts(None)), Err(Refusal::ActionNeedsAdmin));
        assert_eq!(
            g.admin(&parts(Some("Bearer rob-read-token-012345"))),
            Err(Refusal::ReadOnly { name: "rob".into() })
        );
        let alice = g
            .admin(&parts(Some("Bearer alice-admin-token-0123")))
            .unwrap();
        assert_eq!(
            (alice.name.as_str(), alice.access),
            ("alice", Access::Admin)
        );
        assert_eq!(
            g.reader(&parts(Some("Bearer alice-admin-token-012"))),
            Err(Refusal::Unknown)
        );
        assert_eq!(g.reader(&parts(Some("Basic abc"))), Err(Refusal::Malformed));
    }

    #[test]
    fn off_loopback_reading_needs_a_credential_and_plain_http_refuses_them() {
        let plain = gate(false, false);
        assert_eq!(
            plain.reader(&parts(None)),
            Err(Refusal::ReadNeedsCredential)
        );
        assert_eq!(
            plain.reader(&parts(Some("Bearer rob-read-token-012345"))),
            Err(Refusal::PlainHttp)
        );
        let tls = gate(false, true);
        assert_eq!(tls.reader(&parts(None)), Err(Refusal::ReadNeedsCredential));
        assert_eq!(
            tls.reader(&parts(Some("Bearer rob-read-token-012345")))
                .unwrap()
                .name,
            "rob"
        );
    }

    #[test]
    fn wrong_tokens_are_rate_limited_even_before_a_right_one() {
        let g = gate(true, false);
        for _ in 0..10 {
            assert_eq!(
                g.reader(&parts(Some("Bearer guess"))),
                Err(Refusal::Unknown)
            );
        }
        assert!(matches!(
            g.reader(&parts(Some("Bearer alice-admin-token-0123"))),
            Err(Refusal::TooManyFailures { retry_secs: 1..=6 })
        ));
    }

    #[test]
    fn actions_are_rate_limited() {
        let g = gate(true, false);
        let alice = || g.admin(&parts(Some("Bearer alice-admin-token-0123")));
        for _ in 0..30 {
            alice().unwrap();
        }
        assert!(matches!(alice(), Err(Refusal::TooManyActions { .. })));
    }
}
