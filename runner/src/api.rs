//! The HTTP API of `nightshift serve`, behind a bearer token compared in constant time.
//!
//! | method | path | does |
//! |---|---|---|
//! | `POST` | `/v1/runs` | enqueue a run: `{agent, prompt, idempotency_key?, priority?, lane?, delay_seconds?, run_at?, max_attempts?, concurrency_key?, concurrency_policy?, debounce_seconds?}` → 202 with its id (200 and the first run's id for a repeated idempotency key, or the active run's with `skipped` under the skip policy) |
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
//! | `GET` | `/healthz` | liveness, without the token |
//! | `GET` | `/ui…` | the web dashboard, signed in with the token (see `nightshift_dashboard`) |
//! | … | `/v1/schedules…` | cron schedules (see [`crate::schedules_api`]) |
//!
//! Every error is JSON `{"error": "…"}` saying what was wrong; a refused request changes
//! nothing.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use nightshift_scheduler::{Intake, IntakeError, RunRequest};
use nightshift_store::{
    CancelOutcome, ConcurrencyPolicy, DeliveryStatus, Error as StoreError, RunStatus, Store,
    Trigger,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use subtle::ConstantTimeEq;

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    pub store: Store,
    /// Where runs are checked and enqueued; it knows the configured agents.
    pub intake: Intake,
    pub token: Arc<String>,
    /// The configured webhooks (`[[hooks]]`).
    pub hooks: Arc<nightshift_scheduler::hooks::HookSet>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("agents", &self.intake.agents())
            .field("token", &"[redacted]")
            .finish()
    }
}

/// The API's routes (and the dashboard, without run files).
pub fn router(state: ApiState) -> Router {
    router_with_data_dir(state, None)
}

/// The API's routes and the dashboard, which shows the run files (artifacts, running
/// tasks' output) under `data_dir`.
pub fn router_with_data_dir(state: ApiState, data_dir: Option<std::path::PathBuf>) -> Router {
    let v1 = Router::new()
        .route("/v1/runs", post(create_run).get(list_runs))
        .route("/v1/runs/{id}", get(show_run))
        .route("/v1/runs/{id}/events", get(run_events))
        .route("/v1/runs/{id}/cancel", post(cancel_run))
        .route("/v1/runs/{id}/wake", post(wake_run))
        .route("/v1/wakeups", get(list_wakeups))
        .route("/v1/approvals", get(list_approvals))
        .route("/v1/runs/{id}/approvals/{call}", post(decide_approval))
        .merge(crate::schedules_api::routes())
        .merge(crate::tasks_api::routes())
        .merge(crate::queue_api::routes())
        .route("/v1/notifications", get(list_notifications))
        .route("/v1/notifications/{id}/redeliver", post(redeliver))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/healthz", get(|| async { Json(json!({"ok": true})) }))
        .merge(v1)
        .merge(crate::hooks::routes(&state))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such endpoint") })
        .with_state(state.clone())
        .merge(nightshift_dashboard::router(dashboard_state(
            &state, data_dir,
        )))
}

fn dashboard_state(
    state: &ApiState,
    data_dir: Option<std::path::PathBuf>,
) -> nightshift_dashboard::DashboardState {
    let dashboard = nightshift_dashboard::DashboardState::new(
        state.store.clone(),
        state.token.clone(),
        state.intake.clone(),
        state.hooks.clone(),
    );
    match data_dir {
        Some(dir) => dashboard.with_data_dir(dir),
        None => dashboard,
    }
}

pub(crate) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

