//! Forks and reruns: a new run that goes on from another run's state after some of its model
//! calls, with the changes an operator asks for.
//!
//! `from_turn` counts model calls: a fork from turn `n` shares the parent's history up to just
//! before its call number `n` (counted from 0) — every tool round of the calls before, with
//! their recorded results — and makes that call itself. Turn 0 is a rerun: the same start
//! and prompt, every call made again (with a `prompt`, a rerun with another input). A fork
//! from the parent's last turn count goes on after its end and needs a `prompt`.
//!
//! What it guarantees:
//! - **No side effect twice.** The shared history ends where every call it holds has its
//!   result ([`plan`] refuses a point where a call lacks one), so nothing at or before the fork
//!   point runs again: the fork reads the recorded results.
//! - **The same request.** Without changes, the fork's state is the parent's state before
//!   that call (the same events folded), so its first request is byte for byte the parent's,
//!   and the provider's prompt cache holds.
//! - **Refused, not guessed.** A turn past the parent's calls, a replaced result of a call
//!   the conversation does not hold, an empty prompt or model: a [`ForkError::Invalid`] that
//!   says what to ask instead, and nothing is written. [`plan`] folds the fork's first event
//!   into the parent's state before anything is stored, so a fork the fold would refuse is
//!   never made.

use std::collections::BTreeMap;

use crate::events::RunEvent;
use crate::state::RunState;
use nightshift_store::{AsOperator, Enqueued, Error as StoreError, NewFork, NewRun, Trigger};

mod guard;

pub use guard::ForkGuard;

/// What an operator asks a fork to be.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// Model calls of the parent the fork keeps (0: a rerun).
    pub from_turn: u64,
    /// A user message appended at the fork point (at turn 0, the fork's prompt instead of
    /// the parent's).
    #[serde(default)]
    pub prompt: Option<String>,
    /// The model that answers the fork (a model of the agent's provider).
    #[serde(default)]
    pub model: Option<String>,
    /// Recorded tool results to replace, by call id.
    #[serde(default)]
    pub tool_results: BTreeMap<String, String>,
    /// A second fork with the same key returns the first and makes nothing.
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

impl ForkRequest {
    /// A rerun: from turn 0, as it was.
    pub fn rerun() -> Self {
        Self::default()
    }
}

/// Why a fork was not made.
#[derive(Debug, thiserror::Error)]
pub enum ForkError {
    /// The parent is not there, or its history was purged.
    #[error("{0}")]
    NotFound(String),
    /// The request cannot be a fork of this run; the message says why and what to ask.
    #[error("{0}")]
    Invalid(String),
    /// The store failed.
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for ForkError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound { what, id } => ForkError::NotFound(format!(
                "{what} {id} not found: a run whose history was purged cannot be forked"
            )),
            StoreError::Invalid(m) => ForkError::Invalid(m),
            e => ForkError::Store(e),
        }
    }
}

/// A planned fork: where it branches off and its first event.
#[derive(Debug, Clone, PartialEq)]
pub struct ForkPlan {
    /// The last of the parent's events the fork shares.
    pub fork_seq: i64,
    /// The fork's first own event (`forked`).
    pub event: RunEvent,
    /// The fork's input when it is not the parent's: the prompt of a fork from turn 0.
    pub prompt: Option<String>,
}

