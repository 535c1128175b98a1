//! The HTTP API of `nightshift serve`, behind a bearer token compared in constant time.
//!
//! | method | path | does |
//! |---|---|---|
//! | `POST` | `/v1/runs` | enqueue a run: `{agent, prompt, idempotency_key?, priority?, lane?, delay_seconds?, run_at?, max_attempts?, concurrency_key?, concurrency_policy?, debounce_seconds?}` → 202 with its id (200 and the first run's id for a repeated idempotency key, or the active run's with `skipped` under the skip policy) |
//! | `POST` | `/v1/runs:batch` | `{runs: [<POST /v1/runs body>, …]}` (up to `server.max_batch_runs`): enqueue many in one transaction → 200 with one result per item, in order: `created`, `duplicate`, `skipped`, or `refused` with the reason (a refused item refuses only itself) |
//! | `GET` | `/v1/runs?status=&agent=&trigger=&key=&since=&until=&q=&cursor=&limit=` | run summaries newest first, filtered (`since`/`until`: RFC 3339 or epoch ms, `[since, until)`; `q`: run id, idempotency key or prompt text), `limit` 1-200 (default 50): `{runs, next_cursor}`; pass `next_cursor` as `cursor` for the next page |
//! | `GET` | `/v1/runs/{id}` | a run: status, usage, cost, result, error, and `last_error`: why its newest job was last retried or is waiting (a model outage's real cause) |
//! | `GET` | `/v1/runs/{id}/events?after=N` | its event log |
//! | `POST` | `/v1/runs/{id}/cancel` | cancel it |
//! | `POST` | `/v1/runs/{id}/wake` | wake a sleeping run now |
//! | `GET` | `/v1/wakeups?limit=` | sleeping runs and when each wakes, soonest first |
//! | `GET` | `/v1/approvals?limit=` | tool calls waiting for a decision, oldest first |
//! | `POST` | `/v1/runs/{id}/approvals/{call}` | `{decision: approve\|deny, reason?}`: decide one call; the run resumes on any worker |
//! | `GET` | `/v1/hooks` | the webhooks, with counts per outcome (see [`crate::hooks`]) |
//! | `GET` | `/v1/hooks/{name}/deliveries?limit=` | a webhook's recorded deliveries |
//! | `POST` | `/hooks/{name}` | a webhook delivery, authenticated by its signature, not the token |
//! | `GET` | `/v1/notifications?run=&status=&limit=` | run notice deliveries, newest first: status (`pending`, `delivered`, `dead`), attempts, last error |
//! | `POST` | `/v1/notifications/{delivery_id}/redeliver` | send a dead delivery again (fresh attempts, same delivery id) |
//! | `GET` | `/metrics` | Prometheus metrics (see [`crate::metrics`]); also without the token on `telemetry.metrics_address` |
//! | `GET` | `/healthz` | liveness, without the token |
//! | `GET` | `/readyz` | readiness: 200 when the store takes a write transaction within 2 s, else 503 with `Retry-After`; no token |
//! | `GET` | `/openapi.json` | the OpenAPI 3.1 document of every route above (see [`crate::openapi`]); no token |
//! | `GET` | `/ui…` | the web dashboard, signed in with the token (see `nightshift_dashboard`) |
//! | … | `/v1/schedules…` | cron schedules (see [`crate::schedules_api`]) |
//!
//! Every error is JSON `{"error": "…"}` saying what was wrong; a refused request changes
//! nothing. The codes are decided in [`crate::api_errors`]: 400 for a body that is not JSON
//! or a bad query parameter (naming it), 415 for a body not sent as JSON, 422 for a JSON
//! value that does not fit (naming the key) or a bad value, 503 with `Retry-After` whenever
//! the store is unavailable, 500 only for a bug.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use nightshift_scheduler::{Intake, RunRequest, StartAt};
use nightshift_store::{
    CancelOutcome, ConcurrencyPolicy, DeliveryStatus, Error as StoreError, RunStatus, Store,
    Trigger,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use crate::api_tokens::Caller;

pub use crate::api_errors::{ApiError, ErrorBody, JsonBody};

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    pub store: Store,
    /// Where runs are checked and enqueued; it knows the configured agents.
    pub intake: Intake,
    /// The tokens the API accepts, each a caller with a name and a role.
    pub tokens: crate::api_tokens::ApiTokens,
    /// The configured webhooks (`[[hooks]]`).
    pub hooks: Arc<nightshift_scheduler::hooks::HookSet>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("agents", &self.intake.agents())
            .field("tokens", &self.tokens)
            .finish()
    }
}

