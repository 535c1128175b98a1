//! The background task endpoints of the HTTP API, behind the same token as the rest of `/v1`.
//!
//! | method | path | does |
//! |---|---|---|
//! | `GET` | `/v1/tasks?status=&limit=` | tasks of every run, newest first (`status`: running, succeeded, failed, timed_out, stopped, lost) |
//! | `GET` | `/v1/runs/{id}/tasks` | one run's tasks, oldest first; 404 for an unknown run |
//!
//! Each task is its stored row: id, run, the call that started it, the command (secrets
//! redacted), the daemon running it, status, exit code, how it ended, the last part of its
//! output, and its times (ms since the Unix epoch). A bad `status` is 400 and names the
//! allowed values.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use nightshift_store::TaskStatus;
use serde::Deserialize;
use serde_json::json;

use crate::api::{ApiState, error, status_query, store_error};

/// The task routes (merged into [`crate::api::router`] before its token check).
pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/v1/tasks", get(list))
        .route("/v1/runs/{id}/tasks", get(of_run))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    status: Option<String>,
    limit: Option<i64>,
}

async fn list(
    State(state): State<ApiState>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Response {
    let (q, status) = match status_query::<_, TaskStatus>(q, |q| q.status.as_deref()) {
        Ok(parsed) => parsed,
        Err(refused) => return refused,
    };
    match state.store.list_tasks(status, q.limit.unwrap_or(50)).await {
        Ok(tasks) => Json(json!({ "tasks": tasks })).into_response(),
        Err(e) => store_error(e),
    }
}

async fn of_run(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    match state.store.run(&id).await {
        Ok(Some(_)) => {}
        Ok(None) => return error(StatusCode::NOT_FOUND, format!("run {id} not found")),
        Err(e) => return store_error(e),
    }
    match state.store.tasks_of_run(&id).await {
        Ok(tasks) => Json(json!({ "tasks": tasks })).into_response(),
        Err(e) => store_error(e),
    }
}
