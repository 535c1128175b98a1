//! The queue endpoints of the HTTP API, behind the same token as the rest of `/v1`: what the
//! remote CLI (`nightshift --server URL queue`, `runs show`, the no-worker notice of
//! `runs follow`) needs beyond the run endpoints.
//!
//! | method | path | does |
//! |---|---|---|
//! | `GET` | `/v1/queue` | the queue at a glance: live jobs per state and lane (`by_state_lane`), the oldest due queued job's due time, the workers with their last heartbeat, the live leases, and the server's `now` (ms since the Unix epoch) to measure them against |
//! | `GET` | `/v1/runs/{id}/jobs` | a run's jobs (lane, priority, attempts, state, lease, last error); 404 for an unknown run |

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use crate::api::{ApiState, error, store_error};

/// The queue routes (merged into [`crate::api::router`] before its token check).
pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/v1/queue", get(overview))
        .route("/v1/runs/{id}/jobs", get(jobs_of_run))
}

async fn overview(State(state): State<ApiState>) -> Response {
    match state.store.queue_overview().await {
        Ok(view) => {
            let mut body = serde_json::to_value(view).expect("an overview serialises");
            body["now"] = json!(state.store.now());
            Json(body).into_response()
        }
        Err(e) => store_error(e),
    }
}

async fn jobs_of_run(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    match state.store.run(&id).await {
        Ok(Some(_)) => {}
        Ok(None) => return error(StatusCode::NOT_FOUND, format!("run {id} not found")),
        Err(e) => return store_error(e),
    }
    match state.store.jobs_of_run(&id).await {
        Ok(jobs) => Json(json!({ "jobs": jobs })).into_response(),
        Err(e) => store_error(e),
    }
}