/// Plans a fork of the run whose log is `events` (each with its seq, in order): where the
/// shared history ends and the `forked` event that follows it, checked by folding both.
pub fn plan(
    parent: &str,
    events: &[(i64, RunEvent)],
    req: &ForkRequest,
) -> Result<ForkPlan, ForkError> {
    for (what, value) in [("prompt", &req.prompt), ("model", &req.model)] {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return Err(ForkError::Invalid(format!(
                "the fork's {what} is empty: leave it out to keep the parent's"
            )));
        }
    }
    if let Some(model) = &req.model {
        let odd = model.chars().any(|c| c.is_whitespace() || c == '/');
        if odd || model.len() > 200 {
            return Err(ForkError::Invalid(format!(
                "the fork's model '{model}' is not a model name of the agent's provider (as the \
                 agent's `model` key names one: no provider prefix, no spaces)"
            )));
        }
    }
    let fork_seq = fork_point(events, req)?;
    let mut state = RunState::default();
    for (seq, event) in events.iter().take_while(|(seq, _)| *seq <= fork_seq) {
        state
            .apply(*seq, event)
            .map_err(|e| ForkError::Invalid(format!("run {parent}'s log does not fold: {e}")))?;
    }
    if !state.pending.is_empty() {
        let open: Vec<&str> = state.pending.iter().map(|p| p.call_id.as_str()).collect();
        return Err(ForkError::Invalid(format!(
            "turn {} ends in a tool round that never finished (calls {} lack results): fork \
             from an earlier turn",
            req.from_turn,
            open.join(", ")
        )));
    }
    // A fork works on its parent's commit, also when it shares less than the checkout.
    let workspace_commit = match &state.workspace_commit {
        Some(_) => None,
        None => events.iter().find_map(|(_, e)| match e {
            RunEvent::WorkspacePrepared { commit, .. } => Some(commit.clone()),
            RunEvent::Forked {
                workspace_commit, ..
            } => workspace_commit.clone(),
            _ => None,
        }),
    };
    let event = RunEvent::Forked {
        parent: parent.to_string(),
        from_turn: req.from_turn,
        prompt: req.prompt.clone(),
        model: req.model.clone(),
        tool_results: req.tool_results.clone(),
        workspace_commit,
    };
    state.apply(fork_seq + 1, &event).map_err(|e| {
        ForkError::Invalid(format!(
            "{e}: replace only results the conversation at turn {} holds",
            req.from_turn
        ))
    })?;
    Ok(ForkPlan {
        fork_seq,
        event,
        prompt: req.prompt.clone().filter(|_| req.from_turn == 0),
    })
}

/// Whether `event` puts something in the conversation.
fn adds_to_conversation(event: &RunEvent) -> bool {
    match event {
        RunEvent::Forked { prompt, .. } => prompt.is_some(),
        RunEvent::UserMessage { .. }
        | RunEvent::AssistantMessage { .. }
        | RunEvent::MessageReceived { .. }
        | RunEvent::Resumed { .. }
        | RunEvent::TaskEnded { .. } => true,
        _ => false,
    }
}

/// The seq of the last event the fork shares.
fn fork_point(events: &[(i64, RunEvent)], req: &ForkRequest) -> Result<i64, ForkError> {
    let before = |i: usize| if i == 0 { 0 } else { events[i - 1].0 };
    if req.from_turn == 0 && req.prompt.is_some() {
        // Another input: the run's start, before anything joined its conversation (its
        // prompt, or a fork's prompt).
        return match events.iter().position(|(_, e)| adds_to_conversation(e)) {
            Some(i) => Ok(before(i)),
            None => Err(ForkError::Invalid(
                "the run has not begun (no prompt in its log): start a new run instead".into(),
            )),
        };
    }
    let mut calls = 0u64;
    for (i, (_, event)) in events.iter().enumerate() {
        if let RunEvent::AssistantMessage { .. } = event {
            if calls == req.from_turn {
                return Ok(before(i));
            }
            calls += 1;
        }
    }
    if req.from_turn > calls {
        return Err(ForkError::Invalid(format!(
            "the run made {calls} model call(s): fork from turn 0 to {}, or from {calls} with a \
             prompt to go on after its last call",
            calls.saturating_sub(1)
        )));
    }
    if req.prompt.is_none() {
        return Err(ForkError::Invalid(format!(
            "from turn {calls} (after the run's last call) a fork needs a prompt to go on with; \
             to run a call again, fork from turn {}",
            calls.saturating_sub(1)
        )));
    }
    // After the last call: everything but the run's end.
    let end = events
        .iter()
        .position(|(_, e)| matches!(e, RunEvent::Finished { .. }))
        .unwrap_or(events.len());
    Ok(before(end))
}