/// The API's routes (and the dashboard, without run files).
pub fn router(state: ApiState) -> Router {
    router_with_data_dir(state, None)
}

/// The API's routes and the dashboard, which shows the run files (artifacts, running
/// tasks' output) under `data_dir`. The API's routes all come from [`crate::openapi::routes`],
/// so each one served is in `GET /openapi.json`; only the dashboard (HTML) is added here.
pub fn router_with_data_dir(state: ApiState, data_dir: Option<std::path::PathBuf>) -> Router {
    crate::openapi::routes(&state)
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .with_state(state.clone())
        .merge(nightshift_dashboard::router(dashboard_state(
            &state, data_dir,
        )))
}

fn dashboard_state(
    state: &ApiState,
    data_dir: Option<std::path::PathBuf>,
) -> nightshift_dashboard::DashboardState {
    let tokens = state.tokens.clone();
    let sign_in: nightshift_dashboard::auth::SignIn = Arc::new(move |given: &str| {
        tokens
            .identify(given)
            .map(|c| nightshift_dashboard::auth::Signer {
                read_only: c.role == crate::api_tokens::TokenRole::ReadOnly,
                name: c.name,
            })
    });
    let dashboard = nightshift_dashboard::DashboardState::new(
        state.store.clone(),
        state.tokens.main(),
        state.intake.clone(),
        state.hooks.clone(),
    )
    .with_sign_in(sign_in);
    match data_dir {
        Some(dir) => dashboard.with_data_dir(dir),
        None => dashboard,
    }
}

/// A query string parsed as `T`, or the 400 naming what is wrong with it.
pub(crate) fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(q)| q)
        .map_err(|e| ApiError::BadRequest(e.body_text()))
}

/// A listing's query and its optional `status` filter parsed as `S`, or the 400 that says
/// what is wrong (a malformed query, or a status naming the allowed values).
pub(crate) fn status_query<T, S>(
    q: Result<Query<T>, QueryRejection>,
    status: impl FnOnce(&T) -> Option<&str>,
) -> Result<(T, Option<S>), ApiError>
where
    S: std::str::FromStr<Err = nightshift_store::UnknownName>,
{
    let q = query(q)?;
    let parsed = status(&q)
        .map(str::parse::<S>)
        .transpose()
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok((q, parsed))
}

pub(crate) async fn require_token(
    State(state): State<ApiState>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let Some(caller) = state.tokens.identify(given) else {
        return Err(ApiError::Unauthorized(
            "missing or wrong API token; send `Authorization: Bearer <token>`".into(),
        ));
    };
    if !crate::api_tokens::allows(caller.role, req.method()) {
        return Err(ApiError::Forbidden(format!(
            "token '{}' is read-only: it may only read (GET); use an operator token to {} {}",
            caller.name,
            req.method(),
            req.uri().path()
        )));
    }
    let mut req = req;
    req.extensions_mut().insert(caller);
    Ok(next.run(req).await)
}

/// Records an operator action of `caller` that took effect in the audit trail (and the log;
/// see `Store::record_audit`).
pub(crate) async fn audit(
    state: &ApiState,
    caller: &Caller,
    action: &str,
    run_id: Option<&str>,
    target: &str,
    detail: Option<&str>,
) {
    let actor = caller.actor();
    let entry = nightshift_store::NewAudit {
        actor: &actor,
        action,
        run_id,
        target,
        detail,
    };
    state.store.record_audit(&entry).await;
}

