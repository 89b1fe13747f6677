//! A pool instance's endpoints: `/metrics` for every source (each series labelled
//! `source`), `/status` and `/health` per source, `/ready` over the sources it leads.
//! Loopback by default, as a single router's.

use std::sync::{Arc, RwLock};

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use super::{Metrics, Role, Unobserved};

/// What the pool's endpoints show: this instance and every source's metrics, as
/// sources are added and removed.
pub struct PoolView {
    instance: String,
    group: String,
    sources: RwLock<Vec<(String, Metrics)>>,
}

impl PoolView {
    pub fn new(instance: String, group: String) -> Self {
        Self {
            instance,
            group,
            sources: RwLock::new(Vec::new()),
        }
    }

    /// Shows `name` (replacing its metrics, if shown).
    pub fn insert(&self, name: &str, metrics: Metrics) {
        let mut sources = self.sources.write().expect("pool view");
        sources.retain(|(n, _)| n != name);
        sources.push((name.to_string(), metrics));
        sources.sort_by(|a, b| a.0.cmp(&b.0));
    }

    /// Stops showing `name`.
    pub fn remove(&self, name: &str) {
        self.sources
            .write()
            .expect("pool view")
            .retain(|(n, _)| n != name);
    }

    /// The metrics shown for `name`.
    pub fn metrics_of(&self, name: &str) -> Option<Metrics> {
        self.snapshot()
            .into_iter()
            .find_map(|(n, m)| (n == name).then_some(m))
    }

    fn snapshot(&self) -> Vec<(String, Metrics)> {
        self.sources.read().expect("pool view").clone()
    }
}

/// Serves the pool's endpoints until `shutdown`; binding errors are returned at once.
pub async fn serve_pool(
    addr: &str,
    view: Arc<PoolView>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics /health /ready /status for the pool");
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/status", get(status))
        .route("/sources/{name}/status", get(source_status_of))
        .with_state(view);
    tokio::spawn(async move {
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "monitoring endpoint failed");
        }
    });
    Ok(())
}

async fn metrics_text(State(view): State<Arc<PoolView>>) -> impl IntoResponse {
    let texts: Vec<String> = view.snapshot().iter().map(|(_, m)| m.encode()).collect();
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        super::exposition::merge(texts.iter().map(String::as_str)),
    )
}

/// Per source: `/status`'s answer of a single router.
fn source_status(m: &Metrics) -> Value {
    match m.status() {
        Some(s) => serde_json::to_value(s).unwrap_or_default(),
        None => serde_json::to_value(Unobserved::new(*m.router_state().borrow(), m.live()))
            .unwrap_or_default(),
    }
}

fn per_source(view: &PoolView, f: impl Fn(&Metrics) -> Value) -> Map<String, Value> {
    view.snapshot()
        .iter()
        .map(|(name, m)| (name.clone(), f(m)))
        .collect()
}

/// One source's `/status`, shaped as a single router's (what `status --source` reads):
/// 200 with its observation, 503 before its first one.
async fn source_status_of(
    State(view): State<Arc<PoolView>>,
    Path(name): Path<String>,
) -> axum::response::Response {
    let Some(m) = view.metrics_of(&name) else {
        return (
            StatusCode::NOT_FOUND,
            format!("no source {name:?} in this pool\n"),
        )
            .into_response();
    };
    let code = match m.status() {
        Some(_) => StatusCode::OK,
        None => StatusCode::SERVICE_UNAVAILABLE,
    };
    (code, Json(source_status(&m))).into_response()
}

async fn status(State(view): State<Arc<PoolView>>) -> impl IntoResponse {
    Json(json!({
        "instance": view.instance,
        "group": view.group,
        "sources": per_source(&view, source_status),
    }))
}

/// Liveness: the process answers; per source its role and readiness.
async fn health(State(view): State<Arc<PoolView>>) -> impl IntoResponse {
    Json(json!({
        "alive": true,
        "instance": view.instance,
        "sources": per_source(&view, |m| {
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

/// Ready while every source this instance leads streams and delivers (the ones it
/// waits for are other instances' to lead).
async fn ready(State(view): State<Arc<PoolView>>) -> impl IntoResponse {
    let not_ready: Vec<String> = view
        .snapshot()
        .iter()
        .filter(|(_, m)| m.role() != Role::Standby)
        .filter_map(|(name, m)| m.readiness().err().map(|why| format!("{name}: {why}")))
        .collect();
    match not_ready.is_empty() {
        true => (StatusCode::OK, "ready\n".to_string()),
        false => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", not_ready.join("; ")),
        ),
    }
}
