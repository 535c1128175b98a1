//! The projected state of a run: what the loop needs to build the next request, folded from
//! the run's events in order. A checkpoint is this state at some sequence number; resume is
//! the newest checkpoint plus the events after it, folded with [`RunState::apply`]; an event
//! the state cannot take is a [`StateError`] naming its sequence number.
//!
//! The projection is deterministic: the same events give the same state and so the same
//! request bytes, whether the run was interrupted or not.

use nightshift_llm::{ContentBlock, Message, Role, StopReason, Usage};
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::events::{EndStatus, RunEvent};
use nightshift_store::RunEnd;
use nightshift_tools::ToolClass;

/// What about an event log [`RunState::apply`] found impossible; each names the event's
/// sequence number. `Display` is the message a corrupt run fails with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Event `seq` does not come after the last event folded in.
    #[error("event {seq} is not after the state's last event {last}")]
    OutOfOrder { seq: i64, last: i64 },
    /// Event `seq` (a user message, resume or task reminder) came while calls lack results.
    #[error("event {seq}: {what} while {open} tool call(s) lack results")]
    CallsOpen {
        seq: i64,
        what: &'static str,
        open: usize,
    },
    /// A reply came while calls of the previous reply lack results.
    #[error("event {seq}: a reply while tool calls of the previous one lack results")]
    ReplyWhileCallsOpen { seq: i64 },
    /// Two calls of one reply share an id.
    #[error("event {seq}: two tool calls of one reply share the id {call_id}")]
    DuplicateCallId { seq: i64, call_id: String },
    /// The event names a call the newest reply did not make, or one already answered.
    #[error("event {seq}: tool call {call_id} is not pending")]
    NotPending { seq: i64, call_id: String },
    /// A message was taken into the run a second time.
    #[error("event {seq}: the message of job {job_id} was already taken")]
    MessageTakenTwice { seq: i64, job_id: i64 },
    /// A background task's end was reported a second time.
    #[error("event {seq}: task {task_id} was already reported")]
    TaskReportedTwice { seq: i64, task_id: String },
    /// A compaction keeps messages from past the end of the conversation.
    #[error("event {seq}: compaction keeps from message {kept_from} of {messages}")]
    CompactionPastEnd {
        seq: i64,
        kept_from: usize,
        messages: usize,
    },
}

/// One item of the agent's todo list (kept by the `todo_write` tool).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Todo {
    pub content: String,
    pub status: String,
}

/// A tool call of the newest assistant reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingCall {
    pub call_id: String,
    pub name: String,
    pub input: serde_json::Value,
    /// Set once its `tool_started` event is logged.
    pub started: Option<StartedCall>,
    /// Set once its `tool_result` event is logged.
    pub result: Option<CallResult>,
    /// The arguments as the model wrote them, when they were not valid JSON: the call is
    /// answered with an error, never run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unparsed: Option<String>,
}

/// What `tool_started` recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedCall {
    pub durability: ToolClass,
    pub idempotency_key: String,
}

/// What `tool_result` recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallResult {
    pub content: String,
    pub is_error: bool,
}

/// A call waiting for approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AwaitingApproval {
    pub call_id: String,
    pub expires_at: i64,
}

/// A decision on a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub approved: bool,
    pub reason: Option<String>,
}

/// How the run ended, once it has: the `finished` event's fields. The one translation between
/// this logged form and the store's [`RunEnd`] is [`Ending::of`] and [`Ending::run_end`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ending {
    pub status: EndStatus,
    /// The result of a success, the error of a failure, or why a budget stopped the run.
    pub detail: Option<String>,
}