/// The run `id`, or the 404 that says it does not exist.
pub(crate) async fn existing_run(
    state: &ApiState,
    id: &str,
) -> Result<nightshift_store::Run, ApiError> {
    state
        .store
        .run(id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("run {id} not found")))
}

/// The body of `POST /v1/runs`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRun {
    /// A configured agent.
    #[schema(example = "reviewer")]
    pub agent: String,
    /// What the agent is asked to do.
    #[schema(example = "Review PR 7")]
    pub prompt: String,
    /// A second request with the same key answers 200 with the first run's ids.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Higher runs first (-1000 to 1000, default 0).
    #[serde(default)]
    pub priority: Option<i64>,
    /// The worker lane (default `default`).
    #[serde(default)]
    pub lane: Option<String>,
    /// Start no earlier than this many seconds from now.
    #[serde(default)]
    pub delay_seconds: Option<u64>,
    /// Start no earlier than this time (RFC 3339, e.g. `2026-12-01T07:00:00Z`).
    #[serde(default)]
    pub run_at: Option<String>,
    /// Attempts before the run fails (default from the config).
    #[serde(default)]
    pub max_attempts: Option<i64>,
    /// Runs with the same key run one at a time.
    #[serde(default)]
    pub concurrency_key: Option<String>,
    /// What a run does when its key is held (default `queue`).
    #[serde(default)]
    pub concurrency_policy: Option<PolicyName>,
    /// The debounce window, 1 to 86400 (only with `debounce`).
    #[serde(default)]
    pub debounce_seconds: Option<u64>,
}

/// A concurrency policy, by name.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PolicyName {
    /// Wait for the key.
    Queue,
    /// Drop the new run; answer with the active one (`skipped`).
    Skip,
    /// Cancel the runs holding the key and start this one.
    Supersede,
    /// Replace a queued run for the key; start after `debounce_seconds` of quiet.
    Debounce,
}

impl PolicyName {
    fn as_str(self) -> &'static str {
        match self {
            PolicyName::Queue => "queue",
            PolicyName::Skip => "skip",
            PolicyName::Supersede => "supersede",
            PolicyName::Debounce => "debounce",
        }
    }
}

/// The answer to `POST /v1/runs`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Created {
    run_id: String,
    job_id: i64,
    /// The idempotency key was used before: these are the first run's ids.
    duplicate: bool,
    /// The `skip` policy dropped the new run: these are the active run's ids.
    skipped: bool,
    /// Runs this one ended under the `supersede` policy.
    superseded: Vec<String>,
}

