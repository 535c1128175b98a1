//! `GET /ui/notifications?status=pending|delivered|dead`: run notice deliveries newest first
//! (the store's `notifications`, as `GET /v1/notifications` lists them), with attempts, the
//! last error (collapsed when long) and the run; and `POST
//! /ui/notifications/{id}/redeliver`, which is the API's `store.redeliver(id)`.
//!
//! A receiver's URL is shown as scheme, host and port only ([`shown_url`], the API's rule:
//! paths and queries of webhook URLs often hold tokens); the secret's variable name is not
//! shown at all. Errors were redacted when they were stored.
//!
//! Redeliver asks no confirmation: it is safe to repeat. It only acts on a `dead` delivery
//! (any other is refused with a conflict that says why, changing nothing), so a second
//! click finds it pending and is refused; and it sends under the same delivery id, which
//! receivers dedupe on, so even a delivery that did arrive is not acted on twice.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::{Extension, Form};
use minijinja::{Value, context};
use nightshift_store::notifications::shown_url;
use nightshift_store::{DeliveryStatus, Millis, Notification};
use serde::{Deserialize, Serialize};

use crate::actions::{back_to, store_message};
use crate::auth::Session;
use crate::layout::{self, CsrfForm, check_post};
use crate::{DashboardState, format, timeline};

/// How many deliveries the page lists.
pub const LIMIT: i64 = 200;

#[derive(Debug, Default, Deserialize)]
pub struct NotificationsQuery {
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub flash: Option<String>,
    #[serde(default)]
    pub fs: Option<String>,
}

/// The status filter: empty is every status; otherwise one of the three (pure).
pub fn parse_status(text: &str) -> Result<Option<DeliveryStatus>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    text.parse::<DeliveryStatus>()
        .map(Some)
        .map_err(|e| format!("{e}. Choose pending, delivered or dead, or any."))
}

#[derive(Debug, Serialize, PartialEq)]
pub struct Row {
    pub delivery_id: String,
    pub run_id: String,
    pub url: String,
    pub status: &'static str,
    pub attempts: String,
    pub last_error: String,
    pub error_head: String,
    pub long_error: bool,
    pub status_code: String,
    pub created_utc: String,
    pub created_age: String,
    /// When it is tried next (pending), or when it arrived (delivered).
    pub when: String,
    pub dead: bool,
}

/// One delivery as of `now` (pure).
pub fn row(n: &Notification, now: Millis) -> Row {
    let err = n.last_error.clone().unwrap_or_default();
    Row {
        delivery_id: n.delivery_id.clone(),
        run_id: n.run_id.clone(),
        url: shown_url(&n.url),
        status: n.status.as_str(),
        attempts: format!("{}/{}", n.attempts, n.max_attempts),
        long_error: timeline::is_long(&err) || err.chars().count() > 160,
        error_head: format::first_line(&err, 160),
        last_error: err,
        status_code: n
            .last_status_code
            .map(|c| c.to_string())
            .unwrap_or_default(),
        created_utc: format::utc(n.created_at),
        created_age: format::age(now, n.created_at),
        when: match n.status {
            DeliveryStatus::Pending => format!("next try {}", format::age(now, n.next_attempt_at)),
            DeliveryStatus::Delivered => n
                .delivered_at
                .map(|t| format!("delivered {}", format::age(now, t)))
                .unwrap_or_default(),
            DeliveryStatus::Dead => "out of attempts".into(),
        },
        dead: n.status == DeliveryStatus::Dead,
    }
}

pub async fn page(
    State(state): State<DashboardState>,
    Extension(session): Extension<Session>,
    Query(q): Query<NotificationsQuery>,
) -> Response {
    let csrf = state.keys.csrf(&session);
    let flash = layout::flash(&state, &session, q.flash.as_deref(), q.fs.as_deref());
    let statuses: Vec<&str> = DeliveryStatus::ALL.iter().map(|s| s.as_str()).collect();
    let (status, error) = match parse_status(&q.status) {
        Ok(s) => (s, String::new()),
        Err(why) => (None, why),
    };
    let rows: Vec<Row> = if error.is_empty() {
        match state.store.notifications(None, status, LIMIT).await {
            Ok(list) => {
                let now = state.store.now();
                list.iter().map(|n| row(n, now)).collect()
            }
            Err(e) => return layout::store_failed(&state, &e),
        }
    } else {
        Vec::new()
    };
    let code = if error.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::BAD_REQUEST
    };
    layout::render(
        &state,
        code,
        "notifications.html",
        context! {
            rows => Value::from(minijinja::value::Serde(&rows)),
            statuses, selected => q.status.trim(), error, flash,
            csrf, signed_in => true, nav => "notifications",
        },
    )
}

pub async fn redeliver(
    State(state): State<DashboardState>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Err(refused) = check_post(&state, &session, &headers, &form.csrf) {
        return refused;
    }
    let actor = session.actor();
    let flash = match state.store.as_operator(&actor).redeliver(&id).await {
        Ok(()) => {
            format!("Delivery {id} is pending again: the notifier sends it with fresh attempts.")
        }
        Err(e) => store_message(&e),
    };
    back_to(&state, &session, "/ui/notifications", &flash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_filter_takes_the_three_or_any() {
        assert_eq!(parse_status(""), Ok(None));
        assert_eq!(parse_status("dead"), Ok(Some(DeliveryStatus::Dead)));
        let e = parse_status("lost").unwrap_err();
        assert!(
            e.contains("lost") && e.contains("pending, delivered or dead"),
            "{e}"
        );
    }

    #[test]
    fn a_long_error_is_collapsed_to_its_first_line() {
        let n = Notification {
            id: 1,
            delivery_id: "d".into(),
            outbox_id: 1,
            run_id: "r".into(),
            url: "https://x.example/secret-path".into(),
            secret_env: "HOOK_SECRET".into(),
            status: DeliveryStatus::Dead,
            attempts: 5,
            max_attempts: 5,
            next_attempt_at: 0,
            claim_token: 0,
            last_error: Some(format!("HTTP 500\n{}", "x".repeat(500))),
            last_status_code: Some(500),
            created_at: 0,
            updated_at: 0,
            delivered_at: None,
        };
        let r = row(&n, 60_000);
        assert!(r.long_error && r.dead);
        assert_eq!(r.error_head, "HTTP 500");
        assert_eq!(r.url, "https://x.example/…");
        assert_eq!(
            (r.attempts.as_str(), r.status_code.as_str()),
            ("5/5", "500")
        );
    }
}
