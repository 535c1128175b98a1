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
//! A waiting call's decision is read without reading its run's whole log ([`decision_of`]:
//! the call's request and the few model messages before it), so a run of thousands of events
//! costs the page no more than a short one; the confirm page reads it the same way.
//!
//! Everything shown was redacted when it was stored.

use std::collections::HashMap;

use axum::Extension;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use minijinja::{Value, context};
use nightshift_store::{Approval, ApprovalStatus, Error as StoreError, Millis, Run, Store};
use serde::Serialize;

use crate::auth::Session;
use crate::decision::{self, APPROVAL_REQUESTED, ASSISTANT_MESSAGE, Decision};
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

/// How many of a run's newest approval requests are looked through for a call's.
const REQUESTS_READ: i64 = 16;

/// How many of the model's messages before a call's request are read for its text.
const MESSAGES_READ: i64 = 4;

/// What is decided on for waiting call `a` of `run`, reading from the run's log only what
/// that needs, however long the log: the call's `approval_requested` event (among the run's
/// newest [`REQUESTS_READ`]) and the newest [`MESSAGES_READ`] assistant messages before it
/// (before the end of the log when the request is not logged yet). A waiting call's run is
/// parked on it, so the message that made the call is the newest before its request.
pub async fn decision_of(store: &Store, a: &Approval, run: &Run) -> Result<Decision, StoreError> {
    let requests = store
        .newest_events_of_type(&a.run_id, APPROVAL_REQUESTED, i64::MAX, REQUESTS_READ)
        .await?;
    let request = requests
        .into_iter()
        .find(|e| decision::requests_call(e, &a.call_id));
    let before = request.as_ref().map_or(i64::MAX, |e| e.seq);
    let mut events = store
        .newest_events_of_type(&a.run_id, ASSISTANT_MESSAGE, before, MESSAGES_READ)
        .await?;
    events.reverse();
    events.extend(request);
    Ok(Decision::of(a, run, &events))
}

