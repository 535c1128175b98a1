//! [`build`]: the run's events folded in seq order into items, then each task placed after
//! the call that started it, each job (attempt) before the first item logged after it was
//! made, and the run's end (its result, its error) last.
//!
//! What it guarantees: every event is reflected on exactly one item (one that does not parse
//! becomes an `error` item naming it); an event that changes an earlier item (a result, a
//! decision, a wake-up, a re-run) moves that item's `last_seq` to its own seq; the result is
//! the same for the same input (PURE).

use std::collections::HashMap;

use nightshift_agent::events::RunEvent;
use nightshift_store::{Event, Job, Run};

use super::tasks::task_item;
use super::{Item, Stamp, TaskView};

/// The timeline of `run` from its `events` (in seq order), `jobs` and `tasks`.
pub fn build(run: &Run, jobs: &[Job], tasks: &[TaskView], events: &[Event]) -> Vec<Item> {
    let mut b = Builder {
        run,
        items: Vec::new(),
        task_items: tasks.iter().map(task_item).collect(),
        calls: HashMap::new(),
        turns: 0,
    };
    for e in events {
        b.event(e);
    }
    let mut items = b.place_tasks();
    place_jobs(&mut items, jobs);
    push_end(&mut items, run, jobs);
    items
}

/// The timeline while the log is folded.
pub(super) struct Builder<'a> {
    pub(super) run: &'a Run,
    /// The items so far, in log order.
    pub(super) items: Vec<Item>,
    /// Each task's item and the call that started it, placed at the end.
    pub(super) task_items: Vec<(String, Item)>,
    /// Each call the model made: its input (pretty JSON) and the text of the message that
    /// made it, for the approval it may wait for.
    pub(super) calls: HashMap<String, (String, String)>,
    /// Model turns so far.
    pub(super) turns: u64,
}

impl Builder<'_> {
    /// The newest item of `kind` for call `call`.
    pub(super) fn find(&self, kind: &str, call: &str) -> Option<usize> {
        find(&self.items, kind, call)
    }

    /// Folds one stored event in.
    fn event(&mut self, e: &Event) {
        let s = Stamp {
            key: format!("e{}", e.seq),
            at: e.created_at,
            seq: e.seq,
        };
        match RunEvent::parse(&e.event_type, &e.payload) {
            Ok(event) => self.apply(s, event),
            Err(why) => {
                let it = s
                    .item("error", format!("unreadable event {}", e.seq))
                    .fact("why", why.to_string());
                self.items.push(it);
            }
        }
    }

    /// What each kind of event makes or changes.
    fn apply(&mut self, s: Stamp, event: RunEvent) {
        match event {
            RunEvent::RunStarted { .. } => {}
            RunEvent::UserMessage { message } => self.user_message(s, &message),
            turn @ RunEvent::AssistantMessage { .. } => self.model_turn(s, turn),
            RunEvent::ToolStarted {
                call_id,
                name,
                input,
                durability,
                ..
            } => self.tool_started(s, call_id, name, &input, &durability),
            RunEvent::ToolResult {
                call_id,
                content,
                is_error,
                interrupted,
            } => self.tool_result(s, call_id, content, is_error, interrupted),
            RunEvent::ApprovalRequested {
                call_id,
                name,
                expires_at,
                ..
            } => self.approval_requested(s, call_id, name, expires_at),
            RunEvent::ApprovalDecided {
                call_id,
                approved,
                reason,
                by,
            } => self.approval_decided(s, &call_id, approved, reason, by),
            RunEvent::WakeupScheduled {
                call_id,
                due_at,
                reason,
                scheduled_at,
            } => self.wakeup_scheduled(s, call_id, due_at, reason, scheduled_at),
            RunEvent::Resumed { job_id, reminder } => self.resumed(s, job_id, reminder),
            RunEvent::MessageReceived { job_id, text } => self.message_received(s, job_id, text),
            RunEvent::TaskEnded {
                task_id,
                status,
                reminder,
            } => self.task_ended(s, &task_id, status, reminder),
            RunEvent::Compacted {
                summary,
                kept_from,
                cost_usd,
                ..
            } => self.compacted(s, summary, kept_from, cost_usd),
            RunEvent::ModelUnavailable {
                error,
                since,
                until,
            } => self.model_wait(s, error, since, until),
            RunEvent::WorkspacePrepared {
                repo,
                git_ref,
                commit,
                setup,
            } => self.workspace_prepared(s, repo, git_ref, commit, &setup),
            RunEvent::McpToolsListed {
                server,
                tools,
                left_out,
            } => self.mcp_tools_listed(s, server, &tools, &left_out),
            RunEvent::Forked {
                parent,
                from_turn,
                prompt,
                model,
                tool_results,
                ..
            } => self.forked(
                s,
                parent,
                from_turn,
                prompt,
                model,
                tool_results.into_keys(),
            ),
            RunEvent::Finished { status, detail } => self.finished(s, status.as_str(), detail),
        }
    }

    /// The items with each task right after the call that started it (tasks of one call in
    /// start order).
    fn place_tasks(self) -> Vec<Item> {
        let mut items = self.items;
        for (call_id, it) in self.task_items.into_iter().rev() {
            match find(&items, "tool_call", &call_id) {
                Some(i) => items.insert(i + 1, it),
                None => items.push(it),
            }
        }
        items
    }
}

/// The newest item of `kind` for call `call` in `items`.
fn find(items: &[Item], kind: &str, call: &str) -> Option<usize> {
    items
        .iter()
        .rposition(|i| i.kind == kind && i.call_id.as_deref() == Some(call))
}

/// Each job's item, in time order: before the first item logged after it was made (a
/// resume job lands after the wakeup or approval that made it).
fn place_jobs(items: &mut Vec<Item>, jobs: &[Job]) {
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
        let at = items
            .iter()
            .position(|i| i.last_seq > 0 && i.at > j.created_at)
            .unwrap_or(items.len());
        items.insert(at, it);
    }
}

/// A terminal run's result (when no `finished` event showed it) and its error (the run's,
/// or failing that its newest job's).
fn push_end(items: &mut Vec<Item>, run: &Run, jobs: &[Job]) {
    if !run.status.is_terminal() {
        return;
    }
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
