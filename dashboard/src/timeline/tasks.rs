//! A background task's own item: its row as the store holds it (status, daemon, output size,
//! exit code, how long it took, how it ended) and its output.
//!
//! What it guarantees: a running task shows the newest output this daemon's disk holds, or
//! says which daemon runs it when the log is elsewhere, and is marked `running`; an ended
//! one shows its stored tail. Where it goes (after the call that started it) is `build`'s.

use nightshift_store::TaskStatus;

use super::{Item, TaskView};
use crate::format;

/// A task's item and the call that started it (pure).
pub(super) fn task_item(view: &TaskView) -> (String, Item) {
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
