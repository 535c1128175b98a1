//! A run's timeline: a PURE function from the run, its jobs, its tasks and its events to the
//! items the run page shows, in log order, each job (attempt) where it was made and each task
//! after the call that started it.
//!
//! Each item has a stable `key` (`e<seq>` of the event that opened it, `j<id>` for a job)
//! and `last_seq`, the newest event it reflects, so the live stream can send exactly the
//! items that changed (a tool call's result lands on the item its start opened). An event
//! that does not parse becomes an `error` item saying so; nothing is dropped.

use std::collections::HashMap;

use nightshift_agent::events::RunEvent;
use nightshift_agent::runtime::REFUSED_NOTICE;
use nightshift_llm::ContentBlock;
use nightshift_store::{Event, Job, Run, Task, TaskStatus};
use serde::Serialize;

use crate::decision::{Decision, text_of};
use crate::format;

/// How much of a tool result is shown before it is collapsed.
const HEAD: usize = 400;
/// How much of a collapsed text its head and its tail show, each at most.
const SHOWN_LINES: usize = 4;
const SHOWN_CHARS: usize = 300;

/// One item of the timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Item {
    /// Stable id: `e<seq>` or `j<job id>`.
    pub key: String,
    /// `prompt`, `model_turn`, `tool_call`, `approval`, `wakeup`, `task`, `compaction`,
    /// `model_wait`, `attempt`, `result`, `error`.
    pub kind: &'static str,
    pub title: String,
    /// Short facts, shown as `name: value`.
    pub facts: Vec<(String, String)>,
    /// Longer text, collapsed past its head.
    pub body: Option<String>,
    /// A second long text (a tool's result).
    pub result: Option<String>,
    pub call_id: Option<String>,
    /// Marks: `running`, `re-run on recovery`, `interrupted / outcome unknown`, `error`,
    /// `denied`, `refused by the fence`, `bad input`, `pending`, `approved`.
    pub marks: Vec<String>,
    /// When it happened (ms).
    pub at: i64,
    pub last_seq: i64,
    /// An approval still waiting for a decision (the page shows Approve / Deny).
    pub pending: bool,
    /// The artifact holding the whole result, when the result was cut.
    pub artifact: Option<String>,
    /// For an approval: the call, the prompt and the model's text (what is decided on).
    pub decision: Option<Decision>,
}

/// A background task of the run as the timeline shows it: its row, and while it runs the
/// newest output read from this daemon's disk (`None` when the log is elsewhere).
#[derive(Debug, Clone)]
pub struct TaskView {
    pub task: Task,
    pub live_tail: Option<String>,
}

impl Item {
    fn new(key: String, kind: &'static str, title: impl Into<String>, at: i64, seq: i64) -> Item {
        Item {
            key,
            kind,
            title: title.into(),
            facts: Vec::new(),
            body: None,
            result: None,
            call_id: None,
            marks: Vec::new(),
            at,
            last_seq: seq,
            pending: false,
            artifact: None,
            decision: None,
        }
    }

    fn fact(mut self, name: &str, value: impl Into<String>) -> Item {
        self.facts.push((name.into(), value.into()));
        self
    }
}

fn name_of<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
    }
}

/// The timeline of `run` from its `events` (in seq order) and `jobs`.
/// The mark of a call recovery started again after a crash.
const RERUN: &str = "re-run on recovery";