/// A listing's query and its optional `status` filter parsed as `S`, or the 400 that says
/// what is wrong (a malformed query, or a status naming the allowed values).
#[allow(clippy::result_large_err)] // the Err is the response, handed straight back to axum
pub(crate) fn status_query<T, S>(
    q: Result<Query<T>, QueryRejection>,
    status: impl FnOnce(&T) -> Option<&str>,
) -> Result<(T, Option<S>), Response>
where
    S: std::str::FromStr<Err = nightshift_store::UnknownName>,
{
    let Query(q) = q.map_err(|e| error(StatusCode::BAD_REQUEST, e.body_text()))?;
    let parsed = status(&q)
        .map(str::parse::<S>)
        .transpose()
        .map_err(|e| error(StatusCode::BAD_REQUEST, e.to_string()))?;
    Ok((q, parsed))
}

pub(crate) async fn require_token(
    State(state): State<ApiState>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Response {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if bool::from(given.as_bytes().ct_eq(state.token.as_bytes())) {
        next.run(req).await
    } else {
        error(
            StatusCode::UNAUTHORIZED,
            "missing or wrong API token; send `Authorization: Bearer <token>`",
        )
    }
}

/// The body of `POST /v1/runs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRun {
    pub agent: String,
    pub prompt: String,
    #[serde(default)]
    pub idempotency_key: Option<String>,
    #[serde(default)]
    pub priority: Option<i64>,
    #[serde(default)]
    pub lane: Option<String>,
    /// Start no earlier than this many seconds from now.
    #[serde(default)]
    pub delay_seconds: Option<u64>,
    /// Start no earlier than this time (RFC 3339, e.g. `2026-12-01T07:00:00Z`).
    #[serde(default)]
    pub run_at: Option<String>,
    #[serde(default)]
    pub max_attempts: Option<i64>,
    /// Runs with the same key run one at a time.
    #[serde(default)]
    pub concurrency_key: Option<String>,
    /// `queue` (default), `skip`, `supersede` or `debounce` (with `debounce_seconds`).
    #[serde(default)]
    pub concurrency_policy: Option<String>,
    #[serde(default)]
    pub debounce_seconds: Option<u64>,
}

#[derive(Debug, Serialize)]
struct Created {
    run_id: String,
    job_id: i64,
    duplicate: bool,
    skipped: bool,
    superseded: Vec<String>,
}

async fn create_run(
    State(state): State<ApiState>,
    body: Result<Json<CreateRun>, JsonRejection>,
) -> Response {
    let Json(body) = match body {
        Ok(b) => b,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("invalid request body: {}", e.body_text()),
            );
        }
    };
    let delay = match (&body.delay_seconds, &body.run_at) {
        (Some(_), Some(_)) => {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "give delay_seconds or run_at, not both",
            );
        }
        (Some(s), None) => Some(Duration::from_secs(*s)),
        (None, Some(at)) => match chrono::DateTime::parse_from_rfc3339(at) {
            Ok(t) => {
                let ms = t.timestamp_millis() - state.store.now();
                Some(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
            }
            Err(e) => {
                return error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!("run_at '{at}' is not an RFC 3339 time like 2026-12-01T07:00:00Z: {e}"),
                );
            }
        },
        (None, None) => None,
    };
    let policy = match body
        .concurrency_policy
        .as_deref()
        .map(|name| ConcurrencyPolicy::from_name(name, body.debounce_seconds))
    {
        None if body.debounce_seconds.is_some() => {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "debounce_seconds needs concurrency_policy = \"debounce\"",
            );
        }
        None => None,
        Some(Ok(p)) => Some(p),
        Some(Err(e)) => return error(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
    };
    let req = RunRequest {
        agent: body.agent,
        prompt: body.prompt,
        trigger: Trigger::Api,
        idempotency_key: body.idempotency_key,
        lane: body.lane,
        priority: body.priority,
        delay,
        max_attempts: body.max_attempts,
        concurrency_key: body.concurrency_key,
        concurrency_policy: policy,
    };
    match state.intake.submit(req).await {
        Ok(e) => {
            let status = if e.duplicate || e.skipped {
                StatusCode::OK
            } else {
                StatusCode::ACCEPTED
            };
            (
                status,
                Json(Created {
                    run_id: e.run_id,
                    job_id: e.job_id,
                    duplicate: e.duplicate,
                    skipped: e.skipped,
                    superseded: e.superseded,
                }),
            )
                .into_response()
        }
        Err(IntakeError::Invalid(m)) => error(StatusCode::UNPROCESSABLE_ENTITY, m),
        Err(IntakeError::NotFound(m)) => error(StatusCode::NOT_FOUND, m),
        Err(IntakeError::Store(e)) => store_error(e),
    }
}