/// Forks run `parent_id` as `op` asks (`trigger`: how the request came), returning the new
/// run (or, for a used idempotency key, the first). `guard` checks the run's agent and the
/// fork's model against the config; the fork's event (its prompt, replaced results) is
/// stored redacted with its redactor, as every event is.
pub async fn fork_run(
    op: &AsOperator<'_>,
    parent_id: &str,
    req: &ForkRequest,
    trigger: Trigger,
    guard: &ForkGuard,
) -> Result<Enqueued, ForkError> {
    let store = op.store();
    let Some(parent) = store.run(parent_id).await? else {
        return Err(ForkError::NotFound(format!("run {parent_id} not found")));
    };
    if parent.purged_at.is_some() {
        return Err(ForkError::NotFound(format!(
            "run {parent_id}'s history was purged by retention: it cannot be forked"
        )));
    }
    guard.check(&parent.agent, req.model.as_deref())?;
    let redactor = guard.redactor();
    let mut events = Vec::new();
    for stored in store.events(parent_id, 0).await? {
        let event = RunEvent::parse(&stored.event_type, &stored.payload).map_err(|e| {
            ForkError::Invalid(format!("run {parent_id}, event {}: {e}", stored.seq))
        })?;
        events.push((stored.seq, event));
    }
    let never_called = !events
        .iter()
        .any(|(_, e)| matches!(e, RunEvent::AssistantMessage { .. }));
    let rerun_of_input;
    let req = if req.from_turn == 0 && req.prompt.is_none() && never_called {
        // A run that failed before its first call is rerun from its start, its input again.
        rerun_of_input = ForkRequest {
            prompt: Some(parent.input.clone()),
            ..req.clone()
        };
        &rerun_of_input
    } else {
        req
    };
    let plan = plan(parent_id, &events, req)?;
    let event = crate::runtime::redact::event(redactor, plan.event)
        .map_err(|e| ForkError::Invalid(format!("the fork's event cannot be redacted: {e}")))?;
    let input = plan
        .prompt
        .map(|p| redactor.redact(&p))
        .unwrap_or_else(|| parent.input.clone());
    let mut run = NewRun::new(&parent.agent, &input);
    run.trigger = trigger;
    run.idempotency_key = req.idempotency_key.clone();
    run.context = parent.context.clone();
    // One at a time with the runs of its parent's key (a pull request's, say), whatever the
    // parent's policy: a fork never supersedes or skips another run.
    run.concurrency_key = parent.concurrency_key.clone();
    let fork = NewFork {
        parent: parent_id.to_string(),
        fork_seq: plan.fork_seq,
        run,
        event_type: event.kind().to_string(),
        event_payload: event.payload(),
    };
    Ok(op.fork_run(&fork).await?)
}

/// The most runs one bulk rerun takes.
pub const MOST_RERUNS: usize = 1000;

/// What a bulk rerun did with one run it matched.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Rerun {
    /// A rerun was started: `run_id` is the new run.
    Started { parent: String, run_id: String },
    /// The run was rerun by an earlier bulk rerun: `run_id` is that rerun (nothing new).
    AlreadyRerun { parent: String, run_id: String },
    /// A dry run: this run would be rerun.
    WouldRerun { parent: String },
    /// This run cannot be rerun; `error` says why (the others still are).
    Refused { parent: String, error: String },
}

