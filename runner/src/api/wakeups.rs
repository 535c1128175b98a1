//! Sleeping runs: `GET /v1/wakeups` (soonest first) and `POST /v1/runs/{id}/wake`.
//!
//! What it guarantees: a wake makes the run's armed resume job due now, so it resumes on the
//! next free worker; only a sleeping run can be woken (409 otherwise, 404 for an unknown
//! run); a wake that took effect is in the audit trail.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use serde::Serialize;
use utoipa::ToSchema;

use super::{ApiError, ApiState, ErrorBody, LimitQuery, query};
use crate::api_tokens::Caller;

/// A woken run.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct WakeAnswer {
    run_id: String,
    woken: bool,
}

/// `POST /v1/runs/{id}/wake`: wakes a sleeping run now.
#[utoipa::path(
    post, path = "/v1/runs/{id}/wake", tag = "wakeups",
    params(("id" = String, Path, description = "the run id")),
    responses(
        (status = 202, description = "its resume job is due now", body = WakeAnswer),
        (status = 404, description = "no such run", body = ErrorBody),
        (status = 409, description = "the run is not sleeping", body = ErrorBody),
    )
)]
pub(crate) async fn wake_run(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let actor = caller.actor();
    state.store.as_operator(&actor).wake_now(&id).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(WakeAnswer {
            run_id: id,
            woken: true,
        }),
    ))
}

/// A sleeping run.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct WakeupView {
    run_id: String,
    agent: String,
    /// The resume job armed for the wakeup.
    job_id: i64,
    /// Epoch milliseconds.
    due_at: i64,
    /// Why it sleeps: the agent's reason, or the background task it waits for.
    reason: Option<String>,
}

/// Sleeping runs, soonest first.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct WakeupsPage {
    wakeups: Vec<WakeupView>,
}

/// `GET /v1/wakeups`: sleeping runs and when each wakes, soonest first.
#[utoipa::path(
    get, path = "/v1/wakeups", tag = "wakeups",
    params(LimitQuery),
    responses(
        (status = 200, description = "sleeping runs", body = WakeupsPage),
        (status = 400, description = "a bad parameter, naming it", body = ErrorBody),
    )
)]
pub(crate) async fn list_wakeups(
    State(state): State<ApiState>,
    q: Result<Query<LimitQuery>, QueryRejection>,
) -> Result<Json<WakeupsPage>, ApiError> {
    let q = query(q)?;
    let rows = state.store.pending_wakeups(q.limit.unwrap_or(100)).await?;
    let wakeups = rows
        .iter()
        .map(|w| WakeupView {
            run_id: w.run_id.clone(),
            agent: w.agent.clone(),
            job_id: w.job_id,
            due_at: w.due_at,
            reason: w.reason(),
        })
        .collect();
    Ok(Json(WakeupsPage { wakeups }))
}
