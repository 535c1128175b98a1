//! The schedule endpoints of the HTTP API, behind the same token as the rest of `/v1`.
//!
//! | method | path | does |
//! |---|---|---|
//! | `GET` | `/v1/schedules` | every schedule, with its next fire (local and UTC) and last run |
//! | `POST` | `/v1/schedules` | create one: `{name, cron, timezone?, agent, prompt, overlap?, missed?, enabled?}` → 201 |
//! | `GET` | `/v1/schedules/{name}` | one schedule |
//! | `PATCH` | `/v1/schedules/{name}` | change any of `cron, timezone, agent, prompt, overlap, missed, enabled` |
//! | `DELETE` | `/v1/schedules/{name}` | delete it |
//! | `POST` | `/v1/schedules/{name}/trigger` | fire it now → 202 with the run, or 200 with `skipped` |
//!
//! Schedules from `[[schedules]]` in the config file are re-applied at every start, so the API
//! can read and trigger them but refuses to change or delete them (409, saying to edit the
//! file). Every refusal is JSON `{"error": "…"}` and changes nothing.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use nightshift_scheduler::cron::{
    self, FireOutcome, ScheduleError, SchedulePatch, ScheduleSpec, describe,
};
use nightshift_store::ScheduleRow;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::{ApiError, ApiState, ErrorBody, JsonBody};
use crate::api_tokens::Caller;

/// The schedule routes (merged into [`crate::openapi`]'s routes behind the token).
pub(crate) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(show, change, remove))
        .routes(routes!(trigger))
}

/// The body of `POST /v1/schedules` (documents `nightshift_scheduler::cron::ScheduleSpec`,
/// which decodes it).
#[derive(ToSchema)]
#[allow(dead_code)] // a schema only
pub(crate) struct NewSchedule {
    /// Unique; 1-64 letters, digits, `-`, `_` or `.`.
    #[schema(example = "nightly-report")]
    name: String,
    /// Five fields (`minute hour day-of-month month day-of-week`), six (seconds first), or
    /// `@daily` and friends.
    #[schema(example = "0 7 * * 1-5")]
    cron: String,
    /// The IANA zone the expression is read in (default `UTC`).
    timezone: Option<String>,
    /// The agent each fire starts a run of.
    agent: String,
    /// The prompt template (MiniJinja).
    prompt: String,
    overlap: Option<OverlapName>,
    missed: Option<MissedName>,
    /// Default true.
    enabled: Option<bool>,
}

/// The body of `PATCH /v1/schedules/{name}`: the fields given replace the stored ones
/// (documents `nightshift_scheduler::cron::SchedulePatch`).
#[derive(ToSchema)]
#[allow(dead_code)] // a schema only
pub(crate) struct ScheduleChange {
    cron: Option<String>,
    timezone: Option<String>,
    agent: Option<String>,
    prompt: Option<String>,
    overlap: Option<OverlapName>,
    missed: Option<MissedName>,
    enabled: Option<bool>,
}

/// What a fire does while the schedule's previous run is still going (default `skip`).
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)] // a schema only
pub(crate) enum OverlapName {
    Skip,
    Queue,
    Allow,
}

/// What happens to fires due while no daemon ran (default `skip`).
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)] // a schema only
pub(crate) enum MissedName {
    Skip,
    RunOnce,
}

/// A schedule as the API shows it: its stored row (`id, name, cron, timezone, agent,
/// prompt, overlap, missed, enabled, source, next_fire_at, last_fire_at, last_run_id, …`)
/// with `next_fire_local`, `next_fire_utc`, `last_fire_local` and `last_run_status`.
#[derive(Serialize, ToSchema)]
#[schema(value_type = Object)]
pub(crate) struct ScheduleDoc(serde_json::Value);

/// Every schedule.
#[derive(Serialize, ToSchema)]
pub(crate) struct SchedulesPage {
    schedules: Vec<ScheduleDoc>,
}

/// What a manual fire did: `{"outcome": "enqueued", "run_id", "duplicate"}` or
/// `{"outcome": "skipped", "active_run"}`.
#[derive(Serialize, ToSchema)]
#[schema(value_type = Object)]
pub(crate) struct FireDoc(serde_json::Value);

/// A deleted schedule.
#[derive(Serialize, ToSchema)]
pub(crate) struct Deleted {
    deleted: String,
}

async fn view(
    state: &ApiState,
    row: ScheduleRow,
    status: StatusCode,
) -> Result<Response, ApiError> {
    let v = describe(&state.store, row).await?;
    Ok((status, Json(v)).into_response())
}

