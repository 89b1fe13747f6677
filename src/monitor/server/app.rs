//! What every console handler is given: this instance's sources, the fleet's board,
//! the gate, and where actions go; and the extractors that let a reader or an admin in.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;

use super::access::{Caller, Credential, Gate, Refusal};
pub use crate::monitor::control::ReplayWhich;
use crate::monitor::fleet::Board;
use crate::monitor::Served;

/// What every handler may look at.
#[derive(Clone)]
pub struct App {
    pub served: Arc<Served>,
    pub board: Arc<Board>,
    pub gate: Arc<Gate>,
    /// Where the fleet's reports are (`None`: this instance's sources only).
    pub status_topic: Option<String>,
    /// Where actions go for every instance to follow (`None`: no actions).
    pub control: Option<(crate::kafka::KafkaConfig, String)>,
    /// Finds an event by id, replays events (`None`: not offered here).
    pub desk: Desk,
}

/// What the binary offers the console beyond its own figures: the operator commands
/// that read the outbox tables.
#[derive(Clone, Default)]
pub struct Desk {
    pub lookup: Option<Arc<dyn Lookup>>,
    pub replay: Option<Arc<dyn Replay>>,
    pub parking: Option<Arc<dyn Parking>>,
    pub dead_letters: Option<Arc<dyn DeadLetters>>,
}

/// The dead letters of a source configured on this instance, newest first (a JSON
/// array), as its dead-letter topic holds them.
pub trait DeadLetters: Send + Sync {
    /// How many days back `recent` reads.
    fn window_days(&self) -> i64;
    fn recent<'a>(
        &'a self,
        source: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<serde_json::Value, DeskError>>;
}

/// Why a desk's command did not run: the caller's to fix (`Refused`: a name that is not
/// parked, parking off) or the system's (`Failed`: Kafka, the database).
#[derive(Debug)]
pub enum DeskError {
    Refused(String),
    Failed(String),
}

impl DeskError {
    /// The status the API answers it with, and why.
    pub fn answer(self) -> (axum::http::StatusCode, String) {
        match self {
            DeskError::Refused(why) => (axum::http::StatusCode::CONFLICT, why),
            DeskError::Failed(why) => (axum::http::StatusCode::BAD_GATEWAY, why),
        }
    }
}

/// Ordered parking of a source configured on this instance (`outbox-router parked`):
/// its parked aggregates, oldest first (a JSON array), and a release of some of them —
/// a request on the parking topic that the source's leader carries out, whichever
/// instance that is — audited as `by` with `reason`: the outcomes as JSON.
pub trait Parking: Send + Sync {
    fn list<'a>(
        &'a self,
        source: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<serde_json::Value, DeskError>>;
    fn release<'a>(
        &'a self,
        source: &'a str,
        which: ParkedWhich,
        by: &'a str,
        reason: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<serde_json::Value, DeskError>>;
}

/// Which parked aggregates an action names: ids, narrowed by type and table when one id
/// is parked under more than one.
#[derive(Debug, Clone, Default)]
pub struct ParkedWhich {
    pub ids: Vec<String>,
    pub aggregate_type: Option<String>,
    pub table: Option<String>,
}

/// Counts what a replay would publish again (`outbox-router replay --dry-run`), for a
/// source configured on this instance: its report as JSON, or why not. It reads the
/// outbox tables and sends nothing; the replay itself is asked on the control topic
/// and carried out by the source's leader.
pub trait Replay: Send + Sync {
    fn count<'a>(
        &'a self,
        source: &'a str,
        which: ReplayWhich,
        by: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<serde_json::Value, String>>;
}

/// Finds where an event went, by its id, for a source configured on this instance:
/// the JSON the API answers with (an array, one entry per outbox row of the id), or
/// why it cannot. Given by the binary (the operator commands know the tables).
pub trait Lookup: Send + Sync {
    fn find<'a>(
        &'a self,
        source: &'a str,
        event_id: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<serde_json::Value, String>>;
}

impl FromRef<App> for Arc<Served> {
    fn from_ref(app: &App) -> Self {
        app.served.clone()
    }
}

/// A caller allowed to read the console.
pub struct Reader(pub Caller);

impl FromRequestParts<App> for Reader {
    type Rejection = Refusal;
    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, Refusal> {
        app.gate.reader(parts).map(Reader)
    }
}

/// A caller allowed to act (an admin credential; one action of the rate spent).
pub struct Admin(pub Caller);

impl FromRequestParts<App> for Admin {
    type Rejection = Refusal;
    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, Refusal> {
        app.gate.admin(parts).map(Admin)
    }
}

/// What the console is served with.
pub struct ConsoleSetup<'a> {
    pub served: Arc<Served>,
    pub board: Arc<Board>,
    pub status_topic: Option<String>,
    pub control: Option<(crate::kafka::KafkaConfig, String)>,
    pub desk: Desk,
    pub credentials: &'a BTreeMap<String, Credential>,
    /// The monitor port over TLS, when configured.
    pub tls: Option<&'a super::tls::MonitorTls>,
}
