//! What a run waits on and how it ends, on the timeline: wakeups and resumes, background
//! tasks' endings, the model being unavailable, the workspace prepared, the finish.
//!
//! What it guarantees: a resume lands on the newest wakeup that has not woken yet (as the
//! time it woke), and only a resume with no such wakeup gets an item of its own; a task's
//! ending lands on the task's own item when the run has its row, else it is an item of its
//! own with the reminder the model got; the finish is a `result` when the run succeeded and
//! an `error` otherwise.

use super::Stamp;
use super::build::Builder;
use crate::format;

impl Builder<'_> {
    pub(super) fn wakeup_scheduled(
        &mut self,
        s: Stamp,
        call_id: String,
        due_at: i64,
        reason: String,
        scheduled_at: i64,
    ) {
        let mut it = s
            .item("wakeup", "sleeps")
            .fact("slept", format::utc(scheduled_at))
            .fact("due", format::utc(due_at))
            .fact("why", reason);
        it.call_id = Some(call_id);
        self.items.push(it);
    }

    pub(super) fn resumed(&mut self, s: Stamp, job_id: i64, reminder: String) {
        let open = self
            .items
            .iter()
            .rposition(|i| i.kind == "wakeup" && !i.facts.iter().any(|(n, _)| n == "woke"));
        match open {
            Some(idx) => {
                let it = &mut self.items[idx];
                it.facts.push(("woke".into(), format::utc(s.at)));
                it.last_seq = s.seq;
            }
            None => {
                let mut it = s.item("wakeup", "resumed").fact("job", job_id.to_string());
                it.body = Some(reminder);
                self.items.push(it);
            }
        }
    }

    pub(super) fn task_ended(&mut self, s: Stamp, task_id: &str, status: String, reminder: String) {
        let key = format!("task-{task_id}");
        if let Some((_, it)) = self.task_items.iter_mut().find(|(_, i)| i.key == key) {
            it.facts.push(("reported".into(), format::utc(s.at)));
            it.last_seq = s.seq;
            return;
        }
        let mut it = s
            .item("task", format!("background task {task_id}"))
            .fact("status", status);
        it.body = Some(reminder);
        self.items.push(it);
    }

    pub(super) fn model_wait(&mut self, s: Stamp, error: String, since: i64, until: i64) {
        let mut it = s
            .item("model_wait", "model unavailable: waiting")
            .fact("since", format::utc(since))
            .fact("until", format::utc(until));
        it.body = Some(error);
        self.items.push(it);
    }

    pub(super) fn workspace_prepared(
        &mut self,
        s: Stamp,
        repo: String,
        git_ref: String,
        commit: String,
        setup: &[String],
    ) {
        let mut it = s
            .item("workspace", "workspace prepared")
            .fact("repository", repo)
            .fact("ref", git_ref)
            .fact("commit", commit);
        if !setup.is_empty() {
            it.body = Some(setup.join("\n"));
        }
        self.items.push(it);
    }

    /// `mcp_tools_listed`: what an MCP server offered the run (its tools and classes), and
    /// what it listed that is not offered.
    pub(super) fn mcp_tools_listed(
        &mut self,
        s: Stamp,
        server: String,
        tools: &[nightshift_tools::ToolDefinition],
        left_out: &[nightshift_agent::LeftOutTool],
    ) {
        let mut it = s
            .item("mcp", "MCP tools listed")
            .fact("server", server)
            .fact("offered", tools.len().to_string());
        let mut lines: Vec<String> = tools
            .iter()
            .map(|t| format!("{} ({})", t.name, t.class))
            .collect();
        lines.extend(
            left_out
                .iter()
                .map(|t| format!("left out: {} — {}", t.tool, t.reason)),
        );
        if !lines.is_empty() {
            it.body = Some(lines.join("\n"));
        }
        self.items.push(it);
    }

    /// `forked`: where this run branched off its parent, and what it changed.
    pub(super) fn forked(
        &mut self,
        s: Stamp,
        parent: String,
        from_turn: u64,
        prompt: Option<String>,
        model: Option<String>,
        replaced: impl Iterator<Item = String>,
    ) {
        let mut it = s
            .item(
                "fork",
                format!("forked from run {parent} at turn {from_turn}"),
            )
            .fact("parent", parent)
            .fact("from turn", from_turn.to_string());
        if let Some(model) = model {
            it = it.fact("model", model);
        }
        let replaced: Vec<String> = replaced.collect();
        if !replaced.is_empty() {
            it = it.fact("results replaced", replaced.join(", "));
        }
        it.body = prompt;
        self.items.push(it);
    }

    pub(super) fn finished(&mut self, s: Stamp, status: &str, detail: Option<String>) {
        let kind = if status == "succeeded" {
            "result"
        } else {
            "error"
        };
        let mut it = s.item(kind, format!("finished: {status}"));
        it.body = detail;
        self.items.push(it);
    }
}
