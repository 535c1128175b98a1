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
//! | `GET` | `/v1/runs/{id}/export` | an ended run as a replay file (see `crate::replay`), recorded with the daemon's config |
//! | `POST` | `/v1/runs/{id}/wake` | wake a sleeping run now |
//! | `GET` | `/v1/wakeups?limit=` | sleeping runs and when each wakes, soonest first |
//! | `GET` | `/v1/approvals?limit=` | tool calls waiting for a decision, oldest first |
//! | `POST` | `/v1/runs/{id}/approvals/{call}` | `{decision: approve\|deny, reason?}`: decide one call; the run resumes on any worker |
//! | `GET` | `/v1/hooks` | the webhooks, with counts per outcome (see [`crate::hooks`]) |
//! | `GET` | `/v1/hooks/{name}/deliveries?limit=` | a webhook's recorded deliveries |
//! | `POST` | `/hooks/{name}` | a webhook delivery, authenticated by its signature, not the token |
//! | `GET` | `/v1/notifications?run=&status=&limit=` | run notice deliveries, newest first: status (`pending`, `delivered`, `dead`), attempts, last error |
//! | `POST` | `/v1/notifications/{delivery_id}/redeliver` | send a dead delivery again (fresh attempts, same delivery id) |
//! | `GET` | `/metrics` | Prometheus metrics (see `crate::metrics`); also without the token on `telemetry.metrics_address` |
//! | `GET` | `/healthz` | liveness, without the token |
//! | `GET` | `/readyz` | readiness: 200 when the store takes a write transaction within 2 s, else 503 with `Retry-After`; no token |
//! | `GET` | `/openapi.json` | the OpenAPI 3.1 document of every route above (see [`crate::openapi`]); no token |
//! | `GET` | `/ui…` | the web dashboard, signed in with the token (see `nightshift_dashboard`) |
//! | … | `/v1/schedules…` | cron schedules (see `crate::schedules_api`) |
//!
//! Every error is JSON `{"error": "…"}` saying what was wrong; a refused request changes
//! nothing. The codes are decided in `crate::api_errors`: 400 for a body that is not JSON
//! or a bad query parameter (naming it), 415 for a body not sent as JSON, 422 for a JSON
//! value that does not fit (naming the key) or a bad value, 503 with `Retry-After` whenever
//! the store is unavailable, 500 only for a bug.
//!
//! This module holds what the handlers share — [`ApiState`], the token check (whose caller
//! each action passes to `Store::as_operator`, so its audit row commits with it), query
//! parsing — and the routers; the handlers are in a module per resource:
//! `enqueue` (`POST /v1/runs`), `runs` (listing, reading and cancelling runs), `export`, `wakeups`,
//! `approvals` and `notifications`; batches, schedules, tasks, the queue, the audit trail,
//! webhooks and metrics in their sibling modules (`crate::batch_api`, …).

mod approvals;
mod enqueue;
mod export;
mod forks;
mod notifications;
mod runs;
mod wakeups;

use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use nightshift_scheduler::Intake;
use nightshift_store::Store;
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub(crate) use crate::api_errors::{ApiError, ErrorBody, JsonBody};
pub(crate) use enqueue::{CreateRun, run_request, traceparent};

/// The config the daemon runs now (the one SIGHUP applied last): what an export records
/// with and a fork is checked against. A server without it (a test's API alone) answers
/// those requests 503.
#[derive(Debug, Clone)]
pub(crate) struct LiveConfig(pub(crate) Arc<std::sync::Mutex<crate::config::Config>>);

impl LiveConfig {
    /// The config as of now.
    pub(crate) fn current(&self) -> crate::config::Config {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The fork guard of the config as of now (see [`crate::fork_guard`]).
    pub(crate) fn fork_guard(&self) -> anyhow::Result<nightshift_agent::fork::ForkGuard> {
        crate::fork_guard::of(&self.current())
    }
}

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

/// The API's routes (and the dashboard, without run files; without a config, exports and
/// forks are refused).
pub fn router(state: ApiState) -> Router {
    router_with_data_dir(state, None, None)
}

/// The API's routes and the dashboard, which shows the run files (artifacts, running
/// tasks' output) under `data_dir`, exporting and forking runs with the `live` config. The
/// API's routes all come from [`crate::openapi::routes`], so each one served is in
/// `GET /openapi.json`; only the dashboard (HTML) is added here.
pub(crate) fn router_with_data_dir(
    state: ApiState,
    data_dir: Option<std::path::PathBuf>,
    live: Option<LiveConfig>,
) -> Router {
    let dashboard = dashboard_state(&state, data_dir, live.clone());
    let router = crate::openapi::routes(&state)
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .with_state(state.clone())
        .merge(nightshift_dashboard::router(dashboard));
    match live {
        Some(live) => router.layer(axum::Extension(live)),
        None => router,
    }
}

/// The routes of runs, wakeups, approvals and notifications, in the order the document
/// lists them (merged into [`crate::openapi`]'s routes behind the token).
pub(crate) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(runs::list_runs, enqueue::create_run))
        .routes(routes!(runs::show_run))
        .routes(routes!(runs::run_events))
        .routes(routes!(runs::cancel_run))
        .routes(routes!(forks::fork_run))
        .routes(routes!(forks::rerun_runs))
        .routes(routes!(export::export_run))
        .routes(routes!(wakeups::wake_run))
        .routes(routes!(wakeups::list_wakeups))
        .routes(routes!(approvals::list_approvals))
        .routes(routes!(approvals::decide_approval))
        .routes(routes!(notifications::list_notifications))
        .routes(routes!(notifications::redeliver))
}

fn dashboard_state(
    state: &ApiState,
    data_dir: Option<std::path::PathBuf>,
    live: Option<LiveConfig>,
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
    let dashboard = match live {
        Some(live) => dashboard.with_fork_guard(Arc::new(move || {
            live.fork_guard().map_err(|e| e.to_string())
        })),
        None => dashboard,
    };
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

/// A query parameter given empty (`?status=`, as a form with nothing chosen sends it) is
/// not a filter: it reads as absent.
pub(crate) fn empty_as_none<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|v| !v.is_empty()))
}

/// The query of `GET /v1/wakeups` and `GET /v1/approvals`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct LimitQuery {
    /// At most this many (default 100).
    limit: Option<i64>,
}

/// The API token: from the environment variable `token_env` when set, else the one kept in
/// `<data_dir>/api-token` (made, readable by this user only, on first use).
pub(crate) fn resolve_token(
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
