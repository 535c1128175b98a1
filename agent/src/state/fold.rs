//! The fold: [`RunState::apply`] takes one event at a time, in order, and changes the state
//! only as that event says, so the same events always give the same state and the same request
//! bytes. An event that contradicts the state (out of order, a call that is not pending, a
//! message taken twice, …) is a [`StateError`]: the log is the truth, and a replay that
//! disagrees with it is never papered over. A tool round's results go back to the model in one
//! user message, in the order the model asked for the calls.

use std::collections::BTreeSet;

use nightshift_llm::{ContentBlock, Message, Role, StopReason, Usage};
use nightshift_tools::ToolClass;

use super::{
    AwaitingApproval, CallResult, Decision, Ending, Outage, PendingCall, RunState, StartedCall,
    StateError, Todo,
};
use crate::events::RunEvent;
use crate::wakeup::ArmedWakeup;

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
            RunEvent::RunStarted { agent_hash, .. } => self.agent_hash = Some(agent_hash.clone()),
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
            } => self.take_reply(seq, message, stop_reason, usage, *cost_usd)?,
            RunEvent::ToolStarted {
                call_id,
                durability,
                idempotency_key,
                ..
            } => self.start_call(seq, call_id, *durability, idempotency_key)?,
            RunEvent::ToolResult {
                call_id,
                content,
                is_error,
                ..
            } => self.take_result(seq, call_id, content, *is_error)?,
            RunEvent::WakeupScheduled {
                call_id,
                due_at,
                reason,
                scheduled_at,
            } => self.arm_wakeup(seq, call_id, *due_at, reason, *scheduled_at)?,
            RunEvent::ApprovalRequested {
                call_id,
                expires_at,
                ..
            } => self.await_approval(seq, call_id, *expires_at)?,
            RunEvent::ApprovalDecided {
                call_id,
                approved,
                reason,
                ..
            } => self.decide(seq, call_id, *approved, reason)?,
            RunEvent::Resumed { job_id, reminder } => self.resume(seq, *job_id, reminder)?,
            RunEvent::MessageReceived { job_id, text } => self.take_message(seq, *job_id, text)?,
            RunEvent::TaskEnded {
                task_id, reminder, ..
            } => self.report_task(seq, task_id, reminder)?,
            RunEvent::Compacted {
                summary,
                kept_from,
                usage,
                cost_usd,
            } => self.compact(seq, summary, *kept_from, usage, *cost_usd)?,
            RunEvent::ModelUnavailable { error, since, .. } => self.wait_out(error, *since),
            RunEvent::WorkspacePrepared { commit, .. } => {
                self.workspace_commit = Some(commit.clone());
            }
            RunEvent::Forked {
                prompt,
                model,
                tool_results,
                workspace_commit,
                ..
            } => {
                self.take_fork(seq, prompt.as_deref(), model.as_deref(), tool_results)?;
                if let Some(commit) = workspace_commit {
                    self.workspace_commit = Some(commit.clone());
                }
            }
            RunEvent::McpToolsListed { server, tools, .. } => {
                self.mcp_tools.insert(server.clone(), tools.clone());
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

    /// `assistant_message`: the reply joins the conversation with its usage and cost, and a
    /// reply that stopped to use tools opens a round of its calls.
    fn take_reply(
        &mut self,
        seq: i64,
        message: &Message,
        stop_reason: &StopReason,
        usage: &Usage,
        cost_usd: f64,
    ) -> Result<(), StateError> {
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
        self.last_input_tokens =
            usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens;
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
        Ok(())
    }

    /// `tool_started`: the call is marked started, with its class and key.
    fn start_call(
        &mut self,
        seq: i64,
        call_id: &str,
        durability: ToolClass,
        idempotency_key: &str,
    ) -> Result<(), StateError> {
        let call = self.pending_mut(seq, call_id)?;
        call.started = Some(StartedCall {
            durability,
            idempotency_key: idempotency_key.to_string(),
        });
        Ok(())
    }

    /// `tool_result`: the call has its result (a successful `todo_write` also replaces the
    /// todo list); the last result of the round closes it.
    fn take_result(
        &mut self,
        seq: i64,
        call_id: &str,
        content: &str,
        is_error: bool,
    ) -> Result<(), StateError> {
        let call = self.pending_mut(seq, call_id)?;
        call.result = Some(CallResult {
            content: content.to_string(),
            is_error,
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
        Ok(())
    }

    /// `wakeup_scheduled`: a pending call set a wakeup, which counts against the budget.
    fn arm_wakeup(
        &mut self,
        seq: i64,
        call_id: &str,
        due_at: i64,
        reason: &str,
        scheduled_at: i64,
    ) -> Result<(), StateError> {
        self.pending_mut(seq, call_id)?;
        self.wakeup = Some(ArmedWakeup {
            call_id: call_id.to_string(),
            due_at,
            reason: reason.to_string(),
            scheduled_at,
        });
        self.wakeups_used += 1;
        Ok(())
    }

    /// `approval_requested`: a pending call waits for a human until `expires_at`.
    fn await_approval(
        &mut self,
        seq: i64,
        call_id: &str,
        expires_at: i64,
    ) -> Result<(), StateError> {
        self.pending_mut(seq, call_id)?;
        self.awaiting_approval = Some(AwaitingApproval {
            call_id: call_id.to_string(),
            expires_at,
        });
        Ok(())
    }

    /// `approval_decided`: the decision on a pending call is kept; the call no longer waits.
    fn decide(
        &mut self,
        seq: i64,
        call_id: &str,
        approved: bool,
        reason: &Option<String>,
    ) -> Result<(), StateError> {
        self.pending_mut(seq, call_id)?;
        self.decisions.insert(
            call_id.to_string(),
            Decision {
                approved,
                reason: reason.clone(),
            },
        );
        if self.awaiting_approval.as_ref().map(|a| a.call_id.as_str()) == Some(call_id) {
            self.awaiting_approval = None;
        }
        Ok(())
    }

    /// `resumed`: the resume job's reminder joins the conversation; any wakeup is spent.
    fn resume(&mut self, seq: i64, job_id: i64, reminder: &str) -> Result<(), StateError> {
        self.no_calls_open(seq, "a resume")?;
        self.messages.push(Message::user_text(reminder.to_string()));
        self.wakeup = None;
        self.last_resumed_job = Some(job_id);
        Ok(())
    }

    /// `message_received`: a message sent to the run joins the conversation at once, or after
    /// the results of the calls still running. Each message is taken once.
    fn take_message(&mut self, seq: i64, job_id: i64, text: &str) -> Result<(), StateError> {
        if !self.taken_messages.insert(job_id) {
            return Err(StateError::MessageTakenTwice { seq, job_id });
        }
        if self.pending.is_empty() {
            // A message wakes a sleeping run: the model answers it instead.
            self.wakeup = None;
            self.messages.push(Message::user_text(text.to_string()));
        } else {
            self.held_messages.push(text.to_string());
        }
        Ok(())
    }

    /// `task_ended`: the task's reminder joins the conversation, once per task.
    fn report_task(&mut self, seq: i64, task_id: &str, reminder: &str) -> Result<(), StateError> {
        self.no_calls_open(seq, "a task reminder")?;
        if !self.reported_tasks.insert(task_id.to_string()) {
            return Err(StateError::TaskReportedTwice {
                seq,
                task_id: task_id.to_string(),
            });
        }
        self.messages.push(Message::user_text(reminder.to_string()));
        Ok(())
    }

    /// `compacted`: the messages before `kept_from` give way to the summary; the summary
    /// call's usage and cost count.
    fn compact(
        &mut self,
        seq: i64,
        summary: &str,
        kept_from: usize,
        usage: &Usage,
        cost_usd: f64,
    ) -> Result<(), StateError> {
        self.usage.add(usage);
        self.cost_usd += cost_usd;
        if kept_from > self.messages.len() {
            return Err(StateError::CompactionPastEnd {
                seq,
                kept_from,
                messages: self.messages.len(),
            });
        }
        let kept = self.messages.split_off(kept_from);
        self.messages = vec![Message::user_text(summary.to_string())];
        self.messages.extend(kept);
        self.compactions += 1;
        self.last_input_tokens = 0;
        self.compacted_since_reply = true;
        self.outage = None;
        Ok(())
    }

    /// `model_unavailable`: the run waits out an outage that began at `since`.
    fn wait_out(&mut self, error: &str, since: i64) {
        let deferrals = self.outage.as_ref().map_or(0, |o| o.deferrals);
        self.outage = Some(Outage {
            since,
            deferrals: deferrals + 1,
            last_error: error.to_string(),
        });
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
}
