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
//! | 200 | a redelivery: the same body with `"redelivery": true` and the original runs; nothing enqueued (also for copies arriving at once: exactly one of them gets the 202). Also GitHub's `ping` (`"ping": true`, no runs) when no route takes it |
//! | 400 | the body is not JSON, or the delivery id is missing |
//! | 401 | the signature is missing or wrong, or its timestamp is outside the tolerance |
//! | 404 | no hook of that name; or a `resume` route found no unfinished run for its key |
//! | 413 | the body is larger than the hook's `max_body_bytes` |
//! | 422 | no route matched, or a template failed on this payload |
//! | 503 | the store is unavailable (with `Retry-After`; see `crate::api_errors`) |
//! | 500 | a bug (logged) |
//!
//! Every refusal is JSON `{"error": "…"}` and enqueues nothing.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use nightshift_scheduler::hooks::checkout::CheckoutTemplates;
use nightshift_scheduler::hooks::{self, DeliveryOutcome, HookSet};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::{ApiError, ApiState, ErrorBody, query};

/// `POST /hooks/{name}`: authenticated by the hook's signature, not the API token.
pub(crate) fn public_routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new().routes(routes!(receive))
}

/// The listings, behind the API token.
pub(crate) fn token_routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(list_hooks))
        .routes(routes!(list_deliveries))
}

/// The answer to an accepted delivery: `{"hook", "delivery", "event", "redelivery",
/// "runs": [{"route", "kind", "run_id", "job_id", "duplicate", "skipped", "superseded"}]}`
/// (`"ping": true` and no runs for GitHub's ping; `{"challenge"}` for Slack's handshake).
#[derive(Serialize, ToSchema)]
#[schema(value_type = Object)]
pub(crate) struct AcceptedDoc(Value);

/// The hooks and their counts.
#[derive(Serialize, ToSchema)]
pub(crate) struct HooksList {
    /// `{name, path, signature, max_body_bytes, routes, counts}` per hook; `counts` by
    /// outcome since this daemon started.
    #[schema(value_type = Vec<Object>)]
    hooks: Vec<Value>,
    /// Requests to `/hooks/{name}` for a name that is not configured.
    unknown_hook_requests: u64,
    counts_since: &'static str,
}

/// A hook's recorded deliveries.
#[derive(Serialize, ToSchema)]
pub(crate) struct DeliveriesPage {
    /// `{hook, delivery_id, event, status, runs, received, first_received_at,
    /// last_received_at, finished_at}` per delivery, newest first.
    #[schema(value_type = Vec<Object>)]
    deliveries: Vec<Value>,
}

/// Builds the configured hooks, reading their secrets from the environment.
pub(crate) fn build(config: &crate::config::Config) -> anyhow::Result<HookSet> {
    let agents: Vec<&str> = config.agents.iter().map(|a| a.name.as_str()).collect();
    HookSet::build_with(
        &config.hooks,
        &agents,
        |var| std::env::var(var).ok(),
        &checkout_templates(config),
    )
    .map_err(|e| anyhow::anyhow!("invalid config: {e}"))
}

/// The checkout templates of the agents that check a repository out, by agent name.
pub(crate) fn checkout_templates(
    config: &crate::config::Config,
) -> std::collections::BTreeMap<String, CheckoutTemplates> {
    config
        .agents
        .iter()
        .filter_map(|a| Some((a.name.clone(), templates_of(a.workspace.checkout.as_ref()?))))
        .collect()
}

