//! The operator's HTTP endpoint: `/` (the HTML status page), `/metrics` (Prometheus),
//! `/healthz` (the process answers), `/readyz` (this replica can do its part: plugins serve,
//! the state store answers, the Lease is not lost) and `/status` (JSON).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::metrics;
use super::status::StatusSources;

struct Shared {
    sources: StatusSources,
    registry: Registry,
}

/// Binds `listen` and serves until `cancel` fires; returns the bound address (useful with
/// port 0).
pub async fn serve(
    listen: SocketAddr,
    sources: StatusSources,
    cancel: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(listen).await?;
    let bound = listener.local_addr()?;
    let shared = Arc::new(Shared {
        registry: metrics::registry(sources.clone()),
        sources,
    });
    let app = Router::new()
        .route("/", get(status_page))
        .route("/metrics", get(metrics_page))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .with_state(shared);
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(cancel.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the telemetry endpoint stopped");
        }
    });
    tracing::info!(address = %bound, "telemetry endpoint listening (/, /metrics, /healthz, /readyz, /status)");
    Ok(bound)
}

async fn metrics_page(State(shared): State<Arc<Shared>>) -> Response {
    match metrics::render(&shared.registry) {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response(),
    }
}

async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    let status = shared.sources.snapshot();
    if status.ready {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        let mut text = status.not_ready_reasons().join("\n");
        text.push('\n');
        (StatusCode::SERVICE_UNAVAILABLE, text).into_response()
    }
}

async fn status_page(State(shared): State<Arc<Shared>>) -> Response {
    axum::response::Html(super::page::render(&shared.sources.snapshot())).into_response()
}

async fn status(State(shared): State<Arc<Shared>>) -> Response {
    axum::Json(shared.sources.snapshot()).into_response()
}
