//! `POST /v1/runs:batch`: many runs in one request and one transaction.
//!
//! Each item is a `POST /v1/runs` body and is checked the same way, alone: an item that is
//! not valid JSON for that shape, names an unknown agent or has a bad value is refused with
//! the reason, and only it; the others are enqueued together, in order, each exactly as it
//! would be alone (idempotency keys and concurrency-key policies see the earlier items). The
//! answer lists one result per item, in the order given. The request as a whole is refused
//! (422, nothing enqueued) only when it is not `{"runs": [...]}` or holds more runs than
//! `server.max_batch_runs`; a store failure answers 503/500 and enqueues nothing.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use nightshift_scheduler::IntakeError;
use nightshift_store::Enqueued;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::{ApiState, CreateRun, run_request, traceparent};
use crate::api_errors::{ApiError, ErrorBody, JsonBody, decode_value};

/// The body of `POST /v1/runs:batch`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateRuns {
    /// The runs, each a `POST /v1/runs` body (checked one by one).
    #[schema(value_type = Vec<CreateRun>)]
    pub runs: Vec<serde_json::Value>,
}

/// What became of one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ItemStatus {
    /// A new run was enqueued.
    Created,
    /// The idempotency key was used before (or by an earlier item): the first run's ids.
    Duplicate,
    /// The `skip` policy dropped it while its key was held: the active run's ids.
    Skipped,
    /// Not enqueued: `error` says why. Only this item was refused.
    Refused,
}

/// The result of one item, at its position in the request.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ItemResult {
    /// The item's position in `runs` (from 0).
    pub index: usize,
    pub status: ItemStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<i64>,
    /// Runs this one ended under the `supersede` policy.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub superseded: Vec<String>,
    /// Why it was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The answer to `POST /v1/runs:batch`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct BatchCreated {
    /// One result per item, in the order given.
    pub runs: Vec<ItemResult>,
    /// How many items made a new run.
    pub created: usize,
    /// How many items were refused (the others were enqueued regardless).
    pub refused: usize,
}

impl ItemResult {
    fn of(index: usize, result: Result<Enqueued, IntakeError>) -> Self {
        match result {
            Ok(e) => ItemResult {
                index,
                status: if e.duplicate {
                    ItemStatus::Duplicate
                } else if e.skipped {
                    ItemStatus::Skipped
                } else {
                    ItemStatus::Created
                },
                run_id: Some(e.run_id),
                job_id: Some(e.job_id),
                superseded: e.superseded,
                error: None,
            },
            Err(e) => ItemResult {
                index,
                status: ItemStatus::Refused,
                run_id: None,
                job_id: None,
                superseded: Vec::new(),
                error: Some(format!("runs[{index}]: {e}; this run was not enqueued")),
            },
        }
    }
}

/// `POST /v1/runs:batch`: enqueues many runs in one transaction, answering per run.
#[utoipa::path(
    post, path = "/v1/runs:batch", tag = "runs",
    request_body = CreateRuns,
    params(("traceparent" = Option<String>, Header, description = "W3C Trace Context: every run's trace continues this one (ignored when invalid)")),
    responses(
        (status = 200, description = "one result per item, in order: created, duplicate, skipped, or refused with the reason (a refused item refused only itself)", body = BatchCreated),
        (status = 422, description = "not `{\"runs\": [...]}`, or more runs than `server.max_batch_runs`; nothing enqueued", body = ErrorBody),
    )
)]
pub(crate) async fn create_runs(
    State(state): State<ApiState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<CreateRuns>,
) -> Result<impl IntoResponse, ApiError> {
    let limit = state.intake.batch_limit();
    if body.runs.len() > limit {
        return Err(ApiError::Unprocessable(format!(
            "{} runs in one batch; the limit is {limit} (server.max_batch_runs): split the batch",
            body.runs.len()
        )));
    }
    let trace_parent = traceparent(&headers);
    let reqs = body
        .runs
        .into_iter()
        .map(|item| {
            let body: CreateRun =
                decode_value(item).map_err(|e| IntakeError::Invalid(e.to_string()))?;
            run_request(body, trace_parent.clone()).map_err(IntakeError::Invalid)
        })
        .collect();
    let results = state.intake.submit_many(reqs).await.map_err(|e| match e {
        IntakeError::Store(e) => ApiError::Store(e),
        // Unlike one run's, the batch's own refusals are all 422.
        e => ApiError::Unprocessable(e.to_string()),
    })?;
    let runs: Vec<ItemResult> = results
        .into_iter()
        .enumerate()
        .map(|(i, r)| ItemResult::of(i, r))
        .collect();
    let count = |s: ItemStatus| runs.iter().filter(|r| r.status == s).count();
    let (created, refused) = (count(ItemStatus::Created), count(ItemStatus::Refused));
    Ok((
        StatusCode::OK,
        Json(BatchCreated {
            runs,
            created,
            refused,
        }),
    ))
}

/// The batch route.
pub(crate) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new().routes(routes!(create_runs))
}