/// The waiting calls' rows, reading from the store only what `known` lacks (and forgetting
/// the calls no longer waiting).
pub async fn rows(state: &DashboardState, known: &mut Known) -> Result<Vec<Row>, StoreError> {
    let waiting = state.store.pending_approvals(LIMIT).await?;
    let mut runs: HashMap<String, Run> = HashMap::new();
    for a in &waiting {
        let key = (a.run_id.clone(), a.call_id.clone());
        if known.contains_key(&key) {
            continue;
        }
        if !runs.contains_key(&a.run_id) {
            let Some(run) = state.store.run(&a.run_id).await? else {
                continue;
            };
            runs.insert(a.run_id.clone(), run);
        }
        let run = &runs[&a.run_id];
        let decision = decision_of(&state.store, a, run).await?;
        known.insert(key, (run.agent.clone(), decision));
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
    let decision = match decision_of(&state.store, &approval, &run).await {
        Ok(decision) => decision,
        Err(e) => return layout::store_failed(state, &e),
    };
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

    mod long_log {
        use std::sync::Arc;
        use std::time::Duration;

        use nightshift_agent::events::RunEvent;
        use nightshift_llm::{ContentBlock, Message, Role, StopReason, Usage};
        use nightshift_store::{NewApproval, NewRun, StoreConfig, Synchronous, SystemClock};

        use super::super::*;

        /// An assistant message saying `words`, making call `call` to `deploy` when given.
        fn said(words: &str, call: Option<&str>) -> RunEvent {
            let mut content = vec![ContentBlock::Text { text: words.into() }];
            content.extend(call.map(|id| ContentBlock::ToolUse {
                id: id.into(),
                name: "deploy".into(),
                input: serde_json::json!({"version": id}),
                unparsed: None,
            }));
            RunEvent::AssistantMessage {
                message: Message {
                    role: Role::Assistant,
                    content,
                },
                stop_reason: StopReason::ToolUse,
                usage: Usage::default(),
                model: "m".into(),
                cost_usd: 0.0,
                latency_ms: None,
                retries: 0,
            }
        }

        fn requested(call: &str) -> RunEvent {
            RunEvent::ApprovalRequested {
                call_id: call.into(),
                name: "deploy".into(),
                input_hash: "h".into(),
                expires_at: i64::MAX,
            }
        }

        /// Stores call `call`'s approval row, as the loop does before logging its request.
        async fn ask(store: &Store, run_id: &str, call: &str) {
            let input = format!("{{\"version\":\"{call}\"}}");
            store
                .request_approval(&NewApproval {
                    run_id,
                    call_id: call,
                    tool: "deploy",
                    input: &input,
                    input_hash: "h",
                    expires_at: i64::MAX,
                })
                .await
                .unwrap();
        }

        /// Call `c1` made, requested and approved; 500 model turns of work (2,000 events);
        /// then call `c2` made.
        fn log() -> Vec<RunEvent> {
            let mut events = vec![
                said("Deploying v2 first.", Some("c1")),
                requested("c1"),
                RunEvent::ApprovalDecided {
                    call_id: "c1".into(),
                    approved: true,
                    reason: None,
                    by: "operator".into(),
                },
            ];
            for i in 0..500 {
                events.push(said(&format!("Reading part {i}."), None));
                for _ in 0..3 {
                    events.push(RunEvent::ToolResult {
                        call_id: format!("read-{i}"),
                        content: "x".repeat(200),
                        is_error: false,
                        interrupted: false,
                    });
                }
            }
            events.push(said("Now shipping v3.", Some("c2")));
            events
        }

        /// What is decided on for `call`, read as the inbox reads it; checked against what
        /// the whole log says.
        async fn decided(store: &Store, run: &Run, call: &str) -> Decision {
            let a = store.approval(&run.id, call).await.unwrap().unwrap();
            let read = decision_of(store, &a, run).await.unwrap();
            let whole = Decision::of(&a, run, &store.events(&run.id, 0).await.unwrap());
            assert_eq!(read, whole, "{call}: what the whole log says");
            read
        }

        /// A run's log as the loop leaves it, long, with each call made by a message with
        /// words of its own: what is decided on comes from the few events read, and is what
        /// the whole log says, before and after the waiting call's request is logged.
        #[tokio::test]
        async fn a_long_log_gives_each_call_the_message_that_made_it() {
            let dir = tempfile::tempdir().unwrap();
            let mut config =
                StoreConfig::for_url(format!("sqlite://{}", dir.path().join("d.db").display()));
            config.synchronous = Synchronous::Normal;
            let store = Store::connect(&config, Arc::new(SystemClock))
                .await
                .unwrap();
            store.migrate().await.unwrap();
            let new = NewRun::new("helper", "Ship v3.");
            let run_id = store.enqueue(&new).await.unwrap().run_id;
            let lease = store
                .claim("w", None, 1, Duration::from_secs(600))
                .await
                .unwrap()
                .pop()
                .unwrap();
            ask(&store, &run_id, "c1").await;
            for e in log() {
                lease.append_event(e.kind(), &e.payload()).await.unwrap();
            }
            let run = store.run(&run_id).await.unwrap().unwrap();
            // The waiting call's row is stored before its request is logged.
            ask(&store, &run_id, "c2").await;
            let c2 = decided(&store, &run, "c2").await;
            assert_eq!(c2.model_text, "Now shipping v3.");
            let request = requested("c2");
            lease
                .append_event(request.kind(), &request.payload())
                .await
                .unwrap();
            let c2 = decided(&store, &run, "c2").await;
            assert_eq!(
                (c2.model_text.as_str(), c2.prompt.as_str()),
                ("Now shipping v3.", "Ship v3.")
            );
            assert_eq!(c2.input, "{\n  \"version\": \"c2\"\n}");
            assert_eq!(
                decided(&store, &run, "c1").await.model_text,
                "Deploying v2 first.",
                "an earlier call: the message before its own request"
            );
            store.close().await;
        }
    }
}