/// The request's W3C `traceparent` header, if it has one (checked when the run is made).
pub(crate) fn traceparent(headers: &HeaderMap) -> Option<String> {
    headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// `POST /v1/runs`: enqueues a run. A `traceparent` header makes the run's trace continue
/// the caller's.
#[utoipa::path(
    post, path = "/v1/runs", tag = "runs",
    request_body = CreateRun,
    params(("traceparent" = Option<String>, Header, description = "W3C Trace Context: the run's trace continues this one (ignored when invalid)")),
    responses(
        (status = 202, description = "enqueued", body = Created),
        (status = 200, description = "a repeated idempotency key (`duplicate`), or the `skip` policy with the key held (`skipped`): the existing run's ids; nothing enqueued", body = Created),
        (status = 422, description = "a bad value, naming it (unknown agent, empty prompt, priority out of range, …); nothing enqueued", body = ErrorBody),
    )
)]
pub(crate) async fn create_run(
    State(state): State<ApiState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<CreateRun>,
) -> Result<impl IntoResponse, ApiError> {
    let req = run_request(body, traceparent(&headers)).map_err(ApiError::Unprocessable)?;
    let e = state.intake.submit(req).await?;
    let status = if e.duplicate || e.skipped {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((
        status,
        Json(Created {
            run_id: e.run_id,
            job_id: e.job_id,
            duplicate: e.duplicate,
            skipped: e.skipped,
            superseded: e.superseded,
        }),
    ))
}

/// The run a `POST /v1/runs` body asks for (with the request's `traceparent`), or what is
/// wrong with it. A `run_at` is passed on as it is: the intake reads the clock once.
pub(crate) fn run_request(
    body: CreateRun,
    trace_parent: Option<String>,
) -> Result<RunRequest, String> {
    let start_at = match (&body.delay_seconds, &body.run_at) {
        (Some(_), Some(_)) => return Err("give delay_seconds or run_at, not both".into()),
        (Some(s), None) => StartAt::After(Duration::from_secs(*s)),
        (None, Some(at)) => match chrono::DateTime::parse_from_rfc3339(at) {
            Ok(t) => StartAt::At(t.timestamp_millis()),
            Err(e) => {
                return Err(format!(
                    "run_at '{at}' is not an RFC 3339 time like 2026-12-01T07:00:00Z: {e}"
                ));
            }
        },
        (None, None) => StartAt::Now,
    };
    let policy = match body
        .concurrency_policy
        .map(|name| ConcurrencyPolicy::from_name(name.as_str(), body.debounce_seconds))
    {
        None if body.debounce_seconds.is_some() => {
            return Err("debounce_seconds needs concurrency_policy = \"debounce\"".into());
        }
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => return Err(e.to_string()),
    };
    Ok(RunRequest {
        agent: body.agent,
        prompt: body.prompt,
        trigger: Trigger::Api,
        idempotency_key: body.idempotency_key,
        lane: body.lane,
        priority: body.priority,
        start_at,
        max_attempts: body.max_attempts,
        concurrency_key: body.concurrency_key,
        concurrency_policy: policy,
        trace_parent,
        context: None,
    })
}

/// A query parameter given empty (`?status=`, as a form with nothing chosen sends it) is
/// not a filter: it reads as absent.
pub(crate) fn empty_as_none<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|v| !v.is_empty()))
}

/// The query of `GET /v1/runs`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// queued, running, waiting, succeeded, failed, cancelled, …
    #[serde(default, deserialize_with = "empty_as_none")]
    status: Option<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    agent: Option<String>,
    /// api, schedule, webhook, cli, …
    #[serde(default, deserialize_with = "empty_as_none")]
    trigger: Option<String>,
    /// The concurrency key.
    #[serde(default, deserialize_with = "empty_as_none")]
    key: Option<String>,
    /// Created at or after: RFC 3339 or epoch milliseconds.
    #[serde(default, deserialize_with = "empty_as_none")]
    since: Option<String>,
    /// Created before: RFC 3339 or epoch milliseconds.
    #[serde(default, deserialize_with = "empty_as_none")]
    until: Option<String>,
    /// A run id or idempotency key (exact), else text of the prompt (case-insensitive).
    #[serde(default, deserialize_with = "empty_as_none")]
    q: Option<String>,
    /// `next_cursor` of the previous page.
    #[serde(default, deserialize_with = "empty_as_none")]
    cursor: Option<String>,
    /// 1-200, default 50.
    limit: Option<i64>,
}