pub fn build(run: &Run, jobs: &[Job], tasks: &[TaskView], events: &[Event]) -> Vec<Item> {
    let mut items: Vec<Item> = Vec::new();
    let mut task_items: Vec<(String, Item)> = tasks.iter().map(task_item).collect();
    // Each call the model made: its input (pretty JSON) and the text of the message that
    // made it, for the approval it may wait for.
    let mut calls: HashMap<String, (String, String)> = HashMap::new();
    let find = |items: &mut Vec<Item>, kind: &str, call: &str| {
        items
            .iter()
            .rposition(|i| i.kind == kind && i.call_id.as_deref() == Some(call))
    };
    for e in events {
        let key = format!("e{}", e.seq);
        let (at, seq) = (e.created_at, e.seq);
        let event = match RunEvent::parse(&e.event_type, &e.payload) {
            Ok(ev) => ev,
            Err(why) => {
                items.push(
                    Item::new(key, "error", format!("unreadable event {}", e.seq), at, seq)
                        .fact("why", why.to_string()),
                );
                continue;
            }
        };
        match event {
            RunEvent::RunStarted { .. } => {}
            RunEvent::UserMessage { message } => {
                let first = !items.iter().any(|i| i.kind == "prompt");
                let mut it = Item::new(
                    key,
                    "prompt",
                    if first { "prompt" } else { "message" },
                    at,
                    seq,
                );
                it.body = Some(text_of(&message.content));
                items.push(it);
            }
            RunEvent::AssistantMessage {
                message,
                stop_reason,
                usage,
                model,
                cost_usd,
                latency_ms,
                retries,
            } => {
                let mut it = Item::new(key, "model_turn", format!("model turn: {model}"), at, seq)
                    .fact("stop", name_of(&stop_reason))
                    .fact("in", format::tokens(usage.input_tokens as i64))
                    .fact("out", format::tokens(usage.output_tokens as i64))
                    .fact(
                        "cache read",
                        format::tokens(usage.cache_read_input_tokens as i64),
                    )
                    .fact(
                        "cache write",
                        format::tokens(usage.cache_creation_input_tokens as i64),
                    )
                    .fact("cost", format::money(cost_usd));
                if let Some(ms) = latency_ms {
                    it = it.fact(
                        "latency",
                        format::duration(i64::try_from(ms).unwrap_or(i64::MAX)),
                    );
                }
                if retries > 0 {
                    it = it.fact("retries", retries.to_string());
                }
                let text = text_of(&message.content);
                for block in &message.content {
                    if let ContentBlock::ToolUse { id, input, .. } = block {
                        let input = serde_json::to_string_pretty(input).unwrap_or_default();
                        calls.insert(id.clone(), (input, text.clone()));
                    }
                }
                it.body = (!text.is_empty()).then_some(text);
                items.push(it);
            }
            RunEvent::ToolStarted {
                call_id,
                name,
                input,
                durability,
                ..
            } => {
                // Started again with no result in between: recovery re-ran it (a read-only
                // or idempotent call interrupted by a crash). One item, marked.
                if let Some(idx) =
                    find(&mut items, "tool_call", &call_id).filter(|&i| items[i].result.is_none())
                {
                    let it = &mut items[idx];
                    if !it.marks.iter().any(|m| m == RERUN) {
                        it.marks.push(RERUN.into());
                    }
                    it.last_seq = seq;
                    continue;
                }
                let mut it =
                    Item::new(key, "tool_call", name, at, seq).fact("class", name_of(&durability));
                it.body = Some(serde_json::to_string_pretty(&input).unwrap_or_default());
                it.call_id = Some(call_id);
                it.marks.push("running".into());
                items.push(it);
            }
            RunEvent::ToolResult {
                call_id,
                content,
                is_error,
                interrupted,
            } => {
                let idx = match find(&mut items, "tool_call", &call_id) {
                    Some(i) => i,
                    None => {
                        // A result with no start: the call was never made. Why is known
                        // exactly: its approval was denied, the fence refused it (the loop's
                        // own notice), or its input broke the tool's schema.
                        let denied = items.iter().any(|i| {
                            i.kind == "approval"
                                && i.call_id.as_deref() == Some(call_id.as_str())
                                && i.marks.iter().any(|m| m == "denied")
                        });
                        let why = if denied {
                            "denied"
                        } else if content == REFUSED_NOTICE {
                            "refused by the fence"
                        } else {
                            "bad input"
                        };
                        let mut it = Item::new(key, "tool_call", "tool call not made", at, seq);
                        it.call_id = Some(call_id.clone());
                        it.marks.push(why.into());
                        it.result = Some(content);
                        items.push(it);
                        continue;
                    }
                };
                let it = &mut items[idx];
                it.marks.retain(|m| m != "running");
                if interrupted {
                    it.marks.push("interrupted / outcome unknown".into());
                }
                if is_error {
                    it.marks.push("error".into());
                }
                it.facts.push(("took".into(), format::duration(at - it.at)));
                it.artifact = crate::files::artifact_named(&content);
                it.result = Some(content);
                it.last_seq = seq;
            }
            RunEvent::ApprovalRequested {
                call_id,
                name,
                expires_at,
                ..
            } => {
                let mut it = Item::new(key, "approval", format!("approval: {name}"), at, seq)
                    .fact("expires", format::utc(expires_at));
                let (input, model_text) = calls.get(&call_id).cloned().unwrap_or_default();
                it.body = (!input.is_empty()).then(|| input.clone());
                it.decision = Some(Decision {
                    tool: name,
                    input,
                    prompt: run.input.clone(),
                    model_text,
                });
                it.call_id = Some(call_id);
                it.pending = true;
                it.marks.push("pending".into());
                items.push(it);
            }
            RunEvent::ApprovalDecided {
                call_id,
                approved,
                reason,
                by,
            } => {
                if let Some(idx) = find(&mut items, "approval", &call_id) {
                    let it = &mut items[idx];
                    it.pending = false;
                    it.marks.retain(|m| m != "pending");
                    it.marks
                        .push(if approved { "approved" } else { "denied" }.into());
                    it.facts.push(("by".into(), by));
                    if let Some(r) = reason {
                        it.facts.push(("reason".into(), r));
                    }
                    it.last_seq = seq;
                }
            }
            RunEvent::WakeupScheduled {
                call_id,
                due_at,
                reason,
                scheduled_at,
            } => {
                let mut it = Item::new(key, "wakeup", "sleeps", at, seq)
                    .fact("slept", format::utc(scheduled_at))
                    .fact("due", format::utc(due_at))
                    .fact("why", reason);
                it.call_id = Some(call_id);
                items.push(it);
            }
            RunEvent::Resumed { job_id, reminder } => {
                let open = items
                    .iter()
                    .rposition(|i| i.kind == "wakeup" && !i.facts.iter().any(|(n, _)| n == "woke"));
                match open {
                    Some(idx) => {
                        let it = &mut items[idx];
                        it.facts.push(("woke".into(), format::utc(at)));
                        it.last_seq = seq;
                    }
                    None => {
                        let mut it = Item::new(key, "wakeup", "resumed", at, seq)
                            .fact("job", job_id.to_string());
                        it.body = Some(reminder);
                        items.push(it);
                    }
                }
            }
            RunEvent::MessageReceived { job_id, text } => {
                let mut it =
                    Item::new(key, "prompt", "message", at, seq).fact("job", job_id.to_string());
                it.body = Some(text);
                items.push(it);
            }
            RunEvent::TaskEnded {
                task_id,
                status,
                reminder,
            } => {
                if let Some((_, it)) = task_items
                    .iter_mut()
                    .find(|(_, i)| i.key == format!("task-{task_id}"))
                {
                    it.facts.push(("reported".into(), format::utc(at)));
                    it.last_seq = seq;
                    continue;
                }
                let mut it = Item::new(key, "task", format!("background task {task_id}"), at, seq)
                    .fact("status", status);
                it.body = Some(reminder);
                items.push(it);
            }
            RunEvent::Compacted {
                summary,
                kept_from,
                cost_usd,
                ..
            } => {
                let mut it = Item::new(key, "compaction", "compacted", at, seq)
                    .fact("kept from message", kept_from.to_string())
                    .fact("cost", format::money(cost_usd));
                it.body = Some(summary);
                items.push(it);
            }
            RunEvent::ModelUnavailable {
                error,
                since,
                until,
            } => {
                let mut it = Item::new(key, "model_wait", "model unavailable: waiting", at, seq)
                    .fact("since", format::utc(since))
                    .fact("until", format::utc(until));
                it.body = Some(error);
                items.push(it);
            }
            RunEvent::WorkspacePrepared {
                repo,
                git_ref,
                commit,
                setup,
            } => {
                let mut it = Item::new(key, "workspace", "workspace prepared", at, seq)
                    .fact("repository", repo)
                    .fact("ref", git_ref)
                    .fact("commit", commit);
                if !setup.is_empty() {
                    it.body = Some(setup.join("\n"));
                }
                items.push(it);
            }
            RunEvent::Finished { status, detail } => {
                let kind = if status.as_str() == "succeeded" {
                    "result"
                } else {
                    "error"
                };
                let mut it = Item::new(key, kind, format!("finished: {status}"), at, seq);
                it.body = detail;
                items.push(it);
            }
        }
    }
    // Each task right after the call that started it (tasks of one call in start order).
    for (call_id, it) in task_items.into_iter().rev() {
        match find(&mut items, "tool_call", &call_id) {
            Some(i) => items.insert(i + 1, it),
            None => items.push(it),
        }
    }
    for j in jobs {
        let mut it = Item::new(
            format!("j{}", j.id),
            "attempt",
            format!("job {} ({})", j.id, j.kind),
            j.created_at,
            0,
        )
        .fact("state", j.status.as_str())
        .fact("attempts", format!("{}/{}", j.attempts, j.max_attempts));
        if let Some(owner) = &j.lease_owner {
            it = it.fact("lease owner", owner.clone());
        }
        it.body = j.last_error.clone();
        // In time order: each job before the first item logged after it was made (a resume
        // job lands after the wakeup or approval that made it).
        let at = items
            .iter()
            .position(|i| i.last_seq > 0 && i.at > j.created_at)
            .unwrap_or(items.len());
        items.insert(at, it);
    }
    if run.status.is_terminal() {
        if let Some(result) = &run.result
            && !items.iter().any(|i| i.kind == "result")
        {
            let mut it = Item::new("result".into(), "result", "result", run.updated_at, 0);
            it.body = Some(result.clone());
            items.push(it);
        }
        let newest_job_error = jobs
            .iter()
            .max_by_key(|j| j.id)
            .and_then(|j| j.last_error.clone());
        if let Some(err) = run.error.clone().or(newest_job_error) {
            let mut it = Item::new("error".into(), "error", "error", run.updated_at, 0);
            it.body = Some(err);
            items.push(it);
        }
    }
    items
}

