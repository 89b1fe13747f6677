//! The monitor server: one for a single router and a pool instance alike. Probes and
//! scrapers' endpoints (`legacy`), the console's JSON API (`api`, under `/api/v1`) and
//! its pages (`page`), with who may read and act decided in `access`.

pub mod access;
mod actions;
mod api;
mod app;
mod dead_letters;
mod legacy;
mod page;
mod parked;
pub mod tls;

use std::sync::Arc;

use axum::http::{header, HeaderValue};
use axum::response::Response;
use tokio_util::sync::CancellationToken;

use access::Gate;
use app::App;
pub use app::{
    ConsoleSetup, DeadLetters, Desk, DeskError, Lookup, ParkedWhich, Parking, Replay, ReplayWhich,
};

/// Serves every endpoint on `addr` until `shutdown`; binding errors are returned at once.
pub async fn serve(
    addr: &str,
    setup: ConsoleSetup<'_>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let loopback = listener.local_addr()?.ip().is_loopback();
    let acceptor = match setup.tls {
        Some(tls) => Some(tls.acceptor().map_err(std::io::Error::other)?),
        None => None,
    };
    let app = App {
        served: setup.served,
        board: setup.board,
        gate: Arc::new(Gate::new(setup.credentials, loopback, acceptor.is_some())),
        status_topic: setup.status_topic,
        control: setup.control,
        desk: setup.desk,
    };
    let scheme = if acceptor.is_some() { "https" } else { "http" };
    tracing::info!(%addr, %scheme, "serving /metrics /health /ready /status, the console at /console and its API at /api/v1");
    let console = api::routes()
        .merge(actions::routes())
        .merge(parked::routes())
        .merge(dead_letters::routes())
        .merge(page::routes())
        .layer(axum::middleware::map_response(private));
    let router = legacy::routes()
        .with_state(app.served.clone())
        .merge(console.with_state(app));
    tokio::spawn(async move {
        let Some(acceptor) = acceptor else {
            let result = axum::serve(listener, router)
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await;
            if let Err(e) = result {
                tracing::error!(error = %e, "monitoring endpoint failed");
            }
            return;
        };
        tls::serve(listener, acceptor, router, shutdown).await;
    });
    Ok(())
}

/// The console's answers are not cached, framed, or sent on as a referrer, and its
/// pages run only the scripts the binary serves.
async fn private(mut response: Response) -> Response {
    let h = response.headers_mut();
    let set = |h: &mut axum::http::HeaderMap, k: header::HeaderName, v: &'static str| {
        h.insert(k, HeaderValue::from_static(v));
    };
    set(h, header::CACHE_CONTROL, "no-store");
    set(h, header::X_FRAME_OPTIONS, "DENY");
    set(h, header::REFERRER_POLICY, "no-referrer");
    set(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(
        h,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    );
    response
}