/// A page of run summaries, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunsPage {
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
fn run_filter(q: &ListQuery) -> Result<nightshift_store::RunFilter, String> {
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
pub struct RunView {
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
pub struct EventView {
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
pub struct EventsPage {
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
pub struct CancelAnswer {
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
    let (status, word) = match state.store.cancel_run(&id).await? {
        CancelOutcome::Cancelled => (StatusCode::OK, "cancelled"),
        CancelOutcome::Requested => (StatusCode::ACCEPTED, "cancel_requested"),
    };
    audit(&state, &caller, "cancel", Some(&id), &id, None).await;
    Ok((
        status,
        Json(CancelAnswer {
            run_id: id,
            status: word,
        }),
    ))
}

/// The API token: from the environment variable `token_env` when set, else the one kept in
/// `<data_dir>/api-token` (made, readable by this user only, on first use).
pub fn resolve_token(
    token_env: &str,
    data_dir: &std::path::Path,
) -> anyhow::Result<(String, String)> {
    if let Ok(t) = std::env::var(token_env)
        && !t.trim().is_empty()
    {
        return Ok((t.trim().to_string(), format!("from ${token_env}")));
    }
    let path = data_dir.join("api-token");
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => {
            return Ok((t.trim().to_string(), format!("from {}", path.display())));
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => anyhow::bail!("cannot read the API token file {}: {e}", path.display()),
    }
    std::fs::create_dir_all(data_dir)?;
    let token = format!(
        "ns_{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| anyhow::anyhow!("cannot create the API token file {}: {e}", path.display()))?;
    f.write_all(token.as_bytes())?;
    Ok((token, format!("new, written to {}", path.display())))
}

/// A woken run.
#[derive(Debug, Serialize, ToSchema)]
pub struct WakeAnswer {
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
    state.store.wake_now(&id).await?;
    audit(&state, &caller, "wake", Some(&id), &id, None).await;
    Ok((
        StatusCode::ACCEPTED,
        Json(WakeAnswer {
            run_id: id,
            woken: true,
        }),
    ))
}

/// The query of `GET /v1/wakeups` and `GET /v1/approvals`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct LimitQuery {
    /// At most this many (default 100).
    limit: Option<i64>,
}

/// A sleeping run.
#[derive(Debug, Serialize, ToSchema)]
pub struct WakeupView {
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
pub struct WakeupsPage {
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

/// Tool calls waiting for a decision, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalsPage {
    /// `{run_id, call_id, agent, tool, input, reason, requested_at, expires_at, …}` per call.
    #[schema(value_type = Vec<Object>)]
    approvals: Vec<nightshift_store::Approval>,
}

/// `GET /v1/approvals`: tool calls waiting for a decision, oldest first.
#[utoipa::path(
    get, path = "/v1/approvals", tag = "approvals",
    params(LimitQuery),
    responses(
        (status = 200, description = "pending calls", body = ApprovalsPage),
        (status = 400, description = "a bad parameter, naming it", body = ErrorBody),
    )
)]
pub(crate) async fn list_approvals(
    State(state): State<ApiState>,
    q: Result<Query<LimitQuery>, QueryRejection>,
) -> Result<Json<ApprovalsPage>, ApiError> {
    let q = query(q)?;
    let approvals = state
        .store
        .pending_approvals(q.limit.unwrap_or(100))
        .await?;
    Ok(Json(ApprovalsPage { approvals }))
}

/// The query of `GET /v1/notifications`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct NotificationsQuery {
    /// Only this run's deliveries.
    #[serde(default, deserialize_with = "empty_as_none")]
    run: Option<String>,
    /// `pending`, `delivered` or `dead`.
    #[serde(default, deserialize_with = "empty_as_none")]
    status: Option<String>,
    /// At most this many (default 100).
    limit: Option<i64>,
}

/// One run notice delivery.
#[derive(Debug, Serialize, ToSchema)]
pub struct NotificationView {
    delivery_id: String,
    run_id: String,
    /// The receiver, without credentials or query.
    url: String,
    /// `pending`, `delivered` or `dead`.
    #[schema(value_type = String)]
    status: DeliveryStatus,
    attempts: i64,
    max_attempts: i64,
    /// When the next attempt is due (pending only), epoch milliseconds.
    next_attempt_at: Option<i64>,
    last_error: Option<String>,
    last_status_code: Option<i64>,
    created_at: i64,
    delivered_at: Option<i64>,
}

/// Run notice deliveries, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct NotificationsPage {
    notifications: Vec<NotificationView>,
}

/// `GET /v1/notifications`: run notice deliveries, newest first.
#[utoipa::path(
    get, path = "/v1/notifications", tag = "notifications",
    params(NotificationsQuery),
    responses(
        (status = 200, description = "deliveries", body = NotificationsPage),
        (status = 400, description = "a bad parameter, naming it and the allowed values", body = ErrorBody),
    )
)]
pub(crate) async fn list_notifications(
    State(state): State<ApiState>,
    q: Result<Query<NotificationsQuery>, QueryRejection>,
) -> Result<Json<NotificationsPage>, ApiError> {
    let (q, status) = status_query::<_, DeliveryStatus>(q, |q| q.status.as_deref())?;
    let rows = state
        .store
        .notifications(q.run.as_deref(), status, q.limit.unwrap_or(100))
        .await?;
    let notifications = rows
        .iter()
        .map(|n| NotificationView {
            delivery_id: n.delivery_id.clone(),
            run_id: n.run_id.clone(),
            url: crate::notify::shown_url(&n.url),
            status: n.status,
            attempts: n.attempts,
            max_attempts: n.max_attempts,
            next_attempt_at: (n.status == DeliveryStatus::Pending).then_some(n.next_attempt_at),
            last_error: n.last_error.clone(),
            last_status_code: n.last_status_code,
            created_at: n.created_at,
            delivered_at: n.delivered_at,
        })
        .collect();
    Ok(Json(NotificationsPage { notifications }))
}

