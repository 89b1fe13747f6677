//! `/api/v1`: the console's JSON, which its pages are built from and scripts use the
//! same way. Reading needs what `access` says; every list pages.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;

use super::app::{App, Reader};
use crate::monitor::fleet::{FleetSource, HISTORY_CAPACITY, RESOLUTION_SECS, WINDOW_SECS};

pub fn routes() -> Router<App> {
    Router::new()
        .route("/api/v1/instance", get(instance))
        .route("/api/v1/whoami", get(whoami))
        .route("/api/v1/fleet", get(fleet))
        .route("/api/v1/sources/{name}", get(source))
        .route("/api/v1/sources/{name}/history", get(history))
        .route("/api/v1/audit", get(audit))
        .route("/api/v1/sources/{name}/events/{id}", get(event))
}

/// `?page=1&per_page=50` (pages count from 1; at most 500 per page).
#[derive(Debug, Deserialize)]
pub struct Paging {
    #[serde(default = "first_page")]
    pub page: usize,
    #[serde(default = "default_per_page")]
    pub per_page: usize,
}

fn first_page() -> usize {
    1
}

fn default_per_page() -> usize {
    50
}

impl Paging {
    /// One page of `items`, with the totals a client needs to ask for the next.
    pub fn page<T: serde::Serialize>(&self, items: Vec<T>) -> serde_json::Value {
        let per_page = self.per_page.clamp(1, 500);
        let page = self.page.max(1);
        let total = items.len();
        let shown: Vec<T> = items
            .into_iter()
            .skip((page - 1) * per_page)
            .take(per_page)
            .collect();
        json!({
            "items": shown,
            "page": page,
            "per_page": per_page,
            "total": total,
            "pages": total.div_ceil(per_page),
        })
    }
}

async fn instance(State(app): State<App>, Reader(_): Reader) -> Json<serde_json::Value> {
    Json(json!({
        "instance": app.served.instance(),
        "group": app.served.group(),
        "pool": app.served.shape() == crate::monitor::served::Shape::Pool,
        "version": env!("CARGO_PKG_VERSION"),
        "status_topic": app.status_topic,
        "fleet_read_to_end": app.board.caught_up(),
        "history": {
            "window_secs": WINDOW_SECS,
            "resolution_secs": RESOLUTION_SECS,
            "samples_per_source": HISTORY_CAPACITY,
            "samples_held": app.board.samples(),
        },
    }))
}

async fn whoami(Reader(caller): Reader) -> Json<super::access::Caller> {
    Json(caller)
}

/// Every source of the fleet as the status topic tells it.
pub fn fleet_sources(app: &App) -> Vec<FleetSource> {
    app.board.sources(crate::checkpoint::now_ms())
}

async fn fleet(
    State(app): State<App>,
    Reader(_): Reader,
    Query(paging): Query<Paging>,
) -> Json<serde_json::Value> {
    let mut body = paging.page(fleet_sources(&app));
    body["fleet_read_to_end"] = app.board.caught_up().into();
    body["instance"] = app.served.instance().into();
    Json(body)
}

fn no_source(name: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(
            json!({ "error": format!("no source {name:?} reports to this fleet's status topic") }),
        ),
    )
        .into_response()
}

/// One source: its fleet row and, when this instance runs it, its full `/status`.
async fn source(State(app): State<App>, Reader(_): Reader, Path(name): Path<String>) -> Response {
    let Some(row) = fleet_sources(&app).into_iter().find(|s| s.source == name) else {
        return no_source(&name);
    };
    let local = app
        .served
        .metrics_of(&name)
        .map(|m| super::legacy::source_status(&m));
    Json(json!({ "source": row, "status_here": local })).into_response()
}

/// `?hours=24&points=300`: the last `hours` (at most the window) thinned to `points`.
#[derive(Debug, Deserialize)]
pub struct Window {
    #[serde(default = "default_hours")]
    pub hours: f64,
    #[serde(default = "default_points")]
    pub points: usize,
}

fn default_hours() -> f64 {
    24.0
}

fn default_points() -> usize {
    300
}

impl Window {
    /// The first second (since the epoch) the window covers.
    pub fn since(&self) -> u32 {
        let secs = (self.hours.clamp(0.0, 24.0) * 3600.0) as i64;
        (crate::checkpoint::now_ms() / 1000 - secs).max(0) as u32
    }
}

async fn history(
    State(app): State<App>,
    Reader(_): Reader,
    Path(name): Path<String>,
    Query(window): Query<Window>,
) -> Response {
    match app
        .board
        .history(&name, window.since(), window.points.clamp(2, 2000))
    {
        Some(columns) => Json(columns).into_response(),
        None => no_source(&name),
    }
}

/// The console's actions (pauses, resumes), newest first, from the control topic.
async fn audit(
    State(app): State<App>,
    Reader(_): Reader,
    Query(paging): Query<Paging>,
) -> Json<serde_json::Value> {
    let mut body = paging.page(app.board.actions());
    body["control_topic"] = app.control.as_ref().map(|(_, t)| t.clone()).into();
    Json(body)
}

/// Where an event went: its outbox row(s) and record(s), found in Kafka.
pub async fn find_event(
    app: &App,
    source: &str,
    id: &str,
) -> Result<serde_json::Value, (StatusCode, String)> {
    if id.is_empty() {
        return Err((StatusCode::BAD_REQUEST, "give an event id".into()));
    }
    let Some(lookup) = &app.desk.lookup else {
        return Err((
            StatusCode::NOT_IMPLEMENTED,
            "event lookup is not offered by this instance".into(),
        ));
    };
    app.gate.lookup().map_err(|r| (r.status(), r.to_string()))?;
    let found = lookup
        .find(source, id)
        .await
        .map_err(|why| (StatusCode::BAD_GATEWAY, why))?;
    match found.as_array().is_some_and(|a| a.is_empty()) {
        true => Err((StatusCode::NOT_FOUND, format!("no outbox row of {source} has event id {id:?}: never written, or pruned since (a pruned row's record cannot be searched for without its key and time; `reconcile` reads topics whole)"))),
        false => Ok(found),
    }
}

async fn event(
    State(app): State<App>,
    Reader(_): Reader,
    Path((name, id)): Path<(String, String)>,
) -> Response {
    match find_event(&app, &name, &id).await {
        Ok(found) => Json(json!({ "source": name, "event_id": id, "rows": found })).into_response(),
        Err((code, why)) => (code, Json(json!({ "error": why }))).into_response(),
    }
}
