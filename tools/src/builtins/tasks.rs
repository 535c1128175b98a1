//! `task_output {task_id, max_bytes?}` (read_only) and `task_stop {task_id}` (idempotent):
//! the model's view of the background commands it started with
//! `run_command {background: true}`.
//!
//! Guarantees: a task is visible only to the run that started it (another run's id reads as
//! unknown); the output shown is the newest part of the task's log, redacted, at most
//! `max_bytes` (default and upper bound: the output cap); stopping a task that already ended
//! changes nothing and reports how it ended. Without a task supervisor (a context that runs
//! no background commands) both are `is_error` outputs that say so.

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use super::parse_input;
use crate::background::TaskView;
use crate::context::ToolContext;
use crate::{Tool, ToolClass, ToolDefinition, ToolOutput};

/// `task_output`: see the module documentation.
#[derive(Debug, Default, Clone, Copy)]
pub struct TaskOutput;

/// `task_stop`: see the module documentation.
#[derive(Debug, Default, Clone, Copy)]
pub struct TaskStop;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputInput {
    task_id: String,
    max_bytes: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StopInput {
    task_id: String,
}

impl Tool for TaskOutput {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "task_output".into(),
            description: "Show a background task's status and the newest part of its output \
                          (stdout and stderr together). Background tasks are started with \
                          run_command and background: true; you also get a reminder when one \
                          ends, so you do not need to poll."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "task_id": {"type": "string", "description": "The id run_command returned."},
                    "max_bytes": {"type": "integer", "minimum": 1, "description": "Show at most this many bytes of the newest output."}
                },
                "required": ["task_id"],
                "additionalProperties": false
            }),
            class: ToolClass::ReadOnly,
        }
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let input: OutputInput = match parse_input("task_output", input) {
                Ok(i) => i,
                Err(e) => return e,
            };
            let Some(tasks) = ctx.tasks() else {
                return unavailable("task_output");
            };
            let cap = ctx.limits().output_cap_bytes;
            let max = input.max_bytes.unwrap_or(cap).clamp(1, cap);
            match tasks.view(ctx.run_id(), input.task_id.trim(), max).await {
                Ok(view) => ToolOutput::ok(render(&view)),
                Err(e) => ToolOutput::error(e.to_string()),
            }
        })
    }
}

impl Tool for TaskStop {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "task_stop".into(),
            description: "Stop a background task and its child processes (SIGTERM, then \
                          SIGKILL). Stopping a task that already ended only reports how it \
                          ended."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "task_id": {"type": "string", "description": "The id run_command returned."}
                },
                "required": ["task_id"],
                "additionalProperties": false
            }),
            class: ToolClass::Idempotent,
        }
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let input: StopInput = match parse_input("task_stop", input) {
                Ok(i) => i,
                Err(e) => return e,
            };
            let Some(tasks) = ctx.tasks() else {
                return unavailable("task_stop");
            };
            let cap = ctx.limits().output_cap_bytes;
            match tasks.stop(ctx.run_id(), input.task_id.trim(), cap).await {
                Ok(view) => ToolOutput::ok(render(&view)),
                Err(e) => ToolOutput::error(e.to_string()),
            }
        })
    }
}

fn unavailable(tool: &str) -> ToolOutput {
    ToolOutput::error(format!(
        "{tool}: background tasks are not available in this daemon"
    ))
}

/// The view as the model reads it: one status line, then the output.
pub(crate) fn render(view: &TaskView) -> String {
    let mut out = format!("task {} (`{}`): {}", view.id, view.command, view.status);
    if let Some(detail) = &view.detail {
        out.push_str(&format!(" — {detail}"));
    }
    if let Some(elapsed) = view.elapsed {
        out.push_str(&format!("; {elapsed:.1} s since it started"));
    }
    out.push_str(&format!("; {} bytes of output", view.output_bytes));
    if view.output.is_empty() {
        out.push_str("\n(no output yet)");
    } else {
        let shown = view.output.len() as u64;
        if shown < view.output_bytes {
            out.push_str(&format!("\n[newest {shown} bytes]"));
        }
        out.push('\n');
        out.push_str(&view.output);
    }
    out
}