/// The body of `POST /v1/runs/{id}/approvals/{call}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Decide {
    pub decision: Decision,
    /// Shown to the agent with a denial.
    #[serde(default)]
    pub reason: Option<String>,
}

/// A decision on a tool call.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Approve,
    Deny,
}

/// A decided call.
#[derive(Debug, Serialize, ToSchema)]
pub struct Decided {
    run_id: String,
    call_id: String,
    decision: Decision,
}

/// `POST /v1/runs/{id}/approvals/{call}`: decides one waiting call; the run resumes.
#[utoipa::path(
    post, path = "/v1/runs/{id}/approvals/{call}", tag = "approvals",
    params(
        ("id" = String, Path, description = "the run id"),
        ("call" = String, Path, description = "the tool call id"),
    ),
    request_body = Decide,
    responses(
        (status = 202, description = "decided; the run resumes on any worker", body = Decided),
        (status = 404, description = "no such call waiting", body = ErrorBody),
        (status = 409, description = "decided before, or timed out", body = ErrorBody),
    )
)]
pub(crate) async fn decide_approval(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path((id, call)): Path<(String, String)>,
    JsonBody(body): JsonBody<Decide>,
) -> Result<impl IntoResponse, ApiError> {
    let approve = matches!(body.decision, Decision::Approve);
    // Recorded on the approval and in the audit trail by the store.
    state
        .store
        .decide_approval_as(&id, &call, approve, body.reason.as_deref(), &caller.actor())
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(Decided {
            run_id: id,
            call_id: call,
            decision: body.decision,
        }),
    ))
}

/// A delivery sent again.
#[derive(Debug, Serialize, ToSchema)]
pub struct Redelivered {
    delivery_id: String,
    #[schema(example = "pending")]
    status: &'static str,
}

/// `POST /v1/notifications/{delivery_id}/redeliver`: sends a dead delivery again.
#[utoipa::path(
    post, path = "/v1/notifications/{delivery_id}/redeliver", tag = "notifications",
    params(("delivery_id" = String, Path, description = "the delivery id")),
    responses(
        (status = 202, description = "pending again, with fresh attempts", body = Redelivered),
        (status = 404, description = "no such delivery", body = ErrorBody),
        (status = 409, description = "the delivery is not dead", body = ErrorBody),
    )
)]
pub(crate) async fn redeliver(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(delivery_id): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    state.store.redeliver(&delivery_id).await?;
    audit(&state, &caller, "redeliver", None, &delivery_id, None).await;
    Ok((
        StatusCode::ACCEPTED,
        Json(Redelivered {
            delivery_id,
            status: "pending",
        }),
    ))
}