impl Ending {
    /// The ending that logs `end`.
    pub fn of(end: &RunEnd) -> Ending {
        let (status, detail) = match end {
            RunEnd::Succeeded { result } => (EndStatus::Succeeded, result.clone()),
            RunEnd::Failed { error } => (EndStatus::Failed, Some(error.clone())),
            RunEnd::Cancelled => (EndStatus::Cancelled, None),
            RunEnd::Superseded => (EndStatus::Superseded, None),
            RunEnd::BudgetExhausted { detail } => {
                (EndStatus::BudgetExhausted, Some(detail.clone()))
            }
            RunEnd::MaxRounds { detail } => (EndStatus::MaxRounds, Some(detail.clone())),
        };
        Ending { status, detail }
    }

    /// The `finished` event that records this ending.
    pub fn event(self) -> RunEvent {
        RunEvent::Finished {
            status: self.status,
            detail: self.detail,
        }
    }

    /// The end this logged ending completes the run with. A success logged without a result
    /// takes `final_text` (the last reply); a status this version does not know fails the
    /// run.
    pub fn run_end(&self, final_text: impl FnOnce() -> Option<String>) -> RunEnd {
        let detail_or = |d: &str| self.detail.clone().unwrap_or_else(|| d.to_string());
        match self.status {
            EndStatus::Succeeded => RunEnd::Succeeded {
                result: self.detail.clone().or_else(final_text),
            },
            EndStatus::Cancelled => RunEnd::Cancelled,
            EndStatus::Superseded => RunEnd::Superseded,
            EndStatus::BudgetExhausted => RunEnd::BudgetExhausted {
                detail: detail_or("a budget ran out"),
            },
            EndStatus::MaxRounds => RunEnd::MaxRounds {
                detail: detail_or("the round cap was reached"),
            },
            EndStatus::Failed | EndStatus::Other(_) => RunEnd::Failed {
                error: detail_or("the run failed"),
            },
        }
    }
}

/// An outage of the model that the run is waiting out (set by `model_unavailable`, cleared
/// by the next reply).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outage {
    /// When the outage began for this run.
    pub since: i64,
    /// How many times the run has waited for it.
    pub deferrals: u32,
    /// The provider's real last error.
    pub last_error: String,
}

/// The projected state of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// The hash of the agent definition the run started with.
    pub agent_hash: Option<String>,
    /// The conversation as the model sees it.
    pub messages: Vec<Message>,
    /// Token totals over every model call of the run.
    pub usage: Usage,
    /// Cost over every model call, in USD.
    pub cost_usd: f64,
    /// Model calls made.
    pub turns: u64,
    /// Tool calls of the newest reply, while any lacks a result.
    pub pending: Vec<PendingCall>,
    /// The agent's todo list.
    pub todos: Vec<Todo>,
    /// Compactions so far.
    pub compactions: u64,
    /// The stop reason of the newest reply.
    pub last_stop: Option<StopReason>,
    /// How many replies in a row were cut off at `max_tokens`.
    pub max_tokens_streak: u32,
    /// Input tokens (incl. cache reads and writes) of the newest model call: how full the
    /// context window is.
    pub last_input_tokens: u64,
    /// Set when the run ended.
    pub ending: Option<Ending>,
    /// A wakeup the run has set and not yet woken from: the run parks until it once the
    /// turn's tool calls are done.
    #[serde(default)]
    pub wakeup: Option<crate::wakeup::ArmedWakeup>,
    /// Wakeups set so far (the per-run budget).
    #[serde(default)]
    pub wakeups_used: u32,
    /// The newest resume job whose reason was delivered (each is delivered once).
    #[serde(default)]
    pub last_resumed_job: Option<i64>,
    /// Messages taken into the run (by their resume jobs' ids): each is taken once.
    #[serde(default)]
    pub taken_messages: BTreeSet<i64>,
    /// Messages taken while tool calls lacked results: they follow the results.
    #[serde(default)]
    pub held_messages: Vec<String>,
    /// The call of the newest reply that waits for a human's decision.
    #[serde(default)]
    pub awaiting_approval: Option<AwaitingApproval>,
    /// Decisions on calls of the newest reply, by call id.
    #[serde(default)]
    pub decisions: std::collections::BTreeMap<String, Decision>,
    /// Background tasks whose ending the conversation holds.
    #[serde(default)]
    pub reported_tasks: std::collections::BTreeSet<String>,
    /// Every tool-call id used so far in the run: ids are unique within a run.
    #[serde(default)]
    pub call_ids: BTreeSet<String>,
    /// The model outage the run is waiting out, if any.
    #[serde(default)]
    pub outage: Option<Outage>,
    /// How many replies in a row stopped because the context window was full.
    #[serde(default)]
    pub context_full_streak: u32,
    /// The commit the run's workspace was checked out at, once it was prepared.
    #[serde(default)]
    pub workspace_commit: Option<String>,
    /// Whether the conversation was compacted since the newest reply.
    #[serde(default)]
    pub compacted_since_reply: bool,
    /// The sequence number of the last event folded in.
    pub through_seq: i64,
}

