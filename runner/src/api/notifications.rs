//! Run notice deliveries: `GET /v1/notifications` (newest first) and
//! `POST /v1/notifications/{delivery_id}/redeliver`.
//!
//! What it guarantees: a receiver's URL is shown without credentials or query (see
//! `nightshift_notify::shown_url`); `next_attempt_at` is given only while a delivery is
//! pending; only a dead delivery is sent again (409 otherwise), with fresh attempts and the
//! same delivery id, and the redelivery is in the audit trail.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use nightshift_store::DeliveryStatus;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{ApiError, ApiState, ErrorBody, empty_as_none, status_query};
use crate::api_tokens::Caller;

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
pub(super) struct NotificationView {
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
pub(super) struct NotificationsPage {
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
            url: nightshift_notify::shown_url(&n.url),
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

/// A delivery sent again.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Redelivered {
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
    let actor = caller.actor();
    state
        .store
        .as_operator(&actor)
        .redeliver(&delivery_id)
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(Redelivered {
            delivery_id,
            status: "pending",
        }),
    ))
}
