//! `GET /v1/runs/{id}/export`: an ended run as a replay file, recorded by the daemon with
//! the config it runs now (the one SIGHUP applied last) — the same file
//! `nightshift runs export` writes locally (see [`crate::replay`]). Every string of it is
//! redacted with every secret the daemon's config names. Reading only: a read-only token may
//! export; nothing is written to the store (the loop runs over a scratch store of its own).
//!
//! An unknown run is a 404; a run not ended or purged, or whose agent is not configured, a 409; a
//! server started without the export (a test's API alone) answers 503.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde_json::Value;

use super::{ApiError, ApiState, ErrorBody, LiveConfig};
use crate::replay::ExportError;

#[utoipa::path(
    get, path = "/v1/runs/{id}/export", tag = "runs",
    params(("id" = String, Path, description = "the run id")),
    responses(
        (status = 200, description = "the replay file: `{format, version, run_id, agent, agent_hash, input, events, model_calls, tool_calls, …}`", body = Object),
        (status = 404, description = "no such run", body = ErrorBody),
        (status = 409, description = "the run has not ended or was purged, its agent is not configured, or this config cannot carry its loop through", body = ErrorBody),
    )
)]
pub(crate) async fn export_run(
    State(state): State<ApiState>,
    live: Option<Extension<LiveConfig>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let Some(Extension(live)) = live else {
        return Err(ApiError::Status(
            StatusCode::SERVICE_UNAVAILABLE,
            "this server does not export runs".into(),
        ));
    };
    let config = live.current();
    let secrets = crate::redaction::secrets(&config);
    let recording = crate::replay::export(&state.store, &config, secrets.redactor(), &id)
        .await
        .map_err(|e| match e {
            ExportError::NotFound(_) => ApiError::NotFound(e.to_string()),
            ExportError::Store(e) => ApiError::Store(e),
            ExportError::Unreadable { .. } => {
                ApiError::Status(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
            }
            e => ApiError::Conflict(e.to_string()),
        })?;
    let file = serde_json::to_value(&recording)
        .map_err(|e| ApiError::Status(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(Json(file))
}
