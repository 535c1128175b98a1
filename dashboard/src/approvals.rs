//! `GET /ui/approvals`: the approvals inbox — every tool call waiting for a decision, oldest
//! first (the store's `pending_approvals`, as `GET /v1/approvals` lists them), with what is
//! decided on ([`Decision`]: the tool, its input as pretty JSON, the run's prompt and the
//! model's text with the call), the run's agent, how long it has waited and when it expires.
//! Each row carries the run page's approve and deny forms, posting to the same
//! `/ui/runs/{id}/approvals/{call}` with `return=approvals`, so the decision goes through
//! the same handler ([`crate::actions::decide`]) and comes back here with its flash. Both
//! ask first: the dialog shows the row's decision, and without JavaScript [`confirm`]
//! answers with a page showing it whole. The list updates live ([`crate::live::lists`]).
//!
//! Everything shown was redacted when it was stored.

use std::collections::HashMap;

use axum::Extension;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::{Value, context};
use nightshift_store::{Approval, ApprovalStatus, Error as StoreError, Millis};
use serde::Serialize;

use crate::auth::Session;
use crate::decision::Decision;
use crate::layout::{self, FlashQuery};
use crate::{DashboardState, format};

/// How many waiting calls the page lists.
pub const LIMIT: i64 = 200;

/// How much of each text (input, prompt, model's text) a row shows; the confirm page shows
/// them whole.
pub const SHOWN: usize = 2_000;

#[derive(Debug, Serialize, PartialEq)]
pub struct Row {
    pub run_id: String,
    pub call_id: String,
    pub tool: String,
    pub agent: String,
    pub waiting_utc: String,
    pub waiting_age: String,
    pub expires: String,
    /// What is decided on, each text cut to [`SHOWN`] characters.
    pub decision: Decision,
}

/// One waiting call, with its run's `agent` and its `decision`, as of `now` (pure).
pub fn row(a: &Approval, agent: &str, decision: &Decision, now: Millis) -> Row {
    Row {
        run_id: a.run_id.clone(),
        call_id: a.call_id.clone(),
        tool: a.tool.clone(),
        agent: agent.to_string(),
        waiting_utc: format::utc(a.requested_at),
        waiting_age: format::age(now, a.requested_at),
        expires: if a.expires_at > now {
            format!("expires {}", format::age(now, a.expires_at))
        } else {
            format!("expired {}", format::age(now, a.expires_at))
        },
        decision: Decision {
            tool: decision.tool.clone(),
            input: format::head(&decision.input, SHOWN),
            prompt: format::head(&decision.prompt, SHOWN),
            model_text: format::head(&decision.model_text, SHOWN),
        },
    }
}

/// What is known of each waiting call, by `(run id, call id)`: its run's agent and its
/// decision. Neither changes while the call waits, so a live list reads each once.
pub type Known = HashMap<(String, String), (String, Decision)>;

/// The waiting calls' rows, reading from the store only what `known` lacks (and forgetting
/// the calls no longer waiting).
pub async fn rows(state: &DashboardState, known: &mut Known) -> Result<Vec<Row>, StoreError> {
    let waiting = state.store.pending_approvals(LIMIT).await?;
    let mut runs: HashMap<String, (nightshift_store::Run, Vec<nightshift_store::Event>)> =
        HashMap::new();
    for a in &waiting {
        let key = (a.run_id.clone(), a.call_id.clone());
        if known.contains_key(&key) {
            continue;
        }
        if !runs.contains_key(&a.run_id) {
            let Some(run) = state.store.run(&a.run_id).await? else {
                continue;
            };
            let events = state.store.events(&a.run_id, 0).await?;
            runs.insert(a.run_id.clone(), (run, events));
        }
        let (run, events) = &runs[&a.run_id];
        known.insert(key, (run.agent.clone(), Decision::of(a, run, events)));
    }
    known.retain(|(run, call), _| {
        waiting
            .iter()
            .any(|a| &a.run_id == run && &a.call_id == call)
    });
    let now = state.store.now();
    Ok(waiting
        .iter()
        .filter_map(|a| {
            let (agent, decision) = known.get(&(a.run_id.clone(), a.call_id.clone()))?;
            Some(row(a, agent, decision, now))
        })
        .collect())
}

/// The context the list (`approvals_list.html`) renders with.
pub fn list_ctx(rows: &[Row], csrf: &str) -> Value {
    context! { rows => Value::from(minijinja::value::Serde(rows)), csrf }
}

