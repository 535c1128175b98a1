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

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use nightshift_scheduler::cron::{
    self, FireOutcome, ScheduleError, SchedulePatch, ScheduleSpec, describe,
};
use nightshift_store::ScheduleRow;
use serde_json::json;

use crate::api::{ApiState, error};

/// The schedule routes (merged into [`crate::api::router`] before its token check).
pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/v1/schedules", get(list).post(create))
        .route(
            "/v1/schedules/{name}",
            get(show).patch(change).delete(remove),
        )
        .route("/v1/schedules/{name}/trigger", post(trigger))
}

fn schedule_error(e: ScheduleError) -> Response {
    match e {
        ScheduleError::Invalid(m) => error(StatusCode::UNPROCESSABLE_ENTITY, m),
        ScheduleError::NotFound(m) => error(StatusCode::NOT_FOUND, m),
        ScheduleError::Conflict(m) => error(StatusCode::CONFLICT, m),
        ScheduleError::Store(e) if e.is_transient() => {
            error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
        ScheduleError::Store(e) => {
            tracing::error!(error = %e, "schedule API request failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
    }
}

fn bad_body(e: JsonRejection) -> Response {
    error(
        StatusCode::BAD_REQUEST,
        format!("invalid request body: {}", e.body_text()),
    )
}

async fn view(state: &ApiState, row: ScheduleRow, status: StatusCode) -> Response {
    match describe(&state.store, row).await {
        Ok(v) => (status, Json(v)).into_response(),
        Err(e) => schedule_error(e),
    }
}

async fn list(State(state): State<ApiState>) -> Response {
    let rows = match state.store.schedules().await {
        Ok(rows) => rows,
        Err(e) => return schedule_error(e.into()),
    };
    let mut views = Vec::with_capacity(rows.len());
    for row in rows {
        match describe(&state.store, row).await {
            Ok(v) => views.push(v),
            Err(e) => return schedule_error(e),
        }
    }
    Json(json!({ "schedules": views })).into_response()
}

async fn create(
    State(state): State<ApiState>,
    body: Result<Json<ScheduleSpec>, JsonRejection>,
) -> Response {
    let Json(spec) = match body {
        Ok(b) => b,
        Err(e) => return bad_body(e),
    };
    match cron::create(&state.store, spec, &state.intake.agents()).await {
        Ok(row) => view(&state, row, StatusCode::CREATED).await,
        Err(e) => schedule_error(e),
    }
}

async fn show(State(state): State<ApiState>, Path(name): Path<String>) -> Response {
    match state.store.schedule(&name).await {
        Ok(Some(row)) => view(&state, row, StatusCode::OK).await,
        Ok(None) => error(
            StatusCode::NOT_FOUND,
            format!("schedule '{name}' not found"),
        ),
        Err(e) => schedule_error(e.into()),
    }
}

async fn change(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    body: Result<Json<SchedulePatch>, JsonRejection>,
) -> Response {
    let Json(patch) = match body {
        Ok(b) => b,
        Err(e) => return bad_body(e),
    };
    match cron::update(&state.store, &name, patch, &state.intake.agents()).await {
        Ok(row) => view(&state, row, StatusCode::OK).await,
        Err(e) => schedule_error(e),
    }
}

async fn remove(State(state): State<ApiState>, Path(name): Path<String>) -> Response {
    match state.store.delete_schedule(&name).await {
        Ok(()) => Json(json!({ "deleted": name })).into_response(),
        Err(e) => schedule_error(e.into()),
    }
}

async fn trigger(State(state): State<ApiState>, Path(name): Path<String>) -> Response {
    match cron::trigger(&state.intake, &name).await {
        Ok(outcome @ FireOutcome::Enqueued { .. }) => {
            (StatusCode::ACCEPTED, Json(outcome)).into_response()
        }
        Ok(outcome) => Json(outcome).into_response(),
        Err(e) => schedule_error(e),
    }
}
