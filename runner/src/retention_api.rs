//! `POST /v1/runs/purge`: an operator purges finished runs that ended before a time, or asks
//! what such a purge would remove (`dry_run`).
//!
//! What it guarantees: only ended runs with nothing left running are purged, never a live
//! one (see `nightshift_store::retention`); a bad `before` or a live `status` is a 422 that
//! changes nothing; a read-only token gets a 403 (it is a `POST`); the purge is in the audit
//! trail as `purge` of `runs`, naming the token. The files of the purged runs go at each
//! daemon's next sweep of its data directory (`retention.interval_seconds`).

use axum::extract::State;
use axum::{Extension, Json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::{ApiError, ApiState, ErrorBody, JsonBody};
use crate::api_tokens::Caller;
use crate::retention::operator::{PurgeError, PurgeReport, PurgeRequest, purge};

/// The routes (behind the token).
pub(crate) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new().routes(routes!(purge_runs))
}

impl From<PurgeError> for ApiError {
    fn from(e: PurgeError) -> Self {
        match e {
            PurgeError::Store(e) => ApiError::from(e),
            refused => ApiError::Unprocessable(refused.to_string()),
        }
    }
}

/// `POST /v1/runs/purge`: purges finished runs, or reports what would go.
#[utoipa::path(
    post, path = "/v1/runs/purge", tag = "runs",
    request_body = PurgeRequest,
    responses(
        (status = 200, description = "what was purged, or would be for a dry run", body = PurgeReport),
        (status = 403, description = "a read-only token", body = ErrorBody),
        (status = 422, description = "a bad `before` or a `status` that is not an end state", body = ErrorBody),
    )
)]
pub(crate) async fn purge_runs(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    JsonBody(req): JsonBody<PurgeRequest>,
) -> Result<Json<PurgeReport>, ApiError> {
    let actor = caller.actor();
    Ok(Json(purge(&state.store, &actor, &req, None).await?))
}