/// An agent's `[agents.workspace] checkout` as the intake's templates.
pub(crate) fn templates_of(checkout: &nightshift_agent::workspace::Checkout) -> CheckoutTemplates {
    CheckoutTemplates {
        repo: checkout.repo.clone(),
        git_ref: checkout.git_ref.clone(),
        depth: checkout.depth,
    }
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

/// `POST /hooks/{name}`: one webhook delivery (see the module doc for the answers).
#[utoipa::path(
    post, path = "/hooks/{name}", tag = "hooks",
    params(("name" = String, Path, description = "the hook's name (`[[hooks]] name`)")),
    request_body(content = Object, description = "the sender's JSON payload, signed as the hook's `signature` says", content_type = "application/json"),
    responses(
        (status = 202, description = "accepted: the runs are enqueued", body = AcceptedDoc),
        (status = 200, description = "a redelivery (`redelivery: true`, the original runs, nothing enqueued), also for copies that arrive at once; GitHub's ping; Slack's challenge", body = AcceptedDoc),
        (status = 400, description = "the body is not JSON, or the delivery id is missing", body = ErrorBody),
        (status = 401, description = "the signature is missing or wrong, or its timestamp is outside the tolerance", body = ErrorBody),
        (status = 404, description = "no hook of that name; or a `resume` route found no unfinished run", body = ErrorBody),
        (status = 413, description = "the body is larger than the hook's `max_body_bytes`", body = ErrorBody),
        (status = 422, description = "no route matched, or a template failed on this payload", body = ErrorBody),
    )
)]
async fn receive(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let Some(hook) = state.hooks.get(&name) else {
        state.hooks.unknown.fetch_add(1, Ordering::Relaxed);
        // The caller is not authenticated: the answer never names the hooks that exist
        // (`GET /v1/hooks`, behind the API token, lists them).
        return Err(ApiError::NotFound(format!(
            "no webhook named '{name}' is configured; check the URL or add a [[hooks]] entry"
        )));
    };
    let too_large = || {
        hook.counters.count(DeliveryOutcome::TooLarge);
        nightshift_telemetry::webhook_delivery(&hook.name, DeliveryOutcome::TooLarge.as_str());
        ApiError::PayloadTooLarge(format!(
            "the body is larger than this hook's max_body_bytes ({} bytes); nothing was \
             enqueued — raise max_body_bytes if such deliveries are expected",
            hook.max_body_bytes
        ))
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > hook.max_body_bytes as u64) {
        return Err(too_large());
    }
    let bytes = match axum::body::to_bytes(body, hook.max_body_bytes).await {
        Ok(b) => b,
        Err(e) if is_length_limit(&e) => return Err(too_large()),
        Err(e) => {
            hook.counters.count(DeliveryOutcome::BadRequest);
            return Err(ApiError::BadRequest(format!("cannot read the body: {e}")));
        }
    };
    let lookup = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let accepted = hooks::deliver(&state.intake, &hook, &lookup, &bytes).await?;
    if accepted.challenge.is_some() {
        // Slack wants exactly the challenge back.
        return Ok((
            StatusCode::OK,
            Json(json!({"challenge": accepted.challenge})),
        )
            .into_response());
    }
    let status = if accepted.redelivery || accepted.ping || accepted.ignored {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((status, Json(accepted)).into_response())
}

/// `GET /v1/hooks`: each hook with its routes and counts per outcome.
#[utoipa::path(
    get, path = "/v1/hooks", tag = "hooks",
    responses((status = 200, description = "the hooks", body = HooksList))
)]
async fn list_hooks(State(state): State<ApiState>) -> Json<HooksList> {
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
    Json(HooksList {
        hooks,
        unknown_hook_requests: state.hooks.unknown.load(Ordering::Relaxed),
        counts_since: "this daemon started (in-process counters); GET /v1/hooks/{name}/deliveries for the durable record",
    })
}

/// The query of `GET /v1/hooks/{name}/deliveries`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
struct DeliveriesQuery {
    /// At most this many (1-1000, default 50).
    limit: Option<i64>,
}

/// `GET /v1/hooks/{name}/deliveries`: a hook's recorded deliveries, newest first.
#[utoipa::path(
    get, path = "/v1/hooks/{name}/deliveries", tag = "hooks",
    params(("name" = String, Path, description = "the hook's name"), DeliveriesQuery),
    responses(
        (status = 200, description = "the deliveries", body = DeliveriesPage),
        (status = 400, description = "a bad parameter, naming it", body = ErrorBody),
        (status = 404, description = "no hook of that name", body = ErrorBody),
    )
)]
async fn list_deliveries(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    q: Result<Query<DeliveriesQuery>, QueryRejection>,
) -> Result<Json<DeliveriesPage>, ApiError> {
    let q = query(q)?;
    if state.hooks.get(&name).is_none() {
        return Err(ApiError::NotFound(format!(
            "no webhook named '{name}' is configured"
        )));
    }
    let rows = state
        .store
        .webhook_deliveries(&name, q.limit.unwrap_or(50))
        .await?;
    let deliveries: Vec<Value> = rows
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
    Ok(Json(DeliveriesPage { deliveries }))
}

/// The hooks of a daemon without any configured (for tests and tools that build an API).
pub fn none() -> Arc<HookSet> {
    Arc::new(HookSet::default())
}
