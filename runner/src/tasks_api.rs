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

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use nightshift_store::TaskStatus;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::{ApiError, ApiState, ErrorBody, existing_run, status_query};

/// The task routes (merged into [`crate::openapi`]'s routes behind the token).
pub(crate) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(of_run))
}

/// The query of `GET /v1/tasks`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct ListQuery {
    /// running, succeeded, failed, timed_out, stopped or lost.
    #[serde(default, deserialize_with = "crate::api::empty_as_none")]
    status: Option<String>,
    /// At most this many (default 50).
    limit: Option<i64>,
}

/// Background tasks.
#[derive(Debug, Serialize, ToSchema)]
struct TasksPage {
    /// `{id, run_id, call_id, command, daemon, status, exit_code, ended_by, output_tail,
    /// started_at, ended_at, …}` per task (the command with secrets redacted).
    #[schema(value_type = Vec<Object>)]
    tasks: Vec<nightshift_store::Task>,
}

/// `GET /v1/tasks`: tasks of every run, newest first.
#[utoipa::path(
    get, path = "/v1/tasks", tag = "tasks", operation_id = "list_tasks",
    params(ListQuery),
    responses(
        (status = 200, description = "tasks", body = TasksPage),
        (status = 400, description = "a bad parameter, naming it and the allowed values", body = ErrorBody),
    )
)]
async fn list(
    State(state): State<ApiState>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<TasksPage>, ApiError> {
    let (q, status) = status_query::<_, TaskStatus>(q, |q| q.status.as_deref())?;
    let tasks = state
        .store
        .list_tasks(status, q.limit.unwrap_or(50))
        .await?;
    Ok(Json(TasksPage { tasks }))
}

/// `GET /v1/runs/{id}/tasks`: one run's tasks, oldest first.
#[utoipa::path(
    get, path = "/v1/runs/{id}/tasks", tag = "tasks",
    params(("id" = String, Path, description = "the run id")),
    responses(
        (status = 200, description = "the run's tasks", body = TasksPage),
        (status = 404, description = "no such run", body = ErrorBody),
    )
)]
async fn of_run(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<TasksPage>, ApiError> {
    existing_run(&state, &id).await?;
    let tasks = state.store.tasks_of_run(&id).await?;
    Ok(Json(TasksPage { tasks }))
}
