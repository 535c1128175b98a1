//! `GET /v1/audit`: the audit trail, newest first — every operator action taken through the
//! API, the CLI or the dashboard, with who took it (see `nightshift_store::audit`). Any token
//! may read it, a read-only one included.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::{ApiError, ApiState, ErrorBody, empty_as_none, query};

/// The routes (behind the token).
pub(crate) fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new().routes(routes!(list_audit))
}

/// The query of `GET /v1/audit`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct AuditQuery {
    /// Only the actions on this run.
    #[serde(default, deserialize_with = "empty_as_none")]
    run: Option<String>,
    /// Only actions older than this id (the last id of the previous page).
    before: Option<i64>,
    /// At most this many (1-1000, default 100).
    limit: Option<i64>,
}

/// Operator actions, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AuditPage {
    /// `{id, at, actor, action, run_id, target, detail}` per action: `actor` is
    /// `token:NAME`, `dashboard:NAME` or `cli:USER`; `action` one of `approve`, `deny`,
    /// `cancel`, `wake`, `redeliver`, `schedule_create`, `schedule_update`,
    /// `schedule_delete`, `schedule_trigger`.
    #[schema(value_type = Vec<Object>)]
    actions: Vec<nightshift_store::AuditEntry>,
}

/// `GET /v1/audit`: who did what, newest first.
#[utoipa::path(
    get, path = "/v1/audit", tag = "audit",
    params(AuditQuery),
    responses(
        (status = 200, description = "operator actions, newest first", body = AuditPage),
        (status = 400, description = "a bad parameter, naming it", body = ErrorBody),
    )
)]
pub(crate) async fn list_audit(
    State(state): State<ApiState>,
    q: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Json<AuditPage>, ApiError> {
    let q = query(q)?;
    let actions = state
        .store
        .audit_log(q.run.as_deref(), q.before, q.limit.unwrap_or(100))
        .await?;
    Ok(Json(AuditPage { actions }))
}
