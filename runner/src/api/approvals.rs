//! Tool calls waiting for a person: `GET /v1/approvals` (oldest first) and
//! `POST /v1/runs/{id}/approvals/{call}`.
//!
//! What it guarantees: a call is decided once — a second decision, or one after the call
//! timed out, is a 409 and changes nothing; the decision, who made it and the reason are
//! written on the approval and in the audit trail by the store in the same write; the run
//! then resumes on any worker.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{ApiError, ApiState, ErrorBody, JsonBody, LimitQuery, query};
use crate::api_tokens::Caller;

/// Tool calls waiting for a decision, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ApprovalsPage {
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

/// The body of `POST /v1/runs/{id}/approvals/{call}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct Decide {
    pub decision: Decision,
    /// Shown to the agent with a denial.
    #[serde(default)]
    pub reason: Option<String>,
}

/// A decision on a tool call.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum Decision {
    Approve,
    Deny,
}

/// A decided call.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Decided {
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
    // Recorded on the approval and, in the same transaction, in the audit trail.
    let actor = caller.actor();
    state
        .store
        .as_operator(&actor)
        .decide_approval(&id, &call, approve, body.reason.as_deref())
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
