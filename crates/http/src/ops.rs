//! `/health`, `/ready`, `/metrics`: unauthenticated operational endpoints.

use std::sync::OnceLock;

use crate::error::ApiError;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;

use trellis_core::context::SharedContext;

static PROMETHEUS: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process-wide Prometheus recorder (once; later calls are no-ops).
pub fn install_metrics() {
    PROMETHEUS.get_or_init(|| {
        let builder = metrics_exporter_prometheus::PrometheusBuilder::new()
            .set_buckets(&[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0])
            .unwrap_or_else(|_| metrics_exporter_prometheus::PrometheusBuilder::new());
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        let _ = metrics::set_global_recorder(recorder);
        handle
    });
}

pub fn routes() -> Router<SharedContext> {
    Router::new().route("/health", get(health)).route("/ready", get(ready))
}

/// `/metrics`, on the API's router unless `TRELLIS_METRICS_LISTEN` gives it a listener of its own.
pub fn metrics_routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new().route("/metrics", get(prometheus))
}

/// The separate metrics listener's router: `/metrics` and nothing else (404 for any other path).
pub fn metrics_router() -> Router {
    metrics_routes().fallback(|| async { ApiError::RouteNotFound })
}

/// Liveness: the process serves requests.
#[utoipa::path(get, path = "/health", tag = "operations", responses((status = 200, description = "`{status: ok}`")))]
async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

/// Readiness: the database answers.
#[utoipa::path(get, path = "/ready", tag = "operations", responses((status = 200, description = "Ready"), (status = 503, description = "Database unreachable")))]
async fn ready(State(ctx): State<SharedContext>) -> Result<Json<serde_json::Value>, ApiError> {
    match ctx.store.ping().await {
        Ok(()) => Ok(Json(serde_json::json!({ "status": "ready", "database": "ok" }))),
        Err(err) => {
            tracing::warn!(error = %err, "readiness check failed");
            Err(ApiError::Unavailable("Database"))
        }
    }
}

/// Prometheus text exposition: request counts by route and status, latency histograms.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, description = "Prometheus text format")))]
async fn prometheus() -> impl IntoResponse {
    let body = PROMETHEUS.get().map(|handle| handle.render()).unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}
