//! `/metrics` (Prometheus text), `/health`, `/ready` and `/status` on a loopback address
//! by default.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use tokio_util::sync::CancellationToken;

use super::Metrics;

/// Serves the endpoints until `shutdown`; binding errors are returned at once.
pub async fn serve(
    addr: &str,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics /health /ready /status");
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .route("/status", get(status))
        .with_state(metrics);
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

async fn metrics_text(State(m): State<Metrics>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.encode(),
    )
}

/// Liveness: the process answers (a Kubernetes liveness probe; restarting the router
/// does not bring back a broker). The body carries the verdict and readiness for humans.
async fn health(State(m): State<Metrics>) -> impl IntoResponse {
    let verdict = m.status().map(|s| s.verdict);
    let live = m.live();
    Json(serde_json::json!({
        "alive": true,
        "verdict": verdict,
        "connected": m.is_connected(),
        "ready": live.ready,
        "not_ready_reason": live.not_ready_reason,
    }))
}

/// Readiness: streaming from the binlog *and* delivering: 503 once undelivered records
/// waited `monitor.ready_max_stall_secs` without an acknowledgement.
async fn ready(State(m): State<Metrics>) -> impl IntoResponse {
    match m.readiness() {
        Ok(()) => (StatusCode::OK, "ready\n".to_string()),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    }
}

async fn status(State(m): State<Metrics>) -> impl IntoResponse {
    match m.status() {
        Some(s) => Json(serde_json::to_value(s).unwrap_or_default()).into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(super::status::Unobserved::new(
                *m.router_state().borrow(),
                m.live(),
            )),
        )
            .into_response(),
    }
}
