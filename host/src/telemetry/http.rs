//! The operator's HTTP endpoint: `/` (the HTML status page), `/jobs` and
//! `/jobs/{cluster}/{namespace}/{name}` (its Jobs view: the fleet's jobs with filters and pages,
//! and one job with its transitions and per-plugin trace, as HTML — [`jobs_page`]),
//! `/metrics` (Prometheus), `/healthz` (the process answers), `/readyz` (this replica can do
//! its part: plugins serve, the state store answers, the Lease is not lost), `/status` (JSON)
//! and the job view API under `/api/v1/` ([`jobs_api`]; the Jobs view shows what it answers).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::status::StatusSources;
use super::{exposition, jobs_api, jobs_page, metrics};

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
    let api_sources = sources.clone();
    let page_sources = sources.clone();
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
        .with_state(shared)
        .merge(
            Router::new()
                .route("/api/v1/jobs", get(jobs_api::list))
                .route(
                    "/api/v1/jobs/{cluster}/{namespace}/{name}",
                    get(jobs_api::show),
                )
                .route("/api/v1/openapi.json", get(jobs_api::openapi))
                .with_state(api_sources),
        )
        .merge(
            Router::new()
                .route("/jobs", get(jobs_page::list))
                .route("/jobs/{cluster}/{namespace}/{name}", get(jobs_page::show))
                .with_state(page_sources),
        );
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(cancel.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "the telemetry endpoint stopped");
        }
    });
    tracing::info!(address = %bound, "telemetry endpoint listening (/, /jobs, /metrics, /healthz, /readyz, /status, /api/v1/jobs)");
    Ok(bound)
}

/// OpenMetrics for a scraper that asks for it, the classic text format otherwise (see
/// [`exposition`]).
async fn metrics_page(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    match metrics::render(&shared.registry) {
        Ok(text) if exposition::wants_openmetrics(accept) => {
            ([(header::CONTENT_TYPE, exposition::OPENMETRICS)], text).into_response()
        }
        Ok(text) => (
            [(header::CONTENT_TYPE, exposition::CLASSIC)],
            exposition::classic(&text),
        )
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics\n").into_response(),
    }
}

async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    let status = shared.sources.snapshot();
    if status.ready {
        // Plugins without a version do not make the replica unready; they are said here, under
        // the answer, so a probe's log shows them.
        let mut text = String::from("ready\n");
        for line in status.plugins_not_serving() {
            text.push_str("warning: ");
            text.push_str(&line);
            text.push('\n');
        }
        (StatusCode::OK, text).into_response()
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