impl RunState {
    /// Folds one event (with sequence number `seq`) into the state. Events must come in
    /// order; an event that contradicts the state is an error (the log is the truth, and a
    /// replay that disagrees with it is never papered over).
    pub fn apply(&mut self, seq: i64, event: &RunEvent) -> Result<(), StateError> {
        if seq <= self.through_seq {
            return Err(StateError::OutOfOrder {
                seq,
                last: self.through_seq,
            });
        }
        match event {
            RunEvent::RunStarted { agent_hash, .. } => {
                self.agent_hash = Some(agent_hash.clone());
            }
            RunEvent::UserMessage { message } => {
                self.no_calls_open(seq, "a user message")?;
                self.messages.push(message.clone());
            }
            RunEvent::AssistantMessage {
                message,
                stop_reason,
                usage,
                cost_usd,
                ..
            } => {
                if !self.pending.is_empty() {
                    return Err(StateError::ReplyWhileCallsOpen { seq });
                }
                let mut ids = BTreeSet::new();
                if let Some(dup) = message.tool_uses().find(|t| !ids.insert(t.id)) {
                    return Err(StateError::DuplicateCallId {
                        seq,
                        call_id: dup.id.to_string(),
                    });
                }
                self.call_ids.extend(ids.into_iter().map(str::to_string));
                self.outage = None;
                self.compacted_since_reply = false;
                if stop_reason.means_context_full() {
                    self.context_full_streak += 1;
                } else {
                    self.context_full_streak = 0;
                }
                self.messages.push(message.clone());
                self.usage.add(usage);
                self.cost_usd += cost_usd;
                self.turns += 1;
                self.last_input_tokens = usage.input_tokens
                    + usage.cache_read_input_tokens
                    + usage.cache_creation_input_tokens;
                self.last_stop = Some(stop_reason.clone());
                if *stop_reason == StopReason::MaxTokens {
                    self.max_tokens_streak += 1;
                } else {
                    self.max_tokens_streak = 0;
                }
                if *stop_reason == StopReason::ToolUse {
                    self.pending = message
                        .tool_uses()
                        .map(|t| PendingCall {
                            call_id: t.id.to_string(),
                            name: t.name.to_string(),
                            input: t.input.clone(),
                            started: None,
                            result: None,
                            unparsed: t.unparsed.map(str::to_string),
                        })
                        .collect();
                }
            }
            RunEvent::ToolStarted {
                call_id,
                durability,
                idempotency_key,
                ..
            } => {
                let call = self.pending_mut(seq, call_id)?;
                call.started = Some(StartedCall {
                    durability: *durability,
                    idempotency_key: idempotency_key.clone(),
                });
            }
            RunEvent::ToolResult {
                call_id,
                content,
                is_error,
                ..
            } => {
                let call = self.pending_mut(seq, call_id)?;
                call.result = Some(CallResult {
                    content: content.clone(),
                    is_error: *is_error,
                });
                if call.name == "todo_write"
                    && !is_error
                    && let Ok(todos) = serde_json::from_value::<Vec<Todo>>(
                        call.input.get("todos").cloned().unwrap_or_default(),
                    )
                {
                    self.todos = todos;
                }
                if self.pending.iter().all(|c| c.result.is_some()) {
                    self.close_tool_round();
                }
            }
            RunEvent::WakeupScheduled {
                call_id,
                due_at,
                reason,
                scheduled_at,
            } => {
                self.pending_mut(seq, call_id)?;
                self.wakeup = Some(crate::wakeup::ArmedWakeup {
                    call_id: call_id.clone(),
                    due_at: *due_at,
                    reason: reason.clone(),
                    scheduled_at: *scheduled_at,
                });
                self.wakeups_used += 1;
            }
            RunEvent::ApprovalRequested {
                call_id,
                expires_at,
                ..
            } => {
                self.pending_mut(seq, call_id)?;
                self.awaiting_approval = Some(AwaitingApproval {
                    call_id: call_id.clone(),
                    expires_at: *expires_at,
                });
            }
            RunEvent::ApprovalDecided {
                call_id,
                approved,
                reason,
                ..
            } => {
                self.pending_mut(seq, call_id)?;
                self.decisions.insert(
                    call_id.clone(),
                    Decision {
                        approved: *approved,
                        reason: reason.clone(),
                    },
                );
                if self.awaiting_approval.as_ref().map(|a| a.call_id.as_str()) == Some(call_id) {
                    self.awaiting_approval = None;
                }
            }
            RunEvent::Resumed { job_id, reminder } => {
                self.no_calls_open(seq, "a resume")?;
                self.messages.push(Message::user_text(reminder.clone()));
                self.wakeup = None;
                self.last_resumed_job = Some(*job_id);
            }
            RunEvent::MessageReceived { job_id, text } => {
                if !self.taken_messages.insert(*job_id) {
                    return Err(StateError::MessageTakenTwice {
                        seq,
                        job_id: *job_id,
                    });
                }
                if self.pending.is_empty() {
                    // A message wakes a sleeping run: the model answers it instead.
                    self.wakeup = None;
                    self.messages.push(Message::user_text(text.clone()));
                } else {
                    self.held_messages.push(text.clone());
                }
            }
            RunEvent::TaskEnded {
                task_id, reminder, ..
            } => {
                self.no_calls_open(seq, "a task reminder")?;
                if !self.reported_tasks.insert(task_id.clone()) {
                    return Err(StateError::TaskReportedTwice {
                        seq,
                        task_id: task_id.clone(),
                    });
                }
                self.messages.push(Message::user_text(reminder.clone()));
            }
            RunEvent::Compacted {
                summary,
                kept_from,
                usage,
                cost_usd,
            } => {
                self.usage.add(usage);
                self.cost_usd += cost_usd;
                if *kept_from > self.messages.len() {
                    return Err(StateError::CompactionPastEnd {
                        seq,
                        kept_from: *kept_from,
                        messages: self.messages.len(),
                    });
                }
                let kept = self.messages.split_off(*kept_from);
                self.messages = vec![Message::user_text(summary.clone())];
                self.messages.extend(kept);
                self.compactions += 1;
                self.last_input_tokens = 0;
                self.compacted_since_reply = true;
                self.outage = None;
            }
            RunEvent::ModelUnavailable { error, since, .. } => {
                let deferrals = self.outage.as_ref().map_or(0, |o| o.deferrals);
                self.outage = Some(Outage {
                    since: *since,
                    deferrals: deferrals + 1,
                    last_error: error.clone(),
                });
            }
            RunEvent::WorkspacePrepared { commit, .. } => {
                self.workspace_commit = Some(commit.clone());
            }
            RunEvent::Finished { status, detail } => {
                self.ending = Some(Ending {
                    status: status.clone(),
                    detail: detail.clone(),
                });
            }
        }
        self.through_seq = seq;
        Ok(())
    }