pub async fn page(
    State(state): State<DashboardState>,
    Extension(session): Extension<Session>,
    Query(q): Query<FlashQuery>,
) -> Response {
    let rows = match rows(&state, &mut Known::new()).await {
        Ok(rows) => rows,
        Err(e) => return layout::store_failed(&state, &e),
    };
    let csrf = state.keys.csrf(&session);
    let list = list_ctx(&rows, &csrf);
    layout::render(
        &state,
        StatusCode::OK,
        "approvals.html",
        context! {
            flash => layout::flash(&state, &session, q.flash.as_deref(), q.fs.as_deref()),
            signed_in => true, nav => "approvals",
            ..list
        },
    )
}

/// The confirm page of a decision on run `run_id`'s call `call`, showing what is decided on
/// whole; its form posts the same decision again with `confirmed=yes`. A call that is not
/// waiting goes back to `back` saying so, and nothing is changed.
#[allow(clippy::too_many_arguments)]
pub async fn confirm(
    state: &DashboardState,
    session: &Session,
    run_id: &str,
    call: &str,
    approve: bool,
    reason: &str,
    back: &str,
    return_to: &str,
) -> Response {
    let approval = match state.store.approval(run_id, call).await {
        Ok(Some(a)) if a.status == ApprovalStatus::Pending => a,
        Ok(Some(a)) => {
            return crate::actions::back_to(
                state,
                session,
                back,
                &format!(
                    "Call {call} of run {run_id} is not waiting for a decision (it is {}). Nothing was changed.",
                    a.status.as_str()
                ),
            );
        }
        Ok(None) => {
            return crate::actions::back_to(
                state,
                session,
                back,
                &format!(
                    "Run {run_id} has no call {call} waiting for a decision. Nothing was changed."
                ),
            );
        }
        Err(e) => return layout::store_failed(state, &e),
    };
    let run = match state.store.run(run_id).await {
        Ok(Some(run)) => run,
        Ok(None) => {
            return layout::message(
                state,
                StatusCode::NOT_FOUND,
                "No such run",
                &format!("run {run_id} not found"),
            );
        }
        Err(e) => return layout::store_failed(state, &e),
    };
    let events = match state.store.events(run_id, 0).await {
        Ok(events) => events,
        Err(e) => return layout::store_failed(state, &e),
    };
    let decision = Decision::of(&approval, &run, &events);
    let what = if approve {
        format!(
            "Approve call {call} of run {run_id}? The run resumes and calls {} with this input.",
            approval.tool
        )
    } else {
        format!(
            "Deny call {call} of run {run_id}? The model is told it was denied; this cannot be undone."
        )
    };
    layout::render(
        state,
        StatusCode::OK,
        "confirm.html",
        context! {
            action => format!("/ui/runs/{run_id}/approvals/{call}"),
            what, reason, back, return_to,
            decision => if approve { "approve" } else { "deny" },
            yes => if approve { "Yes, approve" } else { "Yes, deny" },
            call => Value::from(minijinja::value::Serde(&decision)),
            csrf => state.keys.csrf(session), signed_in => true,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_shows_the_decision_and_ages() {
        let a = Approval {
            run_id: "r1".into(),
            call_id: "c1".into(),
            tool: "shell".into(),
            input: format!("{{\"cmd\":\"{}\"}}", "x".repeat(400)),
            input_hash: "h".into(),
            status: ApprovalStatus::Pending,
            reason: None,
            requested_at: 0,
            expires_at: 3_600_000,
            decided_at: None,
            decided_by: None,
        };
        let d = Decision {
            tool: "shell".into(),
            input: a.input.clone(),
            prompt: "p".repeat(3_000),
            model_text: "I will run it.".into(),
        };
        let r = row(&a, "helper", &d, 120_000);
        assert_eq!(r.waiting_age, "2m ago");
        assert_eq!(r.expires, "expires in 58m");
        assert_eq!(r.decision.input, a.input, "short texts whole");
        assert_eq!(r.decision.model_text, "I will run it.");
        assert_eq!(
            r.decision.prompt.chars().count(),
            SHOWN + 1,
            "long ones cut, with an ellipsis"
        );
        assert_eq!(row(&a, "helper", &d, 4_000_000).expires, "expired 6m ago");
    }
}
