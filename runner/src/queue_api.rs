//! The queue endpoints of the HTTP API, behind the same token as the rest of `/v1`: what the
//! remote CLI (`nightshift --server URL queue`, `runs show`, the no-worker notice of
//! `runs follow`) needs beyond the run endpoints.
//!
//! | method | path | does |
//! |---|---|---|
//! | `GET` | `/v1/queue` | the queue at a glance: live jobs per state and lane (`by_state_lane`), the oldest due queued job's due time, the workers with their last heartbeat, the live leases, and the server's `now` (ms since the Unix epoch) to measure them against |
//! | `GET` | `/v1/runs/{id}/jobs` | a run's jobs (lane, priority, attempts, state, lease, last error); 404 for an unknown run |

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::{ApiError, ApiState, ErrorBody, existing_run};

/// The queue routes (merged into [`crate::openapi`]'s routes behind the token).
pub(crate) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(overview))
        .routes(routes!(jobs_of_run))
}

/// The queue at a glance.
#[derive(Debug, ToSchema)]
#[allow(dead_code)] // documents the answer built from the store's overview
struct QueueDoc {
    /// `[{lane, state, count}]`: live jobs (queued, running, parked) per state and lane.
    #[schema(value_type = Vec<Object>)]
    by_state_lane: (),
    /// The due time (ms since the epoch) of the queued job that has waited longest, if any.
    oldest_queued_at: Option<i64>,
    /// `[{id, host, pid, started_at, last_heartbeat_at}]`: the registered workers.
    #[schema(value_type = Vec<Object>)]
    workers: (),
    /// The live leases, soonest expiry first.
    #[schema(value_type = Vec<Object>)]
    leases: (),
    /// The server's clock (ms since the epoch), to measure the times above against.
    now: i64,
}

/// A run's jobs.
#[derive(Debug, ToSchema)]
#[allow(dead_code)] // documents the answer built from the store's rows
struct JobsDoc {
    /// `{id, kind, lane, priority, attempts, max_attempts, status, run_at, lease_expires_at,
    /// last_error, …}` per job, oldest first.
    #[schema(value_type = Vec<Object>)]
    jobs: (),
}

/// `GET /v1/queue`: the queue overview.
#[utoipa::path(
    get, path = "/v1/queue", tag = "runs",
    responses((status = 200, description = "the queue at a glance", body = QueueDoc))
)]
async fn overview(State(state): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let view = state.store.queue_overview().await?;
    let mut body = serde_json::to_value(view).expect("an overview serialises");
    body["now"] = json!(state.store.now());
    Ok(Json(body))
}

/// `GET /v1/runs/{id}/jobs`: a run's jobs.
#[utoipa::path(
    get, path = "/v1/runs/{id}/jobs", tag = "runs",
    params(("id" = String, Path, description = "the run id")),
    responses(
        (status = 200, description = "the run's jobs", body = JobsDoc),
        (status = 404, description = "no such run", body = ErrorBody),
    )
)]
async fn jobs_of_run(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    existing_run(&state, &id).await?;
    let jobs = state.store.jobs_of_run(&id).await?;
    Ok(Json(json!({ "jobs": jobs })))
}
