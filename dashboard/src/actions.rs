//! The actions on a run, as POST forms with the session's CSRF token, each through the same
//! store call as the API's handler (`cancel_run`, `wake_now`, `decide_approval`, `fork_run`). After an
//! action: 303 back to the page it came from with a flash message ([`back_to`], which the
//! other pages' actions use too); a store error is shown as the same readable message the
//! API gives. Cancel and deny cannot be undone and approve runs a side effect: without
//! `confirmed=yes` (sent by the `<dialog>` app.js opens) they answer with a confirm page
//! whose "No, go back" links to that page — a decision's shows the call, the prompt and the
//! model's text ([`crate::approvals::confirm`]). A decision made from the approvals inbox
//! (`return=approvals`) goes back there; only the known pages are allowed
//! ([`decide_return`]), never a URL from the form. Every action that took effect is recorded
//! in the audit trail as the session's signer, in the action's own transaction
//! (`Store::as_operator`); a read-only session acts on nothing ([`crate::layout::check_post`]).

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

/// `text` percent-encoded for a query value (pure).
pub fn query_value(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// 303 to the dashboard page `path` (a `/ui/…` path the caller built, never one from the
/// request) with `flash`, signed for this session so only the dashboard's own words are
/// shown there.
pub fn back_to(state: &DashboardState, session: &Session, path: &str, flash: &str) -> Response {
    debug_assert!(path.starts_with("/ui/"), "a dashboard path: {path}");
    let sep = if path.contains('?') { '&' } else { '?' };
    let mac = state.keys.flash_mac(session, flash);
    (
        StatusCode::SEE_OTHER,
        [(
            header::LOCATION,
            format!("{path}{sep}flash={}&fs={mac}", query_value(flash)),
        )],
    )
        .into_response()
}

/// 303 back to the run page of `id` with `flash`.
fn back(state: &DashboardState, session: &Session, id: &str, flash: &str) -> Response {
    back_to(state, session, &format!("/ui/runs/{id}"), flash)
}

/// Where a decision on run `id`'s call goes back to: its run page (no `return`, or
/// `return=run`) or the approvals inbox (`return=approvals`); anything else is refused with
/// what is allowed (pure).
pub fn decide_return(given: Option<&str>, id: &str) -> Result<String, NotAReturnPage> {
    match given.map(str::trim).unwrap_or("") {
        "" | "run" => Ok(format!("/ui/runs/{id}")),
        "approvals" => Ok("/ui/approvals".to_string()),
        other => Err(NotAReturnPage(other.to_string())),
    }
}

/// A decision form's `return` that names no page it may go back to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "return '{0}' is not a page this form can go back to; use run or approvals. Nothing was changed."
)]
pub struct NotAReturnPage(pub String);

/// The confirm page of an irreversible action: `what` it does, a form re-posting to
/// `action` with `confirmed=yes`, and "No, go back" linking to `back`.
fn confirm(
    state: &DashboardState,
    session: &Session,
    action: &str,
    what: &str,
    reason: &str,
    back: &str,
    return_to: &str,
) -> Response {
    layout::render(
        state,
        StatusCode::OK,
        "confirm.html",
        context! { action, what, reason, back, return_to, csrf => state.keys.csrf(session), signed_in => true },
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
            &format!("/ui/runs/{id}"),
            "",
        );
    }
    let actor = session.actor();
    match state.store.as_operator(&actor).cancel_run(&id).await {
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

#[derive(Debug, serde::Deserialize)]
pub struct ForkForm {
    #[serde(default)]
    csrf: String,
    from_turn: u64,
    #[serde(default)]
    prompt: Option<String>,
}

/// A fork from a model turn (`from_turn`, with an optional prompt), or a rerun (`from_turn`
/// 0): on success, 303 to the new run's page; a refusal back to this one with the reason.
pub async fn fork(
    State(state): State<DashboardState>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ForkForm>,
) -> Response {
    if let Err(refused) = check_post(&state, &session, &headers, &form.csrf) {
        return refused;
    }
    let req = nightshift_agent::fork::ForkRequest {
        from_turn: form.from_turn,
        prompt: form.prompt.filter(|p| !p.trim().is_empty()),
        ..Default::default()
    };
    let actor = session.actor();
    let op = state.store.as_operator(&actor);
    let guard = match &state.fork_guard {
        Some(source) => source(),
        None => Err("this server does not fork runs (it runs without a config)".into()),
    };
    let guard = match guard {
        Ok(guard) => guard,
        Err(e) => return back(&state, &session, &id, &format!("Not forked: {e}")),
    };
    let trigger = nightshift_store::Trigger::Api;
    match nightshift_agent::fork::fork_run(&op, &id, &req, trigger, &guard).await {
        Ok(made) => back(
            &state,
            &session,
            &made.run_id,
            &format!("Forked from run {id} at turn {}.", req.from_turn),
        ),
        Err(e) => back(&state, &session, &id, &format!("Not forked: {e}")),
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
    let actor = session.actor();
    match state.store.as_operator(&actor).wake_now(&id).await {
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
    /// The page to go back to: `run` (default) or `approvals`.
    #[serde(default, rename = "return")]
    return_to: Option<String>,
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
    let back_path = match decide_return(form.return_to.as_deref(), &id) {
        Ok(p) => p,
        Err(why) => {
            return layout::message(
                &state,
                StatusCode::UNPROCESSABLE_ENTITY,
                "Refused",
                &why.to_string(),
            );
        }
    };
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
    if form.confirmed.as_deref() != Some("yes") {
        return crate::approvals::confirm(
            &state,
            &session,
            &id,
            &call,
            approve,
            reason.unwrap_or(""),
            &back_path,
            form.return_to.as_deref().map(str::trim).unwrap_or(""),
        )
        .await;
    }
    let actor = session.actor();
    let flash = match state
        .store
        .as_operator(&actor)
        .decide_approval(&id, &call, approve, reason)
        .await
    {
        Ok(()) if approve => format!("Approved call {call} of run {id}: the run resumes."),
        Ok(()) => format!("Denied call {call} of run {id}: the run resumes without the call."),
        Err(e) => store_message(&e),
    };
    back_to(&state, &session, &back_path, &flash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_goes_back_only_to_a_known_page() {
        assert_eq!(decide_return(None, "r1").unwrap(), "/ui/runs/r1");
        assert_eq!(decide_return(Some("run"), "r1").unwrap(), "/ui/runs/r1");
        assert_eq!(
            decide_return(Some("approvals"), "r1").unwrap(),
            "/ui/approvals"
        );
        let refused = decide_return(Some("https://evil.example/"), "r1")
            .unwrap_err()
            .to_string();
        assert!(
            refused
                == "return 'https://evil.example/' is not a page this form can go back to; use \
                    run or approvals. Nothing was changed.",
            "{refused}"
        );
        assert!(decide_return(Some("/ui/runs"), "r1").is_err());
    }

    #[test]
    fn flash_text_is_encoded_for_a_query() {
        assert_eq!(
            query_value("enqueued run a-1_b.c~"),
            "enqueued%20run%20a-1_b.c~"
        );
        assert_eq!(query_value("a&b=c?é"), "a%26b%3Dc%3F%C3%A9");
    }
}
