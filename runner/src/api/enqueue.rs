//! `POST /v1/runs`: the body, the run request it asks for, and the answer.
//!
//! What it guarantees:
//! - **A body is checked whole before anything is enqueued**: `delay_seconds` and `run_at`
//!   are exclusive, `run_at` is RFC 3339, a concurrency policy comes with what it needs;
//!   then the intake checks the agent, the prompt and the values. A refusal is a 422 naming
//!   the value (404 for a resume with no run to resume) and enqueues nothing.
//! - **A repeat is answered, not enqueued twice**: a used idempotency key answers 200 with
//!   the first run's ids (`duplicate`), the `skip` policy 200 with the active run's
//!   (`skipped`); a new run is 202.
//! - **One reading of a body for one run and for a batch**: [`run_request`] is also what
//!   each item of `POST /v1/runs:batch` (`crate::batch_api`) goes through, so both refuse the
//!   same things in the same words.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use nightshift_scheduler::{RunRequest, StartAt};
use nightshift_store::{ConcurrencyPolicy, Trigger};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ApiError, ApiState, ErrorBody, JsonBody};

/// The body of `POST /v1/runs`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateRun {
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
pub(crate) enum PolicyName {
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
pub(super) struct Created {
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
