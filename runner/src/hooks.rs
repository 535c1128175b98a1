//! The webhook endpoints of the HTTP API.
//!
//! - `POST /hooks/{name}`: a delivery. Not behind the API token: the hook's signature is its
//!   authentication. The body is read up to the hook's `max_body_bytes` and handed to
//!   [`nightshift_scheduler::hooks::deliver`], which checks, routes and enqueues it (see
//!   there for the exactly-once protocol). The answer comes as soon as the runs are enqueued,
//!   before any model is called.
//! - `GET /v1/hooks` (token): each hook with its routes and counts per outcome since this
//!   daemon started (the counters are in-process; `webhook_deliveries` is the durable record).
//! - `GET /v1/hooks/{name}/deliveries?limit=N` (token): the hook's recorded deliveries.
//!
//! | answer | when |
//! |---|---|
//! | 202 | accepted: `{"hook", "delivery", "event", "redelivery": false, "runs": [{"route", "kind", "run_id", "job_id", "duplicate", "skipped", "superseded"}]}` |
//! | 200 | a redelivery: the same body with `"redelivery": true` and the original runs; nothing enqueued. Also GitHub's `ping` (`"ping": true`, no runs) when no route takes it |
//! | 400 | the body is not JSON, or the delivery id is missing |
//! | 401 | the signature is missing or wrong, or its timestamp is outside the tolerance |
//! | 404 | no hook of that name; or a `resume` route found no unfinished run for its key |
//! | 413 | the body is larger than the hook's `max_body_bytes` |
//! | 422 | no route matched, or a template failed on this payload |
//! | 500/503 | the store failed (503: retrying can help) |
//!
//! Every refusal is JSON `{"error": "…"}` and enqueues nothing.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use nightshift_scheduler::hooks::{self, DeliveryOutcome, HookSet, Refused};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::{ApiState, error, require_token, store_error};

/// The webhook routes, merged into [`crate::api::router`].
pub fn routes(state: &ApiState) -> Router<ApiState> {
    let listing = Router::new()
        .route("/v1/hooks", get(list_hooks))
        .route("/v1/hooks/{name}/deliveries", get(list_deliveries))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/hooks/{name}", post(receive))
        .merge(listing)
}

/// Builds the configured hooks, reading their secrets from the environment.
pub fn build(config: &crate::config::Config) -> anyhow::Result<HookSet> {
    let agents: Vec<&str> = config.agents.iter().map(|a| a.name.as_str()).collect();
    HookSet::build(&config.hooks, &agents, |var| std::env::var(var).ok())
        .map_err(|e| anyhow::anyhow!("invalid config: {e}"))
}

fn is_length_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = s.source();
    }
    false
}

async fn receive(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Some(hook) = state.hooks.get(&name) else {
        state.hooks.unknown.fetch_add(1, Ordering::Relaxed);
        // The caller is not authenticated: the answer never names the hooks that exist
        // (`GET /v1/hooks`, behind the API token, lists them).
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "no webhook named '{name}' is configured; check the URL or add a [[hooks]] entry"
            ),
        );
    };
    let too_large = || {
        hook.counters.count(DeliveryOutcome::TooLarge);
        nightshift_telemetry::webhook_delivery(&hook.name, DeliveryOutcome::TooLarge.as_str());
        error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the body is larger than this hook's max_body_bytes ({} bytes); nothing was \
                 enqueued — raise max_body_bytes if such deliveries are expected",
                hook.max_body_bytes
            ),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > hook.max_body_bytes as u64) {
        return too_large();
    }
    let bytes = match axum::body::to_bytes(body, hook.max_body_bytes).await {
        Ok(b) => b,
        Err(e) if is_length_limit(&e) => return too_large(),
        Err(e) => {
            hook.counters.count(DeliveryOutcome::BadRequest);
            return error(
                StatusCode::BAD_REQUEST,
                format!("cannot read the body: {e}"),
            );
        }
    };
    let lookup = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    match hooks::deliver(&state.intake, &hook, &lookup, &bytes).await {
        Ok(accepted) if accepted.challenge.is_some() => {
            // Slack wants exactly the challenge back.
            (
                StatusCode::OK,
                Json(json!({"challenge": accepted.challenge})),
            )
                .into_response()
        }
        Ok(accepted) => {
            let status = if accepted.redelivery || accepted.ping {
                StatusCode::OK
            } else {
                StatusCode::ACCEPTED
            };
            (status, Json(accepted)).into_response()
        }
        Err(Refused::Unauthorized(m)) => error(StatusCode::UNAUTHORIZED, m),
        Err(Refused::BadRequest(m)) => error(StatusCode::BAD_REQUEST, m),
        Err(Refused::Unmatched(m)) => error(StatusCode::UNPROCESSABLE_ENTITY, m),
        Err(Refused::NoRun(m)) => error(StatusCode::NOT_FOUND, m),
        Err(Refused::Invalid(m)) => error(StatusCode::UNPROCESSABLE_ENTITY, m),
        Err(Refused::Store(e)) => store_error(e),
    }
}

async fn list_hooks(State(state): State<ApiState>) -> Response {
    let hooks: Vec<Value> = state
        .hooks
        .iter()
        .map(|h| {
            json!({
                "name": h.name,
                "path": format!("/hooks/{}", h.name),
                "signature": h.scheme.name(),
                "max_body_bytes": h.max_body_bytes,
                "routes": h.route_names(),
                "counts": h.counters.snapshot(),
            })
        })
        .collect();
    Json(json!({
        "hooks": hooks,
        "unknown_hook_requests": state.hooks.unknown.load(Ordering::Relaxed),
        "counts_since": "this daemon started (in-process counters); GET /v1/hooks/{name}/deliveries for the durable record",
    }))
    .into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeliveriesQuery {
    limit: Option<i64>,
}

async fn list_deliveries(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    q: Result<Query<DeliveriesQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Query(q) = match q {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    if state.hooks.get(&name).is_none() {
        return error(
            StatusCode::NOT_FOUND,
            format!("no webhook named '{name}' is configured"),
        );
    }
    match state
        .store
        .webhook_deliveries(&name, q.limit.unwrap_or(50))
        .await
    {
        Ok(rows) => {
            let rows: Vec<Value> = rows
                .into_iter()
                .map(|d| {
                    let runs = d
                        .runs
                        .as_deref()
                        .and_then(|r| serde_json::from_str::<Value>(r).ok());
                    let mut v = serde_json::to_value(&d).unwrap_or(Value::Null);
                    v["runs"] = runs.unwrap_or(Value::Null);
                    v
                })
                .collect();
            Json(json!({ "deliveries": rows })).into_response()
        }
        Err(e) => store_error(e),
    }
}

/// The hooks of a daemon without any configured (for tests and tools that build an API).
pub fn none() -> Arc<HookSet> {
    Arc::new(HookSet::default())
}