pub(crate) fn store_error(e: StoreError) -> Response {
    match e {
        StoreError::NotFound { .. } => error(StatusCode::NOT_FOUND, e.to_string()),
        StoreError::Conflict(m) => error(StatusCode::CONFLICT, m),
        StoreError::Invalid(m) => error(StatusCode::UNPROCESSABLE_ENTITY, m),
        e if e.is_transient() => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        e => {
            tracing::error!(error = %e, "API request failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    status: Option<String>,
    agent: Option<String>,
    trigger: Option<String>,
    key: Option<String>,
    since: Option<String>,
    until: Option<String>,
    q: Option<String>,
    cursor: Option<String>,
    limit: Option<i64>,
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

async fn list_runs(
    State(state): State<ApiState>,
    q: Result<Query<ListQuery>, QueryRejection>,
) -> Response {
    let Query(q) = match q {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    let filter = match run_filter(&q) {
        Ok(filter) => filter,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let page = state
        .store
        .runs_page(&filter, q.cursor.as_deref(), q.limit.unwrap_or(50))
        .await;
    match page {
        Ok(page) => {
            Json(json!({ "runs": page.runs, "next_cursor": page.next_cursor })).into_response()
        }
        // A malformed cursor or an empty time range is a bad parameter like any other.
        Err(StoreError::Invalid(m)) => error(StatusCode::BAD_REQUEST, m),
        Err(e) => store_error(e),
    }
}

async fn show_run(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    let run = match state.store.run(&id).await {
        Ok(Some(run)) => run,
        Ok(None) => return error(StatusCode::NOT_FOUND, format!("run {id} not found")),
        Err(e) => return store_error(e),
    };
    // Why the newest job was last retried or is waiting (a model outage's real cause, a lost
    // lease), also while the run has not ended.
    let last_error = match state.store.jobs_of_run(&id).await {
        Ok(jobs) => jobs
            .into_iter()
            .max_by_key(|j| j.id)
            .and_then(|j| j.last_error),
        Err(e) => return store_error(e),
    };
    let mut body = serde_json::to_value(&run).expect("a run serialises");
    body["last_error"] = json!(last_error);
    Json(body).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    after: Option<i64>,
}

async fn run_events(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    q: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(q) = match q {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    match state.store.run(&id).await {
        Ok(Some(_)) => {}
        Ok(None) => return error(StatusCode::NOT_FOUND, format!("run {id} not found")),
        Err(e) => return store_error(e),
    }
    match state.store.events(&id, q.after.unwrap_or(0)).await {
        Ok(events) => {
            let events: Vec<Value> = events
                .into_iter()
                .map(|e| {
                    json!({
                        "seq": e.seq,
                        "type": e.event_type,
                        "created_at": e.created_at,
                        "payload": serde_json::from_str::<Value>(&e.payload).unwrap_or(Value::String(e.payload)),
                    })
                })
                .collect();
            Json(json!({ "events": events })).into_response()
        }
        Err(e) => store_error(e),
    }
}

async fn cancel_run(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    match state.store.cancel_run(&id).await {
        Ok(CancelOutcome::Cancelled) => {
            Json(json!({"run_id": id, "status": "cancelled"})).into_response()
        }
        Ok(CancelOutcome::Requested) => (
            StatusCode::ACCEPTED,
            Json(json!({"run_id": id, "status": "cancel_requested"})),
        )
            .into_response(),
        Err(e) => store_error(e),
    }
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

async fn wake_run(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    match state.store.wake_now(&id).await {
        Ok(()) => (
            StatusCode::ACCEPTED,
            Json(json!({"run_id": id, "woken": true})),
        )
            .into_response(),
        Err(e) => store_error(e),
    }
}

#[derive(Debug, Deserialize)]
struct WakeupsQuery {
    limit: Option<i64>,
}

async fn list_wakeups(State(state): State<ApiState>, Query(q): Query<WakeupsQuery>) -> Response {
    match state.store.pending_wakeups(q.limit.unwrap_or(100)).await {
        Ok(rows) => {
            let items: Vec<Value> = rows
                .iter()
                .map(|w| {
                    json!({
                        "run_id": w.run_id,
                        "agent": w.agent,
                        "job_id": w.job_id,
                        "due_at": w.due_at,
                        "reason": w.reason(),
                    })
                })
                .collect();
            Json(json!({ "wakeups": items })).into_response()
        }
        Err(e) => store_error(e),
    }
}

async fn list_approvals(State(state): State<ApiState>, Query(q): Query<WakeupsQuery>) -> Response {
    match state.store.pending_approvals(q.limit.unwrap_or(100)).await {
        Ok(rows) => Json(json!({ "approvals": rows })).into_response(),
        Err(e) => store_error(e),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NotificationsQuery {
    run: Option<String>,
    status: Option<String>,
    limit: Option<i64>,
}

async fn list_notifications(
    State(state): State<ApiState>,
    q: Result<Query<NotificationsQuery>, QueryRejection>,
) -> Response {
    let (q, status) = match status_query::<_, DeliveryStatus>(q, |q| q.status.as_deref()) {
        Ok(parsed) => parsed,
        Err(refused) => return refused,
    };
    let listed = state
        .store
        .notifications(q.run.as_deref(), status, q.limit.unwrap_or(100))
        .await;
    match listed {
        Ok(rows) => {
            let items: Vec<Value> = rows
                .iter()
                .map(|n| {
                    json!({
                        "delivery_id": n.delivery_id,
                        "run_id": n.run_id,
                        "url": crate::notify::shown_url(&n.url),
                        "status": n.status,
                        "attempts": n.attempts,
                        "max_attempts": n.max_attempts,
                        "next_attempt_at": (n.status == DeliveryStatus::Pending)
                            .then_some(n.next_attempt_at),
                        "last_error": n.last_error,
                        "last_status_code": n.last_status_code,
                        "created_at": n.created_at,
                        "delivered_at": n.delivered_at,
                    })
                })
                .collect();
            Json(json!({ "notifications": items })).into_response()
        }
        Err(e) => store_error(e),
    }
}

/// The body of `POST /v1/runs/{id}/approvals/{call}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Decide {
    decision: String,
    #[serde(default)]
    reason: Option<String>,
}

async fn decide_approval(
    State(state): State<ApiState>,
    Path((id, call)): Path<(String, String)>,
    body: Result<Json<Decide>, JsonRejection>,
) -> Response {
    let Json(body) = match body {
        Ok(b) => b,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("invalid request body: {}", e.body_text()),
            );
        }
    };
    let approve = match body.decision.as_str() {
        "approve" => true,
        "deny" => false,
        other => {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("decision '{other}' is not allowed; use approve or deny"),
            );
        }
    };
    match state
        .store
        .decide_approval(&id, &call, approve, body.reason.as_deref())
        .await
    {
        Ok(()) => (
            StatusCode::ACCEPTED,
            Json(json!({"run_id": id, "call_id": call, "decision": body.decision})),
        )
            .into_response(),
        Err(e) => store_error(e),
    }
}

async fn redeliver(State(state): State<ApiState>, Path(id): Path<String>) -> Response {
    match state.store.redeliver(&id).await {
        Ok(()) => (
            StatusCode::ACCEPTED,
            Json(json!({"delivery_id": id, "status": "pending"})),
        )
            .into_response(),
        Err(e) => store_error(e),
    }
}