/// Reruns (from turn 0, as they were) the ended runs `filter` matches, newest first, at most
/// `limit` (1 to [`MOST_RERUNS`]); with `dry_run`, only says which. Each rerun's idempotency
/// key is `rerun:<parent id>`, so a bulk rerun repeated reruns each run once. The filter must
/// name an end state (`failed`, `cancelled`, …): a bulk rerun never touches live runs.
pub async fn rerun_matching(
    op: &AsOperator<'_>,
    filter: &nightshift_store::RunFilter,
    limit: usize,
    dry_run: bool,
    trigger: Trigger,
    guard: &ForkGuard,
) -> Result<Vec<Rerun>, ForkError> {
    match filter.status {
        Some(s) if s.is_terminal() => {}
        _ => {
            return Err(ForkError::Invalid(
                "a bulk rerun needs a status that is an end state (failed, cancelled, \
                 succeeded, budget_exhausted, max_rounds, superseded): it never touches live runs"
                    .into(),
            ));
        }
    }
    if !(1..=MOST_RERUNS).contains(&limit) {
        return Err(ForkError::Invalid(format!(
            "limit {limit} is out of range: rerun 1 to {MOST_RERUNS} runs at a time"
        )));
    }
    let mut matched = Vec::new();
    let mut cursor: Option<String> = None;
    while matched.len() < limit {
        let page = op.store().runs_page(filter, cursor.as_deref(), 200).await?;
        matched.extend(page.runs.into_iter().map(|r| r.id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    matched.truncate(limit);
    let mut out = Vec::with_capacity(matched.len());
    for parent in matched {
        out.push(rerun_one(op, parent, dry_run, trigger, guard).await?);
    }
    Ok(out)
}

/// What a bulk rerun does with one run: the key is looked up first (a repeated pass reads no
/// log), a run that cannot be rerun is reported in its place; only the store failing stops the
/// whole rerun.
async fn rerun_one(
    op: &AsOperator<'_>,
    parent: String,
    dry_run: bool,
    trigger: Trigger,
    guard: &ForkGuard,
) -> Result<Rerun, ForkError> {
    let key = format!("rerun:{parent}");
    if let Some(run_id) = op.store().run_with_key(&key).await? {
        return Ok(Rerun::AlreadyRerun { parent, run_id });
    }
    if dry_run {
        let run = op.store().run(&parent).await?;
        let refused = match run {
            Some(r) if r.purged_at.is_none() => guard.check(&r.agent, None).err(),
            _ => Some(ForkError::NotFound(
                "its history was purged by retention: it cannot be rerun".into(),
            )),
        };
        return Ok(match refused {
            Some(e) => Rerun::Refused {
                parent,
                error: e.to_string(),
            },
            None => Rerun::WouldRerun { parent },
        });
    }
    let req = ForkRequest {
        idempotency_key: Some(key),
        ..ForkRequest::rerun()
    };
    Ok(match fork_run(op, &parent, &req, trigger, guard).await {
        Ok(e) if e.duplicate => Rerun::AlreadyRerun {
            parent,
            run_id: e.run_id,
        },
        Ok(e) => Rerun::Started {
            parent,
            run_id: e.run_id,
        },
        Err(ForkError::Store(e)) if !matches!(e, StoreError::Corrupt(_)) => {
            return Err(ForkError::Store(e));
        }
        Err(e) => Rerun::Refused {
            parent,
            error: e.to_string(),
        },
    })
}

#[cfg(test)]
mod tests {
    use nightshift_llm::{ContentBlock, Message, Role, StopReason, Usage};

    use super::*;

    fn reply(text: &str) -> RunEvent {
        RunEvent::AssistantMessage {
            message: Message {
                role: Role::Assistant,
                content: vec![ContentBlock::Text { text: text.into() }],
            },
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
            model: "m".into(),
            cost_usd: 0.0,
            latency_ms: None,
            retries: 0,
        }
    }

    fn log(events: Vec<RunEvent>) -> Vec<(i64, RunEvent)> {
        (1..).zip(events).collect()
    }

    fn started() -> RunEvent {
        RunEvent::RunStarted {
            agent: "a".into(),
            agent_hash: "h".into(),
        }
    }

    #[test]
    fn a_new_input_at_turn_0_shares_the_start_and_keeps_the_parents_commit() {
        let parent = log(vec![
            started(),
            RunEvent::UserMessage {
                message: Message::user_text("first"),
            },
            RunEvent::WorkspacePrepared {
                repo: "r".into(),
                git_ref: "main".into(),
                commit: "c0ffee".into(),
                setup: Vec::new(),
            },
            reply("done"),
        ]);
        let req = ForkRequest {
            prompt: Some("second".into()),
            ..Default::default()
        };
        let p = plan("p", &parent, &req).unwrap();
        assert_eq!(p.fork_seq, 1, "only the start is shared");
        assert_eq!(p.prompt.as_deref(), Some("second"), "the fork's input");
        let RunEvent::Forked {
            workspace_commit, ..
        } = &p.event
        else {
            panic!("{:?}", p.event)
        };
        assert_eq!(workspace_commit.as_deref(), Some("c0ffee"));
        // From turn 1 the checkout is shared: nothing to carry, and the input stays.
        let later = ForkRequest {
            from_turn: 1,
            prompt: Some("and then?".into()),
            ..Default::default()
        };
        let p = plan("p", &parent, &later).unwrap();
        assert!(matches!(
            &p.event,
            RunEvent::Forked {
                workspace_commit: None,
                ..
            }
        ));
        assert_eq!(
            p.prompt, None,
            "a prompt added later is not the run's input"
        );
    }

    #[test]
    fn a_fork_whose_prompt_is_in_its_forked_event_can_be_given_a_new_input() {
        // A rerun of a run that never called: the start, then the `forked` with the input.
        let fork = log(vec![
            started(),
            RunEvent::Forked {
                parent: "p".into(),
                from_turn: 0,
                prompt: Some("the input".into()),
                model: None,
                tool_results: BTreeMap::new(),
                workspace_commit: None,
            },
        ]);
        let req = ForkRequest {
            prompt: Some("another input".into()),
            ..Default::default()
        };
        assert_eq!(plan("f", &fork, &req).unwrap().fork_seq, 1);
    }

    #[test]
    fn a_model_is_a_name_of_the_agents_provider() {
        let parent = log(vec![
            started(),
            RunEvent::UserMessage {
                message: Message::user_text("first"),
            },
            reply("done"),
        ]);
        for model in ["openai/gpt-4o", "two words", ""] {
            let req = ForkRequest {
                model: Some(model.into()),
                ..Default::default()
            };
            assert!(
                matches!(plan("p", &parent, &req), Err(ForkError::Invalid(_))),
                "{model}"
            );
        }
    }
}