/// `GET /v1/schedules`: every schedule, with its next fire and last run.
#[utoipa::path(
    get, path = "/v1/schedules", tag = "schedules", operation_id = "list_schedules",
    responses((status = 200, description = "every schedule", body = SchedulesPage))
)]
async fn list(State(state): State<ApiState>) -> Result<Json<serde_json::Value>, ApiError> {
    let rows = state.store.schedules().await?;
    let mut views = Vec::with_capacity(rows.len());
    for row in rows {
        views.push(describe(&state.store, row).await?);
    }
    Ok(Json(serde_json::json!({ "schedules": views })))
}

/// `POST /v1/schedules`: creates a schedule.
#[utoipa::path(
    post, path = "/v1/schedules", tag = "schedules",
    request_body = NewSchedule,
    responses(
        (status = 201, description = "created", body = ScheduleDoc),
        (status = 409, description = "the name is taken", body = ErrorBody),
        (status = 422, description = "a bad value, naming its key (`schedules.NAME.cron`, …)", body = ErrorBody),
    )
)]
async fn create(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    JsonBody(spec): JsonBody<ScheduleSpec>,
) -> Result<Response, ApiError> {
    let actor = caller.actor();
    let op = state.store.as_operator(&actor);
    let row = cron::create(op, spec, &state.intake.agents()).await?;
    view(&state, row, StatusCode::CREATED).await
}

/// `GET /v1/schedules/{name}`: one schedule.
#[utoipa::path(
    get, path = "/v1/schedules/{name}", tag = "schedules",
    params(("name" = String, Path, description = "the schedule's name")),
    responses(
        (status = 200, description = "the schedule", body = ScheduleDoc),
        (status = 404, description = "no such schedule", body = ErrorBody),
    )
)]
async fn show(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let row = state
        .store
        .schedule(&name)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("schedule '{name}' not found")))?;
    view(&state, row, StatusCode::OK).await
}

/// `PATCH /v1/schedules/{name}`: changes a schedule made through the API.
#[utoipa::path(
    patch, path = "/v1/schedules/{name}", tag = "schedules",
    params(("name" = String, Path, description = "the schedule's name")),
    request_body = ScheduleChange,
    responses(
        (status = 200, description = "changed", body = ScheduleDoc),
        (status = 404, description = "no such schedule", body = ErrorBody),
        (status = 409, description = "a schedule from the config file: edit the file", body = ErrorBody),
        (status = 422, description = "a bad value, naming its key", body = ErrorBody),
    )
)]
async fn change(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    JsonBody(patch): JsonBody<SchedulePatch>,
) -> Result<Response, ApiError> {
    let actor = caller.actor();
    let op = state.store.as_operator(&actor);
    let row = cron::update(op, &name, patch, &state.intake.agents()).await?;
    view(&state, row, StatusCode::OK).await
}

/// `DELETE /v1/schedules/{name}`: deletes a schedule made through the API.
#[utoipa::path(
    delete, path = "/v1/schedules/{name}", tag = "schedules",
    params(("name" = String, Path, description = "the schedule's name")),
    responses(
        (status = 200, description = "deleted", body = Deleted),
        (status = 404, description = "no such schedule", body = ErrorBody),
        (status = 409, description = "a schedule from the config file: edit the file", body = ErrorBody),
    )
)]
async fn remove(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Deleted>, ApiError> {
    // Through the schedules' error: a store's "not found" or "conflict" names the schedule.
    let actor = caller.actor();
    state
        .store
        .as_operator(&actor)
        .delete_schedule(&name)
        .await
        .map_err(ScheduleError::from)?;
    Ok(Json(Deleted { deleted: name }))
}

/// `POST /v1/schedules/{name}/trigger`: fires a schedule now.
#[utoipa::path(
    post, path = "/v1/schedules/{name}/trigger", tag = "schedules",
    params(("name" = String, Path, description = "the schedule's name")),
    responses(
        (status = 202, description = "a run was enqueued", body = FireDoc),
        (status = 200, description = "the overlap policy `skip` held it back", body = FireDoc),
        (status = 404, description = "no such schedule", body = ErrorBody),
    )
)]
async fn trigger(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let outcome = cron::trigger(&state.intake, &name, &caller.actor()).await?;
    let status = match outcome {
        FireOutcome::Enqueued { .. } => StatusCode::ACCEPTED,
        FireOutcome::Skipped { .. } => StatusCode::OK,
    };
    Ok((status, Json(outcome)))
}
