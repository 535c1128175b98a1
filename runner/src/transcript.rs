//! A run's events as a transcript a person reads: what the user asked, what the model said
//! and which tools it called with what result, and the end. Used by `nightshift demo`,
//! `nightshift run --wait` and `nightshift runs follow`.

use std::time::Duration;

use anyhow::Context;
use nightshift_agent::RunEvent;
use nightshift_llm::ContentBlock;
use nightshift_store::{Event, Run, Store};

/// At most this many lines of a tool result are shown.
const RESULT_LINES: usize = 6;

/// The lines for one stored event (none for bookkeeping events).
pub(crate) fn render(event: &Event) -> Vec<String> {
    render_parts(&event.run_id, event.seq, &event.event_type, &event.payload)
}

/// The lines for event `seq` of run `run_id`, of type `event_type` with the JSON `payload`
/// (what `render` shows, for events read from the HTTP API).
pub fn render_parts(run_id: &str, seq: i64, event_type: &str, payload: &str) -> Vec<String> {
    let Ok(parsed) = RunEvent::parse(event_type, payload) else {
        return vec![format!("[{seq}] (unreadable event)")];
    };
    match parsed {
        RunEvent::RunStarted { agent, .. } => vec![format!("── run started (agent {agent})")],
        RunEvent::UserMessage { message } => vec![format!("user> {}", message.text())],
        RunEvent::AssistantMessage { message, model, .. } => assistant_lines(&message, &model),
        RunEvent::ToolStarted { .. } => Vec::new(),
        RunEvent::ToolResult {
            content,
            is_error,
            interrupted,
            ..
        } => {
            let tag = if interrupted {
                "interrupted"
            } else if is_error {
                "error"
            } else {
                "ok"
            };
            result_lines(&content, tag)
        }
        RunEvent::Compacted { .. } => vec!["── the conversation was compacted".to_string()],
        RunEvent::WakeupScheduled { due_at, reason, .. } => vec![format!(
            "── sleeping until {} ({reason})",
            utc_seconds(due_at)
        )],
        RunEvent::ApprovalRequested { call_id, name, .. } => vec![
            format!("── waiting for approval of {name} ({call_id}):"),
            format!(
                "   nightshift approve {run_id} {call_id}   (or: nightshift deny {run_id} {call_id})"
            ),
        ],
        RunEvent::ApprovalDecided {
            call_id,
            approved,
            by,
            ..
        } => vec![format!(
            "── {call_id} {} by {by}",
            if approved { "approved" } else { "denied" }
        )],
        RunEvent::Resumed { reminder, .. }
        | RunEvent::TaskEnded { reminder, .. }
        | RunEvent::MessageReceived { text: reminder, .. } => {
            reminder.lines().map(|l| format!("» {l}")).collect()
        }
        RunEvent::ModelUnavailable { error, until, .. } => vec![format!(
            "── the model is unreachable ({error}); waiting until {}",
            utc_seconds(until)
        )],
        RunEvent::WorkspacePrepared {
            repo,
            git_ref,
            commit,
            setup,
        } => {
            let mut lines = vec![format!("── workspace: {repo} at {commit} ({git_ref})")];
            lines.extend(setup.iter().map(|c| format!("── setup: {c}")));
            lines
        }
        RunEvent::Forked {
            parent,
            from_turn,
            prompt,
            model,
            tool_results,
            ..
        } => {
            let mut lines = vec![format!(
                "── forked from run {parent} at turn {from_turn}{}",
                model
                    .map(|m| format!(", answered by {m}"))
                    .unwrap_or_default()
            )];
            lines.extend(
                tool_results
                    .keys()
                    .map(|call| format!("── result of {call} replaced")),
            );
            lines.extend(
                prompt
                    .iter()
                    .flat_map(|p| p.lines())
                    .map(|l| format!("» {l}")),
            );
            lines
        }
        RunEvent::McpToolsListed {
            server,
            tools,
            left_out,
        } => {
            let mut lines = vec![format!(
                "── MCP server {server}: {} tool(s) offered",
                tools.len()
            )];
            lines.extend(
                left_out
                    .iter()
                    .map(|t| format!("── {server} tool {} left out: {}", t.tool, t.reason)),
            );
            lines
        }
        RunEvent::Finished { status, .. } => vec![format!("── run {status}")],
    }
}

/// What the model said (its non-empty text) and the tools it called, a line each.
fn assistant_lines(message: &nightshift_llm::Message, model: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text { text } if !text.trim().is_empty() => {
                lines.push(format!("assistant ({model})> {text}"));
            }
            ContentBlock::ToolUse { name, input, .. } => {
                lines.push(format!("  → {name} {input}"));
            }
            _ => {}
        }
    }
    lines
}

/// A tool result's first [`RESULT_LINES`] lines (and how many more there are), the first
/// tagged `[tag]`.
fn result_lines(content: &str, tag: &str) -> Vec<String> {
    let mut lines: Vec<String> = content
        .lines()
        .take(RESULT_LINES)
        .map(|l| format!("  ← {l}"))
        .collect();
    let total = content.lines().count();
    if total > RESULT_LINES {
        lines.push(format!("  ← … {} more lines", total - RESULT_LINES));
    }
    if lines.is_empty() {
        lines.push("  ← (no output)".to_string());
    }
    lines[0] = format!("{} [{tag}]", lines[0]);
    lines
}

/// Epoch milliseconds as an RFC 3339 UTC time to the second (empty when out of range).
fn utc_seconds(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

/// Prints a run's transcript as events arrive, until it reaches a terminal state (or
/// `timeout` passes). The run's state is read before its new events, so the events that led
/// to a terminal state are always printed before returning.
pub(crate) async fn follow(store: &Store, run_id: &str, timeout: Duration) -> anyhow::Result<Run> {
    let deadline = tokio::time::Instant::now().checked_add(timeout);
    let mut seen = 0;
    loop {
        let run = store
            .run(run_id)
            .await?
            .with_context(|| format!("run {run_id} not found"))?;
        for event in store.events(run_id, seen).await? {
            for line in render(&event) {
                println!("{line}");
            }
            seen = event.seq;
        }
        if run.status.is_terminal() {
            return Ok(run);
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            anyhow::bail!(
                "run {run_id} did not finish within {timeout:?} (it is {})",
                run.status
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