/// A task's item and the call that started it (pure).
fn task_item(view: &TaskView) -> (String, Item) {
    let t = &view.task;
    let mut it = Item::new(
        format!("task-{}", t.id),
        "task",
        format!("background task {}", t.id),
        t.started_at,
        0,
    )
    .fact("status", t.status.as_str())
    .fact("daemon", t.owner.clone())
    .fact("output", format!("{} bytes", t.output_bytes));
    if let Some(code) = t.exit_code {
        it = it.fact("exit code", code.to_string());
    }
    if let Some(ended) = t.ended_at {
        it = it.fact("took", format::duration(ended - t.started_at));
    }
    if let Some(detail) = &t.detail {
        it = it.fact("how", detail.clone());
    }
    it.body = Some(t.command.clone());
    it.result = if t.status == TaskStatus::Running {
        it.marks.push("running".into());
        Some(view.live_tail.clone().unwrap_or_else(|| {
            format!("(its output is on daemon {}, which is running it)", t.owner)
        }))
    } else {
        t.output_tail.clone()
    };
    (t.call_id.clone(), it)
}

/// The result head shown before `<details>`: whether the text needs collapsing.
pub fn is_long(text: &str) -> bool {
    text.len() > HEAD || text.lines().count() > 8
}

/// How a long text is shown collapsed: its head and its tail, each at most [`SHOWN_LINES`]
/// lines and [`SHOWN_CHARS`] characters, never overlapping (the tail starts after the
/// head), so no part of it is shown twice; `None` when it is shown whole (it is not long,
/// or its head and tail together are all of it) (pure).
pub fn head_and_tail(text: &str) -> Option<(&str, &str)> {
    if !is_long(text) {
        return None;
    }
    let by_lines = text
        .match_indices('\n')
        .nth(SHOWN_LINES - 1)
        .map_or(text.len(), |(i, _)| i);
    let by_chars = text
        .char_indices()
        .nth(SHOWN_CHARS)
        .map_or(text.len(), |(i, _)| i);
    let head_end = by_lines.min(by_chars);
    let body = text.trim_end_matches('\n');
    let from_lines = body
        .rmatch_indices('\n')
        .nth(SHOWN_LINES - 1)
        .map_or(0, |(i, _)| i + 1);
    let from_chars = text
        .char_indices()
        .rev()
        .nth(SHOWN_CHARS - 1)
        .map_or(0, |(i, _)| i);
    let tail_start = from_lines.max(from_chars);
    if tail_start <= head_end {
        return None;
    }
    Some((&text[..head_end], &text[tail_start..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nightshift_agent::events::EndStatus;
    use nightshift_llm::{Message, StopReason, Usage};
    use nightshift_store::{RunStatus, Trigger};

    fn run(status: RunStatus) -> Run {
        Run {
            id: "r1".into(),
            agent: "a".into(),
            status,
            trigger_kind: Trigger::Api,
            input: "Go.".into(),
            idempotency_key: None,
            concurrency_key: None,
            agent_hash: None,
            notify: false,
            turns: 1,
            input_tokens: 0,
            output_tokens: 0,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            cost_usd: 0.0,
            result: None,
            error: None,
            cancel_requested_at: None,
            created_at: 0,
            updated_at: 0,
            started_at: None,
            finished_at: None,
            trace_parent: None,
            context: None,
        }
    }

    fn log(events: Vec<RunEvent>) -> Vec<Event> {
        events
            .into_iter()
            .enumerate()
            .map(|(i, e)| Event {
                run_id: "r1".into(),
                seq: i as i64 + 1,
                job_id: 1,
                lease_token: 1,
                event_type: e.kind().into(),
                payload: e.payload(),
                created_at: 1_000 * (i as i64 + 1),
            })
            .collect()
    }

    fn started(call: &str, name: &str) -> RunEvent {
        RunEvent::ToolStarted {
            call_id: call.into(),
            name: name.into(),
            input: serde_json::json!({"path": "a.txt"}),
            durability: nightshift_tools::ToolClass::SideEffect,
            idempotency_key: format!("r1:{call}"),
        }
    }

    #[test]
    fn a_tool_round_becomes_prompt_turn_and_one_item_per_call_with_its_result() {
        let events = log(vec![
            RunEvent::UserMessage {
                message: Message::user_text("Review PR 7"),
            },
            RunEvent::AssistantMessage {
                message: Message::user_text("reading"),
                stop_reason: StopReason::ToolUse,
                usage: Usage {
                    input_tokens: 1200,
                    output_tokens: 30,
                    cache_creation_input_tokens: 0,
                    cache_read_input_tokens: 1000,
                },
                model: "claude-x".into(),
                cost_usd: 0.01,
                latency_ms: Some(2_300),
                retries: 1,
            },
            started("c1", "read_file"),
            started("c2", "run_command"),
            RunEvent::ToolResult {
                call_id: "c1".into(),
                content: "hello".into(),
                is_error: false,
                interrupted: false,
            },
            RunEvent::ToolResult {
                call_id: "c2".into(),
                content: "interrupted".into(),
                is_error: true,
                interrupted: true,
            },
            RunEvent::Finished {
                status: EndStatus::Succeeded,
                detail: Some("done".into()),
            },
        ]);
        let items = build(&run(RunStatus::Succeeded), &[], &[], &events);
        let kinds: Vec<&str> = items.iter().map(|i| i.kind).collect();
        assert_eq!(
            kinds,
            ["prompt", "model_turn", "tool_call", "tool_call", "result"]
        );
        assert_eq!(items[0].body.as_deref(), Some("Review PR 7"));
        assert!(items[1].facts.contains(&("in".into(), "1.2k".into())));
        assert!(
            items[1]
                .facts
                .contains(&("cache read".into(), "1.0k".into()))
        );
        let c1 = &items[2];
        assert_eq!(
            (c1.call_id.as_deref(), c1.result.as_deref(), c1.last_seq),
            (Some("c1"), Some("hello"), 5)
        );
        assert!(c1.facts.contains(&("class".into(), "side_effect".into())));
        assert!(c1.marks.is_empty(), "{:?}", c1.marks);
        assert!(
            items[3]
                .marks
                .contains(&"interrupted / outcome unknown".to_string())
        );
        assert!(items[3].marks.contains(&"error".to_string()));
    }

    #[test]
    fn an_approval_is_pending_until_decided_and_a_wakeup_records_when_it_woke() {
        let mut events = vec![RunEvent::ApprovalRequested {
            call_id: "c9".into(),
            name: "deploy".into(),
            input_hash: "h".into(),
            expires_at: 99_000,
        }];
        let pending = build(
            &run(RunStatus::AwaitingApproval),
            &[],
            &[],
            &log(events.clone()),
        );
        assert!(pending[0].pending && pending[0].kind == "approval");
        events.push(RunEvent::ApprovalDecided {
            call_id: "c9".into(),
            approved: false,
            reason: Some("not today".into()),
            by: "operator".into(),
        });
        events.push(RunEvent::WakeupScheduled {
            call_id: "w".into(),
            due_at: 60_000,
            reason: "CI".into(),
            scheduled_at: 3_000,
        });
        events.push(RunEvent::Resumed {
            job_id: 2,
            reminder: "woke".into(),
        });
        let items = build(&run(RunStatus::Running), &[], &[], &log(events));
        assert!(!items[0].pending);
        assert!(items[0].marks.contains(&"denied".to_string()));
        assert!(
            items[0]
                .facts
                .contains(&("reason".into(), "not today".into()))
        );
        assert_eq!(items.len(), 2, "the resume lands on the wakeup item");
        assert!(
            items[1]
                .facts
                .iter()
                .any(|(n, v)| n == "woke" && v == "1970-01-01T00:00:04Z")
        );
        assert_eq!(items[1].last_seq, 4);
    }

    fn result(call: &str, content: &str, is_error: bool) -> RunEvent {
        RunEvent::ToolResult {
            call_id: call.into(),
            content: content.into(),
            is_error,
            interrupted: false,
        }
    }

    #[test]
    fn calls_never_made_say_exactly_why_and_a_re_run_is_one_marked_item() {
        let items = build(
            &run(RunStatus::Running),
            &[],
            &[],
            &log(vec![
                // Started, then started again after a crash, then its result.
                started("c1", "read_file"),
                started("c1", "read_file"),
                result("c1", "hello", false),
                // Denied by an operator: the loop's result names the denial.
                RunEvent::ApprovalRequested {
                    call_id: "c2".into(),
                    name: "deploy".into(),
                    input_hash: "h".into(),
                    expires_at: 99_000,
                },
                RunEvent::ApprovalDecided {
                    call_id: "c2".into(),
                    approved: false,
                    reason: None,
                    by: "operator".into(),
                },
                result("c2", &nightshift_agent::approval::denied_notice(None), true),
                // Refused by the fence, and a call whose input broke its schema — the word
                // "denied" in a tool's text decides nothing.
                result("c3", REFUSED_NOTICE, true),
                result("c4", "input: 'path' is required (denied words here)", true),
            ]),
        );
        let marks = |call: &str| {
            items
                .iter()
                .find(|i| i.kind == "tool_call" && i.call_id.as_deref() == Some(call))
                .map(|i| i.marks.clone())
                .unwrap_or_else(|| panic!("no item for {call}: {items:?}"))
        };
        assert_eq!(marks("c1"), ["re-run on recovery"]);
        assert_eq!(
            items
                .iter()
                .filter(|i| i.call_id.as_deref() == Some("c1"))
                .count(),
            1,
            "one item for the call"
        );
        assert_eq!(marks("c2"), ["denied"]);
        assert_eq!(marks("c3"), ["refused by the fence"]);
        assert_eq!(marks("c4"), ["bad input"]);
    }

    fn task(id: &str, call: &str, status: TaskStatus) -> TaskView {
        TaskView {
            task: Task {
                id: id.into(),
                run_id: "r1".into(),
                call_id: call.into(),
                command: "cargo test".into(),
                owner: "daemon-a".into(),
                status,
                exit_code: (status != TaskStatus::Running).then_some(0),
                detail: None,
                output_tail: Some("test result: ok".into()),
                output_bytes: 4096,
                started_at: 2_500,
                deadline_at: 900_000,
                heartbeat_at: 3_000,
                ended_at: (status != TaskStatus::Running).then_some(9_500),
                reported_at: None,
                stop_requested_at: None,
            },
            live_tail: Some("running 12 tests".into()),
        }
    }

    #[test]
    fn a_task_follows_the_call_that_started_it_with_its_newest_output() {
        let events = log(vec![
            started("c1", "run_command"),
            result("c1", "started task t1", false),
            started("c2", "read_file"),
            result(
                "c2",
                "[… 9900 bytes cut; full output saved as artifact c2-stdout.txt …]",
                false,
            ),
            RunEvent::TaskEnded {
                task_id: "t0".into(),
                status: "succeeded".into(),
                reminder: "t0 ended".into(),
            },
        ]);
        let running = build(
            &run(RunStatus::Running),
            &[],
            &[task("t1", "c1", TaskStatus::Running)],
            &events,
        );
        let keys: Vec<&str> = running.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(
            keys,
            ["e1", "task-t1", "e3", "e5"],
            "the task after its call"
        );
        let t1 = &running[1];
        assert_eq!(
            t1.result.as_deref(),
            Some("running 12 tests"),
            "the live tail"
        );
        assert!(t1.marks.contains(&"running".to_string()));
        assert_eq!(running[2].artifact.as_deref(), Some("c2-stdout.txt"));

        let mut ended = task("t1", "c1", TaskStatus::Succeeded);
        ended.live_tail = None;
        let done = build(&run(RunStatus::Running), &[], &[ended], &events);
        let t1 = done.iter().find(|i| i.key == "task-t1").unwrap();
        assert_eq!(
            t1.result.as_deref(),
            Some("test result: ok"),
            "the stored tail"
        );
        assert!(t1.facts.contains(&("exit code".into(), "0".into())));
        assert!(t1.marks.is_empty());
    }

    /// The text of `html` a reader sees with every `<details>` closed.
    fn seen(html: &str) -> String {
        let mut out = String::new();
        let mut rest = html;
        while let Some(at) = rest.find("<details>") {
            out.push_str(&rest[..at]);
            let summary_end = rest[at..].find("</summary>").map_or(0, |e| at + e);
            out.push_str(&rest[at..summary_end]);
            let end = rest[at..].find("</details>").map_or(rest.len(), |e| at + e);
            rest = &rest[end..];
        }
        out.push_str(rest);
        out
    }

    fn rendered(item: &Item, run: &Run) -> String {
        crate::layout::templates()
            .get_template("item.html")
            .and_then(|t| t.render(crate::run_page::item_ctx(item, run, "csrf")))
            .unwrap()
    }

    #[test]
    fn short_background_output_is_shown_once() {
        // Ten short lines: long enough to collapse by its lines, short enough that its head
        // and tail used to be the whole text each (and it was shown twice).
        let output: String = (1..=10).map(|i| format!("step-{i:02}\n")).collect();
        let mut ended = task("t1", "c1", TaskStatus::Succeeded);
        ended.task.output_tail = Some(output.clone());
        let events = log(vec![
            started("c1", "run_command"),
            result("c1", "started task t1", false),
            RunEvent::TaskEnded {
                task_id: "t1".into(),
                status: "succeeded".into(),
                reminder: format!("[Background task t1 finished.]\nOutput:\n{output}"),
            },
        ]);
        let r = run(RunStatus::Running);
        let items = build(&r, &[], &[ended], &events);
        let html: String = items.iter().map(|i| rendered(i, &r)).collect();
        let seen = seen(&html);
        for i in 1..=10 {
            let line = format!("step-{i:02}");
            assert!(
                seen.matches(&line).count() <= 1,
                "{line} shown more than once:\n{seen}"
            );
            assert_eq!(
                html.matches(&line).count() - seen.matches(&line).count(),
                1,
                "{line} once in the whole text"
            );
        }
        assert!(
            seen.contains("step-01") && seen.contains("step-10"),
            "head and tail: {seen}"
        );
        // One task item: the ending is reported on it, not as a second item.
        assert_eq!(items.iter().filter(|i| i.kind == "task").count(), 1);
    }

    #[test]
    fn heads_and_tails_never_overlap_and_short_texts_are_whole() {
        assert_eq!(head_and_tail("one line"), None);
        let lines: String = (1..=9).map(|i| format!("l{i}\n")).collect();
        let (head, tail) = head_and_tail(&lines).unwrap();
        assert_eq!((head, tail), ("l1\nl2\nl3\nl4", "l6\nl7\nl8\nl9\n"));
        // 500 characters on one line: a 300-character head and tail would overlap, so the
        // text is shown whole.
        assert_eq!(head_and_tail(&"x".repeat(500)), None);
        let long = format!("{}{}", "a".repeat(400), "b".repeat(400));
        let (head, tail) = head_and_tail(&long).unwrap();
        assert_eq!((head.len(), tail.len()), (300, 300));
        assert!(head.chars().all(|c| c == 'a') && tail.chars().all(|c| c == 'b'));
        let wide = "é".repeat(700);
        let (head, tail) = head_and_tail(&wide).unwrap();
        assert_eq!((head.chars().count(), tail.chars().count()), (300, 300));
    }

    #[test]
    fn an_approval_shows_the_call_the_prompt_and_the_models_text() {
        let events = log(vec![
            RunEvent::AssistantMessage {
                message: nightshift_llm::Message {
                    role: nightshift_llm::Role::Assistant,
                    content: vec![
                        ContentBlock::Text {
                            text: "Shipping v2 now.".into(),
                        },
                        ContentBlock::ToolUse {
                            id: "c9".into(),
                            name: "deploy".into(),
                            input: serde_json::json!({"version": "v2"}),
                            unparsed: None,
                        },
                    ],
                },
                stop_reason: StopReason::ToolUse,
                usage: Usage::default(),
                model: "m".into(),
                cost_usd: 0.0,
                latency_ms: None,
                retries: 0,
            },
            RunEvent::ApprovalRequested {
                call_id: "c9".into(),
                name: "deploy".into(),
                input_hash: "h".into(),
                expires_at: 99_000,
            },
        ]);
        let items = build(&run(RunStatus::AwaitingApproval), &[], &[], &events);
        let approval = items.iter().find(|i| i.kind == "approval").unwrap();
        let want = Decision {
            tool: "deploy".into(),
            input: "{\n  \"version\": \"v2\"\n}".into(),
            prompt: "Go.".into(),
            model_text: "Shipping v2 now.".into(),
        };
        assert_eq!(approval.decision.as_ref(), Some(&want));
        assert_eq!(
            approval.body.as_deref(),
            Some(want.input.as_str()),
            "the input on the item"
        );
        let html = rendered(approval, &run(RunStatus::AwaitingApproval));
        let detail = &html[html
            .find("<template class=\"confirm-detail\">")
            .expect("the dialog's detail")..];
        for part in [
            "deploy",
            "&quot;version&quot;: &quot;v2&quot;",
            "Go.",
            "Shipping v2 now.",
        ] {
            assert!(
                detail.contains(part),
                "{part} in the dialog's detail:\n{html}"
            );
        }
        assert!(
            html.contains(
                "data-action=\"approve\" data-confirm-yes=\"Yes, approve\" data-confirm="
            ),
            "approve asks first: {html}"
        );
    }

    fn job(id: i64, kind: nightshift_store::JobKind, created_at: i64, owner: &str) -> Job {
        Job {
            id,
            run_id: "r1".into(),
            kind,
            lane: "default".into(),
            priority: 0,
            payload: "{}".into(),
            run_at: created_at,
            attempts: 1,
            max_attempts: 5,
            dedupe_key: None,
            status: nightshift_store::JobState::Succeeded,
            lease_owner: Some(owner.into()),
            lease_token: 1,
            lease_expires_at: None,
            cancel_requested_at: None,
            last_error: None,
            created_at,
            updated_at: created_at,
            finished_at: None,
            concurrency_key: None,
        }
    }

    #[test]
    fn each_job_sits_where_it_was_made_with_the_daemon_that_ran_it() {
        use nightshift_store::JobKind;
        let events = log(vec![
            RunEvent::UserMessage {
                message: Message::user_text("Go"),
            },
            RunEvent::WakeupScheduled {
                call_id: "w".into(),
                due_at: 60_000,
                reason: "CI".into(),
                scheduled_at: 1_500,
            },
            RunEvent::Resumed {
                job_id: 2,
                reminder: "woke".into(),
            },
        ]);
        let jobs = [
            job(1, JobKind::Start, 0, "daemon-a"),
            job(2, JobKind::Resume, 2_500, "daemon-b"),
        ];
        let items = build(&run(RunStatus::Running), &jobs, &[], &events);
        let keys: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
        // e1 at 1s, e2 at 2s, job 2 made at 2.5s, e3 (its resume) at 3s.
        assert_eq!(keys, ["j1", "e1", "e2", "j2"], "{items:?}");
        assert!(
            items[3]
                .facts
                .contains(&("lease owner".into(), "daemon-b".into()))
        );
    }

    #[test]
    fn a_failed_run_shows_its_real_error_and_unreadable_events_are_kept() {
        let mut events = log(vec![RunEvent::ModelUnavailable {
            error: "529 overloaded".into(),
            since: 0,
            until: 5_000,
        }]);
        events.push(Event {
            run_id: "r1".into(),
            seq: 2,
            job_id: 1,
            lease_token: 1,
            event_type: "mystery".into(),
            payload: "{}".into(),
            created_at: 0,
        });
        let mut r = run(RunStatus::Failed);
        r.error = Some("model unavailable for 30m".into());
        let items = build(&r, &[], &[], &events);
        let kinds: Vec<&str> = items.iter().map(|i| i.kind).collect();
        assert_eq!(kinds, ["model_wait", "error", "error"]);
        assert_eq!(items[0].body.as_deref(), Some("529 overloaded"));
        assert!(items[1].title.contains("unreadable event 2"));
        assert_eq!(items[2].body.as_deref(), Some("model unavailable for 30m"));
    }
}