    /// Fills [`RunState::call_ids`] from the conversation for a state written before it
    /// existed (a checkpoint of an older version).
    pub(crate) fn seed_call_ids(&mut self) {
        if self.call_ids.is_empty() {
            let ids = self
                .messages
                .iter()
                .flat_map(|m| m.tool_uses())
                .map(|t| t.id);
            self.call_ids = ids.map(str::to_string).collect();
        }
    }

    fn pending_mut(&mut self, seq: i64, call_id: &str) -> Result<&mut PendingCall, StateError> {
        self.pending
            .iter_mut()
            .find(|c| c.call_id == call_id)
            .ok_or_else(|| StateError::NotPending {
                seq,
                call_id: call_id.to_string(),
            })
    }

    /// Event `seq` (a `what`) needs every call of the newest reply answered.
    fn no_calls_open(&self, seq: i64, what: &'static str) -> Result<(), StateError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        Err(StateError::CallsOpen {
            seq,
            what,
            open: self.pending.len(),
        })
    }

    /// All results of the newest reply are in: they go back in one user message, in the
    /// order the model asked for the calls (not the order they finished).
    fn close_tool_round(&mut self) {
        self.decisions.clear();
        self.awaiting_approval = None;
        let content = self
            .pending
            .drain(..)
            .map(|c| {
                let result = c.result.expect("all results present");
                ContentBlock::ToolResult {
                    tool_use_id: c.call_id,
                    content: result.content,
                    is_error: result.is_error,
                }
            })
            .collect();
        self.messages.push(Message {
            role: Role::User,
            content,
        });
        // Messages that came while the calls ran follow their results; one cancels a wakeup
        // set in the same reply (the model answers the message first, and says so).
        let held = std::mem::take(&mut self.held_messages);
        if held.is_empty() {
            return;
        }
        let cancelled = self.wakeup.take();
        for text in held {
            self.messages.push(Message::user_text(text));
        }
        if let Some(w) = cancelled {
            self.messages.push(Message::user_text(format!(
                "[These messages came while your tool calls ran, so the wakeup you set for {} \
                 ({}) was cancelled; set it again if you still need it.]",
                crate::wakeup::rfc3339(w.due_at),
                w.reason
            )));
        }
    }

    /// The text of the newest assistant message.
    pub fn final_text(&self) -> Option<String> {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == Role::Assistant)
            .map(Message::text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reply(blocks: Vec<ContentBlock>, stop: StopReason) -> RunEvent {
        RunEvent::AssistantMessage {
            message: Message {
                role: Role::Assistant,
                content: blocks,
            },
            stop_reason: stop,
            usage: Usage {
                input_tokens: 10,
                output_tokens: 5,
                ..Usage::default()
            },
            model: "m".into(),
            cost_usd: 0.5,
            latency_ms: None,
            retries: 0,
        }
    }

    fn tool_use(id: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "read_file".into(),
            input: json!({"path": id}),
            unparsed: None,
        }
    }

    fn result(id: &str) -> RunEvent {
        RunEvent::ToolResult {
            call_id: id.into(),
            content: format!("result of {id}"),
            is_error: false,
            interrupted: false,
        }
    }

    #[test]
    fn results_go_back_together_in_the_order_the_model_asked() {
        let mut s = RunState::default();
        let events = [
            RunEvent::UserMessage {
                message: Message::user_text("go"),
            },
            reply(vec![tool_use("a"), tool_use("b")], StopReason::ToolUse),
            result("b"),
            result("a"),
        ];
        for (i, e) in events.iter().enumerate() {
            s.apply(i as i64 + 1, e).unwrap();
        }
        assert!(s.pending.is_empty());
        let last = s.messages.last().unwrap();
        let ids: Vec<_> = last
            .content
            .iter()
            .map(|b| match b {
                ContentBlock::ToolResult { tool_use_id, .. } => tool_use_id.as_str(),
                _ => panic!("only results"),
            })
            .collect();
        assert_eq!(ids, vec!["a", "b"]);
        assert_eq!((s.turns, s.usage.input_tokens, s.cost_usd), (1, 10, 0.5));
    }

    #[test]
    fn a_log_that_contradicts_the_state_is_an_error() {
        let mut s = RunState::default();
        s.apply(1, &reply(vec![tool_use("a")], StopReason::ToolUse))
            .unwrap();
        let err = s
            .apply(
                2,
                &RunEvent::UserMessage {
                    message: Message::user_text("x"),
                },
            )
            .unwrap_err();
        assert_eq!(
            err,
            StateError::CallsOpen {
                seq: 2,
                what: "a user message",
                open: 1
            }
        );
        assert_eq!(
            err.to_string(),
            "event 2: a user message while 1 tool call(s) lack results"
        );
        assert_eq!(
            s.apply(2, &result("zzz")).unwrap_err(),
            StateError::NotPending {
                seq: 2,
                call_id: "zzz".into()
            }
        );
        let err = s.apply(1, &result("a")).unwrap_err();
        assert_eq!(err, StateError::OutOfOrder { seq: 1, last: 1 });
        assert!(err.to_string().contains("not after"), "{err}");
    }

    #[test]
    fn a_max_tokens_reply_opens_no_tool_round() {
        let mut s = RunState::default();
        s.apply(1, &reply(vec![tool_use("a")], StopReason::MaxTokens))
            .unwrap();
        assert!(
            s.pending.is_empty(),
            "a truncated reply's tool call never runs"
        );
    }

    #[test]
    fn every_run_end_survives_its_logged_ending() {
        let ends = [
            RunEnd::Succeeded {
                result: Some("done".into()),
            },
            RunEnd::Succeeded { result: None },
            RunEnd::Failed {
                error: "boom".into(),
            },
            RunEnd::Cancelled,
            RunEnd::BudgetExhausted {
                detail: "cost".into(),
            },
            RunEnd::MaxRounds {
                detail: "40 rounds".into(),
            },
        ];
        for end in ends {
            let ending = Ending::of(&end);
            assert_eq!(ending.status.run_status(), end.run_status(), "{end:?}");
            assert_eq!(ending.run_end(|| None), end);
        }
    }

    #[test]
    fn a_logged_ending_without_detail_fills_in_what_the_end_needs() {
        let ending = |status| Ending {
            status,
            detail: None,
        };
        let last = || Some("the last reply".to_string());
        assert_eq!(
            ending(EndStatus::Succeeded).run_end(last),
            RunEnd::Succeeded {
                result: Some("the last reply".into())
            }
        );
        assert_eq!(
            ending(EndStatus::Superseded).run_end(last),
            RunEnd::Superseded
        );
        assert_eq!(
            ending(EndStatus::BudgetExhausted).run_end(last),
            RunEnd::BudgetExhausted {
                detail: "a budget ran out".into()
            }
        );
        assert_eq!(
            ending(EndStatus::MaxRounds).run_end(last),
            RunEnd::MaxRounds {
                detail: "the round cap was reached".into()
            }
        );
        assert_eq!(
            ending(EndStatus::Other("exploded".into())).run_end(last),
            RunEnd::Failed {
                error: "the run failed".into()
            }
        );
    }

    #[test]
    fn an_ending_keeps_its_wire_name_in_a_checkpointed_state() {
        let mut s = RunState::default();
        s.apply(
            1,
            &RunEvent::Finished {
                status: EndStatus::BudgetExhausted,
                detail: Some("cost".into()),
            },
        )
        .unwrap();
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(
            json["ending"],
            json!({"status": "budget_exhausted", "detail": "cost"})
        );
        let back: RunState = serde_json::from_value(json).unwrap();
        assert_eq!(back.ending, s.ending);
    }
}
