//! Forks and reruns: `POST /v1/runs/{id}/fork` and `POST /v1/runs/rerun` (a bulk rerun of
//! ended runs by filter). The choices are the agent's (`nightshift_agent::fork`); this is
//! their HTTP face.
//!
//! What it guarantees:
//! - **A fork that cannot be is refused whole**: a turn past the parent's calls, a replaced
//!   result the conversation does not hold, an empty prompt, a model the agent can neither
//!   answer with nor price, an agent no longer configured is a 422 saying what to ask
//!   instead; an unknown or purged parent a 404. Nothing is written.
//! - **Every fork is in the audit trail**, with who asked, in the fork's own transaction.
//! - **A bulk rerun never touches live runs** (its filter names an end state) and reruns each
//!   run once however often it is repeated (key `rerun:<id>`); one run it cannot rerun is
//!   reported in its place, the others still go.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use nightshift_agent::fork::{self, ForkError, ForkRequest, Rerun};
use nightshift_store::Trigger;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

use super::runs::{ListQuery, run_filter};
use super::{ApiError, ApiState, ErrorBody, JsonBody, LiveConfig};
use crate::api_tokens::Caller;

/// The body of `POST /v1/runs/{id}/fork`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForkBody {
    /// Model calls of the parent the fork keeps, counted from 0: the fork makes the parent's
    /// call number `from_turn` again. 0 is a rerun.
    #[schema(example = 3)]
    pub from_turn: u64,
    /// A user message appended at the fork point (at turn 0: the fork's prompt instead of
    /// the parent's).
    #[serde(default)]
    pub prompt: Option<String>,
    /// The model that answers the fork, of the agent's provider.
    #[serde(default)]
    pub model: Option<String>,
    /// Recorded tool results to replace, by call id (`content` as the model will read it).
    #[serde(default)]
    pub tool_results: BTreeMap<String, String>,
    /// A second fork with the same key answers 200 with the first fork's ids.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

/// The answer to a fork.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Forked {
    run_id: String,
    job_id: i64,
    /// The run forked from (for a repeated key, the first fork's parent; `null` when the key
    /// belongs to a run that is not a fork).
    forked_from: Option<String>,
    /// The idempotency key was used before: these are the first fork's ids.
    duplicate: bool,
}

impl From<ForkError> for ApiError {
    fn from(e: ForkError) -> Self {
        match e {
            ForkError::NotFound(m) => ApiError::NotFound(m),
            ForkError::Invalid(m) => ApiError::Unprocessable(m),
            ForkError::Store(e) => ApiError::Store(e),
        }
    }
}

/// `POST /v1/runs/{id}/fork`: a new run that goes on from the run's state after
/// `from_turn` model calls, reusing their recorded tool results (no side effect at or before
/// the fork point runs again), with the changes asked for.
#[utoipa::path(
    post, path = "/v1/runs/{id}/fork", tag = "runs",
    params(("id" = String, Path, description = "the run to fork")),
    request_body = ForkBody,
    responses(
        (status = 202, description = "the fork was made and is queued", body = Forked),
        (status = 200, description = "a repeated idempotency key: the first fork's ids; nothing made", body = Forked),
        (status = 404, description = "no such run, or its history was purged", body = ErrorBody),
        (status = 422, description = "not a fork this run can have (a turn past its calls, a result the conversation does not hold, an empty prompt, a model its agent cannot answer with and price, an agent no longer configured), saying what to ask instead", body = ErrorBody),
    )
)]
pub(crate) async fn fork_run(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    live: Option<Extension<LiveConfig>>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<ForkBody>,
) -> Result<impl IntoResponse, ApiError> {
    let req = ForkRequest {
        from_turn: body.from_turn,
        prompt: body.prompt,
        model: body.model,
        tool_results: body.tool_results,
        idempotency_key: body.idempotency_key,
    };
    let guard = live_guard(live)?;
    let actor = caller.actor();
    let op = state.store.as_operator(&actor);
    let e = fork::fork_run(&op, &id, &req, Trigger::Api, &guard).await?;
    let (status, forked_from) = if e.duplicate {
        // The key's run, whatever this request named.
        let first = state.store.run(&e.run_id).await?;
        (StatusCode::OK, first.and_then(|r| r.forked_from))
    } else {
        (StatusCode::ACCEPTED, Some(id))
    };
    Ok((
        status,
        Json(Forked {
            run_id: e.run_id,
            job_id: e.job_id,
            forked_from,
            duplicate: e.duplicate,
        }),
    ))
}

/// The body of `POST /v1/runs/rerun`: which ended runs to rerun (the filters of
/// `GET /v1/runs`), at most how many, and whether only to say which.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RerunBody {
    /// An end state: failed, cancelled, succeeded, budget_exhausted, max_rounds, superseded.
    #[schema(example = "failed")]
    pub status: String,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub trigger: Option<String>,
    /// The concurrency key.
    #[serde(default)]
    pub key: Option<String>,
    /// Created at or after: RFC 3339 or epoch milliseconds.
    #[serde(default)]
    pub since: Option<String>,
    /// Created before: RFC 3339 or epoch milliseconds.
    #[serde(default)]
    pub until: Option<String>,
    /// A run id or idempotency key (exact), else text of the prompt.
    #[serde(default)]
    pub q: Option<String>,
    /// At most this many runs, newest first (1-1000, default 100).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Only say which runs would be rerun.
    #[serde(default)]
    pub dry_run: bool,
}

/// What a bulk rerun did, run by run.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Reruns {
    /// `{outcome: started | already_rerun | would_rerun | refused, parent, run_id?, error?}`
    /// per run matched, newest first.
    #[schema(value_type = Vec<Object>)]
    runs: Vec<Rerun>,
}

/// `POST /v1/runs/rerun`: reruns the ended runs a filter matches (each from turn 0 with its
/// input, once: key `rerun:<id>`).
#[utoipa::path(
    post, path = "/v1/runs/rerun", tag = "runs",
    request_body = RerunBody,
    responses(
        (status = 200, description = "what was done with each run matched", body = Reruns),
        (status = 422, description = "a filter that is not an end state, a bad value or limit, naming it", body = ErrorBody),
    )
)]
pub(crate) async fn rerun_runs(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    live: Option<Extension<LiveConfig>>,
    JsonBody(body): JsonBody<RerunBody>,
) -> Result<Json<Reruns>, ApiError> {
    let query = ListQuery {
        status: Some(body.status),
        agent: body.agent,
        trigger: body.trigger,
        key: body.key,
        since: body.since,
        until: body.until,
        q: body.q,
        cursor: None,
        limit: None,
    };
    let filter = run_filter(&query).map_err(ApiError::Unprocessable)?;
    let guard = live_guard(live)?;
    let actor = caller.actor();
    let op = state.store.as_operator(&actor);
    let limit = body.limit.unwrap_or(100);
    let runs =
        fork::rerun_matching(&op, &filter, limit, body.dry_run, Trigger::Api, &guard).await?;
    Ok(Json(Reruns { runs }))
}

/// The guard of the daemon's config as of now; a server without one (a test's API alone)
/// answers 503.
fn live_guard(live: Option<Extension<LiveConfig>>) -> Result<fork::ForkGuard, ApiError> {
    match live {
        Some(Extension(live)) => live
            .fork_guard()
            .map_err(|e| ApiError::Status(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
        None => Err(ApiError::Status(
            StatusCode::SERVICE_UNAVAILABLE,
            "this server does not fork runs (it runs without a config)".into(),
        )),
    }
}
