//! The endpoints scrapers and probes use, open without a credential (they hold no
//! payload): `/metrics` (Prometheus text), `/health` (liveness), `/ready` and
//! `/status`; a pool's per source (every series labelled `source`,
//! `/sources/{name}/status`, `/ready` over the sources it leads).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Map, Value};

use crate::monitor::served::Shape;
use crate::monitor::{Metrics, Role, Served, Unobserved};

pub fn routes() -> Router<Arc<Served>> {
    Router::new()
        .route("/metrics", get(metrics_text))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/status", get(status))
        .route("/sources/{name}/status", get(source_status_of))
}

/// A single router's metrics.
fn single(served: &Served) -> Option<Metrics> {
    match served.shape() {
        Shape::Single => served.sources().into_iter().next().map(|(_, m)| m),
        Shape::Pool => None,
    }
}

async fn metrics_text(State(served): State<Arc<Served>>) -> impl IntoResponse {
    let texts: Vec<String> = served.sources().iter().map(|(_, m)| m.encode()).collect();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        crate::monitor::exposition::merge(texts.iter().map(String::as_str)),
    )
}

/// Liveness: the process answers (a Kubernetes liveness probe; restarting the router
/// does not bring back a broker). The body carries the verdict and readiness for
/// humans; a pool's, per source, its role and readiness.
async fn health(State(served): State<Arc<Served>>) -> Json<Value> {
    if let Some(m) = single(&served) {
        let live = m.live();
        return Json(json!({
            "alive": true,
            "verdict": m.status().map(|s| s.verdict),
            "connected": m.is_connected(),
            "ready": live.ready,
            "not_ready_reason": live.not_ready_reason,
        }));
    }
    Json(json!({
        "alive": true,
        "instance": served.instance(),
        "sources": per_source(&served, |m| {
            let live = m.live();
            json!({
                "role": live.role,
                "connected": m.is_connected(),
                "ready": live.ready,
                "not_ready_reason": live.not_ready_reason,
                "failure": live.failure,
            })
        }),
    }))
}

/// Readiness: streaming from the binlog *and* delivering: 503 once undelivered records
/// waited `monitor.ready_max_stall_secs` without an acknowledgement. A pool is ready
/// while every source it leads is (the ones it waits for are other instances' to lead).
async fn ready(State(served): State<Arc<Served>>) -> (StatusCode, String) {
    let not_ready: Vec<String> = match single(&served) {
        Some(m) => m.readiness().err().into_iter().collect(),
        None => served
            .sources()
            .iter()
            .filter(|(_, m)| m.role() != Role::Standby)
            .filter_map(|(name, m)| m.readiness().err().map(|why| format!("{name}: {why}")))
            .collect(),
    };
    match not_ready.is_empty() {
        true => (StatusCode::OK, "ready\n".to_string()),
        false => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", not_ready.join("; ")),
        ),
    }
}

/// A source's `/status`: its observation, or (before the first) that it runs.
pub fn source_status(m: &Metrics) -> Value {
    match m.status() {
        Some(s) => serde_json::to_value(s).unwrap_or_default(),
        None => serde_json::to_value(Unobserved::new(*m.router_state().borrow(), m.live()))
            .unwrap_or_default(),
    }
}

fn observed_code(m: &Metrics) -> StatusCode {
    match m.status() {
        Some(_) => StatusCode::OK,
        None => StatusCode::SERVICE_UNAVAILABLE,
    }
}

fn per_source(served: &Served, f: impl Fn(&Metrics) -> Value) -> Map<String, Value> {
    served
        .sources()
        .iter()
        .map(|(name, m)| (name.clone(), f(m)))
        .collect()
}

/// A single router's observation (503 before the first); a pool's, every source's.
async fn status(State(served): State<Arc<Served>>) -> Response {
    if let Some(m) = single(&served) {
        return (observed_code(&m), Json(source_status(&m))).into_response();
    }
    Json(json!({
        "instance": served.instance(),
        "group": served.group(),
        "sources": per_source(&served, source_status),
    }))
    .into_response()
}

/// One pool source's `/status`, shaped as a single router's (what `status --source`
/// reads): 200 with its observation, 503 before its first one.
async fn source_status_of(State(served): State<Arc<Served>>, Path(name): Path<String>) -> Response {
    let found = served
        .metrics_of(&name)
        .filter(|_| served.shape() == Shape::Pool);
    let Some(m) = found else {
        return (
            StatusCode::NOT_FOUND,
            format!("no source {name:?} in this pool\n"),
        )
            .into_response();
    };
    (observed_code(&m), Json(source_status(&m))).into_response()
}
