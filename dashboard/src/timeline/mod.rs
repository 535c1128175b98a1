//! A run's timeline: a PURE function from the run, its jobs, its tasks and its events to the
//! items the run page shows, in log order, each job (attempt) where it was made and each task
//! after the call that started it.
//!
//! Each item has a stable `key` (`e<seq>` of the event that opened it, `j<id>` for a job)
//! and `last_seq`, the newest event it reflects, so the live stream can send exactly the
//! items that changed (a tool call's result lands on the item its start opened). An event
//! that does not parse becomes an `error` item saying so; nothing is dropped.
//!
//! The parts: [`build`] folds the log in order and places jobs, tasks and the run's end
//! (`build.rs`); what each kind of event makes or changes is in `calls.rs` (tool calls and
//! approvals), `turns.rs` (prompts, messages, model turns, compaction) and `waits.rs`
//! (wakeups, resumes, tasks' endings, model waits, the workspace, the finish); a task's own
//! item in `tasks.rs`; how a long text is collapsed in `collapse.rs`.

mod build;
mod calls;
mod collapse;
mod tasks;
mod turns;
mod waits;

#[cfg(test)]
mod tests;

use nightshift_store::Task;
use serde::Serialize;

use crate::decision::Decision;

pub use build::build;
pub use collapse::{head_and_tail, is_long};

/// One item of the timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Item {
    /// Stable id: `e<seq>` or `j<job id>`.
    pub key: String,
    /// `prompt`, `model_turn`, `tool_call`, `approval`, `wakeup`, `task`, `compaction`,
    /// `model_wait`, `fork`, `mcp`, `attempt`, `result`, `error`.
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
    /// For a model turn: its number in the run's log, counted from 0 (what a fork from it
    /// keeps before making it again).
    pub turn: Option<u64>,
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
            turn: None,
        }
    }

    fn fact(mut self, name: &str, value: impl Into<String>) -> Item {
        self.facts.push((name.into(), value.into()));
        self
    }
}

/// Where and when an event happened: the key of the item it opens (`e<seq>`), its time and
/// its seq.
#[derive(Debug, Clone)]
struct Stamp {
    key: String,
    at: i64,
    seq: i64,
}

impl Stamp {
    /// The item this event opens.
    fn item(&self, kind: &'static str, title: impl Into<String>) -> Item {
        Item::new(self.key.clone(), kind, title, self.at, self.seq)
    }
}

/// The serialised name of an enum value (a stop reason, a durability class).
fn name_of<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
    }
}
