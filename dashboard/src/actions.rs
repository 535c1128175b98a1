//! The actions on a run, as POST forms with the session's CSRF token, each through the same
//! store call as the API's handler (`cancel_run`, `wake_now`, `decide_approval`). After an
//! action: 303 back to the run page with a flash message; a store error is shown as the
//! same readable message the API gives. Cancel and deny cannot be undone: without
//! `confirmed=yes` (sent by the `<dialog>` app.js opens) they answer with a confirm page.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Form};
use minijinja::context;
use nightshift_store::{CancelOutcome, Error as StoreError};

use crate::DashboardState;
use crate::auth::Session;
use crate::layout::{self, CsrfForm, check_post};

/// The flash message of a store error, as the API words it (pure).
pub fn store_message(e: &StoreError) -> String {
    match e {
        StoreError::NotFound { .. } => e.to_string(),
        StoreError::Conflict(m) | StoreError::Invalid(m) => m.clone(),
        e if e.is_transient() => format!("the store is busy, try again: {e}"),
        e => format!("the store failed: {e}"),
    }
}

/// 303 back to the run page with `flash`, signed for this session so only the dashboard's
/// own words are shown there.
fn back(state: &DashboardState, session: &Session, id: &str, flash: &str) -> Response {
    let enc: String = flash
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let mac = state.keys.flash_mac(session, flash);
    (
        StatusCode::SEE_OTHER,
        [(
            header::LOCATION,
            format!("/ui/runs/{id}?flash={enc}&fs={mac}"),
        )],
    )
        .into_response()
}

fn confirm(
    state: &DashboardState,
    session: &Session,
    action: &str,
    what: &str,
    reason: &str,
) -> Response {
    layout::render(
        state,
        StatusCode::OK,
        "confirm.html",
        context! { action, what, reason, csrf => state.keys.csrf(session), signed_in => true },
    )
}

/// The no-JS confirm page (`GET /ui/confirm` is only reached by links; forms post).
pub async fn confirm_page(State(state): State<DashboardState>) -> Response {
    layout::message(
        &state,
        StatusCode::OK,
        "Confirm",
        "Use the buttons on the run page.",
    )
}

pub async fn cancel(
    State(state): State<DashboardState>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Err(refused) = check_post(&state, &session, &headers, &form.csrf) {
        return refused;
    }
    if form.confirmed.as_deref() != Some("yes") {
        return confirm(
            &state,
            &session,
            &format!("/ui/runs/{id}/cancel"),
            &format!("Cancel run {id}? This cannot be undone."),
            "",
        );
    }
    match state.store.cancel_run(&id).await {
        Ok(CancelOutcome::Cancelled) => back(&state, &session, &id, "Run cancelled."),
        Ok(CancelOutcome::Requested) => back(
            &state,
            &session,
            &id,
            "Cancel requested: the worker stops at its next heartbeat.",
        ),
        Err(e) => back(&state, &session, &id, &store_message(&e)),
    }
}

pub async fn wake(
    State(state): State<DashboardState>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Err(refused) = check_post(&state, &session, &headers, &form.csrf) {
        return refused;
    }
    match state.store.wake_now(&id).await {
        Ok(()) => back(
            &state,
            &session,
            &id,
            "Woken: the run resumes on the next free worker.",
        ),
        Err(e) => back(&state, &session, &id, &store_message(&e)),
    }
}

#[derive(Debug, serde::Deserialize)]
pub struct DecideForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    decision: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    confirmed: Option<String>,
}

pub async fn decide(
    State(state): State<DashboardState>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
    Path((id, call)): Path<(String, String)>,
    Form(form): Form<DecideForm>,
) -> Response {
    if let Err(refused) = check_post(&state, &session, &headers, &form.csrf) {
        return refused;
    }
    let approve = match form.decision.as_str() {
        "approve" => true,
        "deny" => false,
        other => {
            return layout::message(
                &state,
                StatusCode::UNPROCESSABLE_ENTITY,
                "Refused",
                &format!(
                    "decision '{other}' is not allowed; use approve or deny. Nothing was changed."
                ),
            );
        }
    };
    let reason = form
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty());
    if !approve && form.confirmed.as_deref() != Some("yes") {
        return confirm(
            &state,
            &session,
            &format!("/ui/runs/{id}/approvals/{call}"),
            &format!("Deny call {call}? The model is told it was denied; this cannot be undone."),
            reason.unwrap_or(""),
        );
    }
    match state
        .store
        .decide_approval(&id, &call, approve, reason)
        .await
    {
        Ok(()) => back(
            &state,
            &session,
            &id,
            if approve {
                "Approved: the run resumes."
            } else {
                "Denied: the run resumes without the call."
            },
        ),
        Err(e) => back(&state, &session, &id, &store_message(&e)),
    }
}
