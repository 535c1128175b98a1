//! `GET /metrics`: the Prometheus text exposition of every metric (see
//! `nightshift_telemetry`). The API mounts [`routes`] behind its token; with
//! `[telemetry] metrics_address` set, [`serve`] answers the same route on that address
//! without the token.
//!
//! Gauges of the store's state — live jobs per state and lane, armed wakeups per agent,
//! pending approvals and notices — are
//! read from the store at each scrape, before the text is rendered; a label set that is gone
//! reads 0. A scrape whose store read fails is answered 503 (Prometheus then marks the target
//! down) rather than with stale gauges.

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use nightshift_telemetry::labels;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::{ApiError, ApiState};

/// The content type of the text exposition format.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The most sleeping runs one scrape reads to count the armed wakeups.
const WAKEUPS_READ: i64 = 10_000;

/// `GET /metrics`, for a router with [`ApiState`].
pub(crate) fn routes() -> Router<ApiState> {
    api_routes().split_for_parts().0
}

/// `GET /metrics` as the API documents it (mounted behind the token by `crate::openapi`).
pub(crate) fn api_routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new().routes(routes!(scrape))
}

/// `GET /metrics`: every metric in Prometheus' text exposition format.
#[utoipa::path(
    get, path = "/metrics", tag = "health",
    responses((status = 200, description = "the Prometheus text exposition (version 0.0.4) of every metric", content_type = "text/plain", body = String))
)]
async fn scrape(State(state): State<ApiState>) -> Result<impl IntoResponse, ApiError> {
    if let Err(e) = sample_store(&state).await {
        tracing::warn!(error = %e, "cannot read the store for a metrics scrape");
        return Err(ApiError::Status(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("cannot read the queue from the store for the metrics: {e}"),
        ));
    }
    Ok((
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        nightshift_telemetry::render(),
    ))
}

/// Sets the gauges that are state of the store.
async fn sample_store(state: &ApiState) -> nightshift_store::Result<()> {
    let gauges = state.store.job_gauges().await?;
    nightshift_telemetry::sample_jobs(
        gauges
            .counts
            .iter()
            .map(|(state, lane, n)| (state.as_str(), lane.as_str(), *n)),
    );
    nightshift_telemetry::sample_oldest_due(
        gauges
            .oldest_due_age_seconds
            .iter()
            .map(|(lane, age)| (lane.as_str(), *age)),
    );
    let b = state.store.backlog_gauges().await?;
    nightshift_telemetry::sample_backlogs(nightshift_telemetry::Backlogs {
        approvals_pending: b.approvals_pending,
        oldest_approval_age_seconds: b.oldest_approval_age_seconds,
        notifications_pending: b.notifications_pending,
        oldest_notification_age_seconds: b.oldest_notification_age_seconds,
    });
    let sleeping = state.store.pending_wakeups(WAKEUPS_READ).await?;
    let agents = state.intake.agents();
    nightshift_telemetry::sample_wakeups(
        sleeping
            .iter()
            .map(|w| labels::configured(&w.agent, agents.contains(&w.agent))),
    );
    Ok(())
}

/// Serves `GET /metrics` without the token on `listener` until `stop`.
pub(crate) async fn serve(
    listener: TcpListener,
    state: ApiState,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let app = routes()
        .fallback(|| async { ApiError::NotFound("this address serves only GET /metrics".into()) })
        .with_state(state);
    crate::http_server::serve(
        listener,
        app,
        crate::http_server::HttpLimits::default(),
        stop,
    )
    .await
}
