//! Reading and cancelling runs: `GET /v1/runs` (filtered, a page at a time),
//! `GET /v1/runs/{id}`, `GET /v1/runs/{id}/events` and `POST /v1/runs/{id}/cancel`.
//!
//! What it guarantees:
//! - **A bad filter is a 400 naming the parameter**: a status or trigger naming the allowed
//!   values, a time that is neither RFC 3339 nor epoch milliseconds, a cursor this server did
//!   not hand out, an empty time range. A parameter given empty reads as absent.
//! - **An unknown run is a 404** (`run {id} not found`) on every endpoint here.
//! - **A cancel that took effect is in the audit trail**, with who asked.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use nightshift_store::{CancelOutcome, Error as StoreError, RunStatus, Trigger};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::{ApiError, ApiState, ErrorBody, empty_as_none, existing_run, query};
use crate::api_tokens::Caller;

/// The query of `GET /v1/runs`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// queued, running, waiting, succeeded, failed, cancelled, …
    #[serde(default, deserialize_with = "empty_as_none")]
    pub(super) status: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    pub(super) agent: Option<String>,
    /// api, schedule, webhook, cli, …
    #[serde(default, deserialize_with = "empty_as_none")]
    pub(super) trigger: Option<String>,
    /// The concurrency key.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub(super) key: Option<String>,
    /// Created at or after: RFC 3339 or epoch milliseconds.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub(super) since: Option<String>,
    /// Created before: RFC 3339 or epoch milliseconds.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub(super) until: Option<String>,
    /// A run id or idempotency key (exact), else text of the prompt (case-insensitive).
    #[serde(default, deserialize_with = "empty_as_none")]
    pub(super) q: Option<String>,
    /// `next_cursor` of the previous page.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub(super) cursor: Option<String>,
    /// 1-200, default 50.
    pub(super) limit: Option<i64>,
}

/// A page of run summaries, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct RunsPage {
    /// `{id, agent, status, trigger_kind, concurrency_key, idempotency_key, prompt_head,
    /// turns, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd,
    /// error_head, created_at, …}` per run.
    #[schema(value_type = Vec<Object>)]
    runs: Vec<nightshift_store::RunSummary>,
    /// Pass as `cursor` for the next page; `null` on the last.
    next_cursor: Option<String>,
}

/// A time parameter: RFC 3339 or epoch milliseconds, or the message naming `name`.
fn parse_time(name: &str, value: &str) -> Result<i64, String> {
    if let Ok(ms) = value.parse::<i64>() {
        return Ok(ms);
    }
    chrono::DateTime::parse_from_rfc3339(value)
        .map(|t| t.timestamp_millis())
        .map_err(|_| {
            format!(
                "{name} '{value}' is neither an RFC 3339 time like 2026-12-01T07:00:00Z nor \
                 epoch milliseconds"
            )
        })
}

/// The store filter a listing query asks for, or the message naming the bad parameter.
pub(super) fn run_filter(q: &ListQuery) -> Result<nightshift_store::RunFilter, String> {
    let named = |name: &str, e: nightshift_store::UnknownName| format!("{name}: {e}");
    Ok(nightshift_store::RunFilter {
        status: q
            .status
            .as_deref()
            .map(str::parse::<RunStatus>)
            .transpose()
            .map_err(|e| named("status", e))?,
        agent: q.agent.clone(),
        trigger: q
            .trigger
            .as_deref()
            .map(str::parse::<Trigger>)
            .transpose()
            .map_err(|e| named("trigger", e))?,
        concurrency_key: q.key.clone(),
        since: q
            .since
            .as_deref()
            .map(|v| parse_time("since", v))
            .transpose()?,
        until: q
            .until
            .as_deref()
            .map(|v| parse_time("until", v))
            .transpose()?,
        search: q.q.clone(),
    })
}

