//! `todo_write {todos: [{content, status}]}`: the agent's task list (idempotent).
//!
//! Guarantees: the tool itself keeps no state — the agent loop stores the validated list in
//! run state (use [`parse_todos`] on the call's input) — so calling it twice with the same list
//! has the effect of calling it once. A list is accepted only if every item has non-empty
//! content, a status of `pending`, `in_progress` or `completed`, and at most one item is
//! `in_progress`; otherwise the output is an `is_error` message saying which item is wrong.
//! The rendering ([`render_todos`]) is deterministic.

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::context::ToolContext;
use crate::{Tool, ToolClass, ToolDefinition, ToolOutput};

const MAX_TODOS: usize = 100;

/// State of one todo item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    InProgress,
    Completed,
}

/// One item of the agent's task list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Todo {
    pub content: String,
    pub status: TodoStatus,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TodoInput {
    todos: Vec<Todo>,
}

/// Why a `todo_write` list is refused; `Display` is what the model is told (items are
/// numbered from 1).
#[derive(Debug, thiserror::Error)]
pub enum TodoError {
    /// The input is not a list of todos.
    #[error("invalid input for todo_write: {0}")]
    BadInput(serde_json::Error),
    /// More than [`MAX_TODOS`] items.
    #[error("too many todos ({0}); keep the list to at most {max} items", max = MAX_TODOS)]
    TooMany(usize),
    /// Item `n` has no content.
    #[error("todo #{0} has empty content")]
    EmptyContent(usize),
    /// Several items are `in_progress` (their numbers).
    #[error(
        "{} todos are in_progress (#{}); at most one may be in_progress at a time",
        .0.len(),
        .0.iter().map(usize::to_string).collect::<Vec<_>>().join(", #")
    )]
    SeveralInProgress(Vec<usize>),
}

/// Validate a `todo_write` input and return its list, or why it is refused.
pub fn parse_todos(input: &Value) -> Result<Vec<Todo>, TodoError> {
    let parsed: TodoInput = serde_json::from_value(input.clone()).map_err(TodoError::BadInput)?;
    if parsed.todos.len() > MAX_TODOS {
        return Err(TodoError::TooMany(parsed.todos.len()));
    }
    for (i, todo) in parsed.todos.iter().enumerate() {
        if todo.content.trim().is_empty() {
            return Err(TodoError::EmptyContent(i + 1));
        }
    }
    let in_progress: Vec<usize> = parsed
        .todos
        .iter()
        .enumerate()
        .filter(|(_, t)| t.status == TodoStatus::InProgress)
        .map(|(i, _)| i + 1)
        .collect();
    if in_progress.len() > 1 {
        return Err(TodoError::SeveralInProgress(in_progress));
    }
    Ok(parsed.todos)
}

/// The list as shown to the model: `[x]` completed, `[>]` in progress, `[ ]` pending.
pub fn render_todos(todos: &[Todo]) -> String {
    if todos.is_empty() {
        return "todo list cleared (0 items)".to_string();
    }
    let count = |s: TodoStatus| todos.iter().filter(|t| t.status == s).count();
    let mut out = format!(
        "{} todos: {} completed, {} in progress, {} pending\n",
        todos.len(),
        count(TodoStatus::Completed),
        count(TodoStatus::InProgress),
        count(TodoStatus::Pending)
    );
    for todo in todos {
        let mark = match todo.status {
            TodoStatus::Completed => "[x]",
            TodoStatus::InProgress => "[>]",
            TodoStatus::Pending => "[ ]",
        };
        out.push_str(&format!("{mark} {}\n", todo.content.trim()));
    }
    out
}

/// `todo_write`: see the module documentation.
#[derive(Debug, Default, Clone, Copy)]
pub struct TodoWrite;

impl Tool for TodoWrite {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "todo_write".into(),
            description: "Replace your task list with `todos` and get it back rendered. Keep \
                          exactly one item in_progress while working; mark items completed as \
                          soon as they are done."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "todos": {
                        "type": "array",
                        "maxItems": MAX_TODOS,
                        "items": {
                            "type": "object",
                            "properties": {
                                "content": {"type": "string", "minLength": 1},
                                "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}
                            },
                            "required": ["content", "status"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["todos"],
                "additionalProperties": false
            }),
            class: ToolClass::Idempotent,
        }
    }

    fn call<'a>(&'a self, _ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            match parse_todos(&input) {
                Ok(todos) => ToolOutput::ok(render_todos(&todos)),
                Err(e) => ToolOutput::error(e.to_string()),
            }
        })
    }
}
