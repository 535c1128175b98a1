//! `GET /ui/approvals`: the approvals inbox — every tool call waiting for a decision, oldest
//! first (the store's `pending_approvals`, as `GET /v1/approvals` lists them), with the
//! tool, the head of its input, the run's agent, how long it has waited and when it expires.
//! Each row carries the run page's approve and deny forms, posting to the same
//! `/ui/runs/{id}/approvals/{call}` with `return=approvals`, so the decision goes through
//! the same handler ([`crate::actions::decide`]) and comes back here with its flash.
//!
//! The input was redacted when it was stored.

use std::collections::HashMap;

use axum::Extension;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::{Value, context};
use nightshift_store::{Approval, Millis};
use serde::Serialize;

use crate::auth::Session;
use crate::layout::{self, FlashQuery};
use crate::{DashboardState, format};

/// How many waiting calls the page lists.
pub const LIMIT: i64 = 200;

#[derive(Debug, Serialize, PartialEq)]
pub struct Row {
    pub run_id: String,
    pub call_id: String,
    pub tool: String,
    pub input_head: String,
    pub agent: String,
    pub waiting_utc: String,
    pub waiting_age: String,
    pub expires: String,
}

/// One waiting call, with its run's `agent`, as of `now` (pure).
pub fn row(a: &Approval, agent: &str, now: Millis) -> Row {
    Row {
        run_id: a.run_id.clone(),
        call_id: a.call_id.clone(),
        tool: a.tool.clone(),
        input_head: format::head(&a.input, 200),
        agent: agent.to_string(),
        waiting_utc: format::utc(a.requested_at),
        waiting_age: format::age(now, a.requested_at),
        expires: if a.expires_at > now {
            format!("expires {}", format::age(now, a.expires_at))
        } else {
            format!("expired {}", format::age(now, a.expires_at))
        },
    }
}

pub async fn page(
    State(state): State<DashboardState>,
    Extension(session): Extension<Session>,
    Query(q): Query<FlashQuery>,
) -> Response {
    let waiting = match state.store.pending_approvals(LIMIT).await {
        Ok(list) => list,
        Err(e) => return layout::store_failed(&state, &e),
    };
    let mut agents: HashMap<String, String> = HashMap::new();
    for a in &waiting {
        if agents.contains_key(&a.run_id) {
            continue;
        }
        let agent = match state.store.run(&a.run_id).await {
            Ok(run) => run.map(|r| r.agent).unwrap_or_default(),
            Err(e) => return layout::store_failed(&state, &e),
        };
        agents.insert(a.run_id.clone(), agent);
    }
    let now = state.store.now();
    let rows: Vec<Row> = waiting
        .iter()
        .map(|a| row(a, agents.get(&a.run_id).map_or("", String::as_str), now))
        .collect();
    layout::render(
        &state,
        StatusCode::OK,
        "approvals.html",
        context! {
            rows => Value::from(minijinja::value::Serde(&rows)),
            flash => layout::flash(&state, &session, q.flash.as_deref(), q.fs.as_deref()),
            csrf => state.keys.csrf(&session), signed_in => true, nav => "approvals",
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use nightshift_store::ApprovalStatus;

    #[test]
    fn a_row_shows_the_input_head_and_ages() {
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
        };
        let r = row(&a, "helper", 120_000);
        assert_eq!(r.waiting_age, "2m ago");
        assert_eq!(r.expires, "expires in 58m");
        assert_eq!(
            r.input_head.chars().count(),
            201,
            "200 characters and an ellipsis"
        );
        assert_eq!(row(&a, "helper", 4_000_000).expires, "expired 6m ago");
    }
}