/// `GET /v1/runs`: run summaries, filtered, newest first, a page at a time.
#[utoipa::path(
    get, path = "/v1/runs", tag = "runs",
    params(ListQuery),
    responses(
        (status = 200, description = "a page of runs", body = RunsPage),
        (status = 400, description = "a bad parameter, naming it", body = ErrorBody),
    )
)]
pub(crate) async fn list_runs(
    State(state): State<ApiState>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<RunsPage>, ApiError> {
    let q = query(q)?;
    let filter = run_filter(&q).map_err(ApiError::BadRequest)?;
    let page = state
        .store
        .runs_page(&filter, q.cursor.as_deref(), q.limit.unwrap_or(50))
        .await
        .map_err(|e| match e {
            // A malformed cursor or an empty time range is a bad parameter like any other.
            StoreError::Invalid(m) => ApiError::BadRequest(m),
            e => ApiError::Store(e),
        })?;
    Ok(Json(RunsPage {
        runs: page.runs,
        next_cursor: page.next_cursor,
    }))
}

/// A run, as `GET /v1/runs/{id}` shows it.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct RunView {
    /// The stored run: `id, agent, status, input, result, error, trigger_kind, turns,
    /// input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, cost_usd,
    /// created_at, started_at, finished_at, …`.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    run: nightshift_store::Run,
    /// Why its newest job was last retried or is waiting (a model outage's real cause).
    last_error: Option<String>,
}

/// `GET /v1/runs/{id}`: one run.
#[utoipa::path(
    get, path = "/v1/runs/{id}", tag = "runs",
    params(("id" = String, Path, description = "the run id")),
    responses(
        (status = 200, description = "the run", body = RunView),
        (status = 404, description = "no such run", body = ErrorBody),
    )
)]
pub(crate) async fn show_run(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<RunView>, ApiError> {
    let run = existing_run(&state, &id).await?;
    // Why the newest job was last retried or is waiting (a model outage's real cause, a lost
    // lease), also while the run has not ended.
    let last_error = state
        .store
        .jobs_of_run(&id)
        .await?
        .into_iter()
        .max_by_key(|j| j.id)
        .and_then(|j| j.last_error);
    Ok(Json(RunView { run, last_error }))
}

/// The query of `GET /v1/runs/{id}/events`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct EventsQuery {
    /// Only events after this sequence number (default 0: all).
    after: Option<i64>,
}

/// One event of a run's log.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct EventView {
    seq: i64,
    /// `turn`, `tool_call`, `tool_result`, `checkpoint`, …
    #[serde(rename = "type")]
    event_type: String,
    /// Epoch milliseconds.
    created_at: i64,
    /// The event's JSON payload (a string when it is not JSON).
    payload: Value,
}

/// A run's event log.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct EventsPage {
    events: Vec<EventView>,
}

/// `GET /v1/runs/{id}/events`: a run's event log, oldest first.
#[utoipa::path(
    get, path = "/v1/runs/{id}/events", tag = "runs",
    params(("id" = String, Path, description = "the run id"), EventsQuery),
    responses(
        (status = 200, description = "the events", body = EventsPage),
        (status = 400, description = "a bad parameter, naming it", body = ErrorBody),
        (status = 404, description = "no such run", body = ErrorBody),
    )
)]
pub(crate) async fn run_events(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    q: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Json<EventsPage>, ApiError> {
    let q = query(q)?;
    existing_run(&state, &id).await?;
    let events = state
        .store
        .events(&id, q.after.unwrap_or(0))
        .await?
        .into_iter()
        .map(|e| EventView {
            seq: e.seq,
            event_type: e.event_type,
            created_at: e.created_at,
            payload: serde_json::from_str::<Value>(&e.payload).unwrap_or(Value::String(e.payload)),
        })
        .collect();
    Ok(Json(EventsPage { events }))
}

/// What a cancel did.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct CancelAnswer {
    run_id: String,
    /// `cancelled` (nothing was running) or `cancel_requested` (a worker holds it and stops
    /// at its next step).
    #[schema(example = "cancelled")]
    status: &'static str,
}

/// `POST /v1/runs/{id}/cancel`: cancels a run.
#[utoipa::path(
    post, path = "/v1/runs/{id}/cancel", tag = "runs",
    params(("id" = String, Path, description = "the run id")),
    responses(
        (status = 200, description = "cancelled: nothing was running", body = CancelAnswer),
        (status = 202, description = "a worker holds it: cancel requested", body = CancelAnswer),
        (status = 404, description = "no such run", body = ErrorBody),
        (status = 409, description = "the run already finished", body = ErrorBody),
    )
)]
pub(crate) async fn cancel_run(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let actor = caller.actor();
    let (status, word) = match state.store.as_operator(&actor).cancel_run(&id).await? {
        CancelOutcome::Cancelled => (StatusCode::OK, "cancelled"),
        CancelOutcome::Requested => (StatusCode::ACCEPTED, "cancel_requested"),
    };
    Ok((
        status,
        Json(CancelAnswer {
            run_id: id,
            status: word,
        }),
    ))
}
