//! What an operator decides on when a call waits for approval, shown wherever the decision is
//! made (the approvals inbox's rows, a run's approval item, the confirm dialog and the no-JS
//! confirm page): the tool, the call's input as pretty JSON, the run's prompt and the text
//! the model wrote with the call. PURE: built from what the store holds (the approval row,
//! the run, its events: the whole log, or only the call's request and the model's messages
//! before it, as [`crate::approvals::decision_of`] reads them); every text was redacted when
//! it was stored.

use nightshift_agent::events::RunEvent;
use nightshift_llm::ContentBlock;
use nightshift_store::{Approval, Event, Run};
use serde::Serialize;

/// A call waiting for a decision, with what led to it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub tool: String,
    /// The call's input, pretty-printed JSON (as stored when it does not parse).
    pub input: String,
    /// The run's prompt (its `input`).
    pub prompt: String,
    /// The text blocks of the assistant message that made the call (empty when it had none).
    pub model_text: String,
}

impl Decision {
    /// The decision on approval `a` of `run`, the model's text read from the run's `events`.
    pub fn of(a: &Approval, run: &Run, events: &[Event]) -> Decision {
        Decision {
            tool: a.tool.clone(),
            input: pretty_input(&a.input),
            prompt: run.input.clone(),
            model_text: model_text(events, &a.call_id).unwrap_or_default(),
        }
    }
}

/// The stored type of a model's message (`RunEvent::AssistantMessage`): where the model's
/// text with a call is read from.
pub const ASSISTANT_MESSAGE: &str = "assistant_message";

/// The stored type of a call's request for approval (`RunEvent::ApprovalRequested`).
pub const APPROVAL_REQUESTED: &str = "approval_requested";

/// Whether `e` is the `approval_requested` event of call `call_id`.
pub fn requests_call(e: &Event, call_id: &str) -> bool {
    matches!(
        RunEvent::parse(&e.event_type, &e.payload),
        Ok(RunEvent::ApprovalRequested { call_id: c, .. }) if c == call_id
    )
}

/// `raw` JSON pretty-printed (exact numbers kept), or `raw` itself when it is not JSON.
pub fn pretty_input(raw: &str) -> String {
    serde_json::from_str::<serde_json::Value>(raw)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| raw.to_string())
}

/// The text blocks of `blocks`, one after another.
pub fn text_of(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text the model wrote with call `call_id`: the assistant message holding the call (its
/// `tool_use` block has the call's id), or failing that the last assistant message before
/// the call's `approval_requested` event. `None` when neither is in `events`.
pub fn model_text(events: &[Event], call_id: &str) -> Option<String> {
    let mut last: Option<String> = None;
    for e in events {
        let Ok(event) = RunEvent::parse(&e.event_type, &e.payload) else {
            continue;
        };
        match event {
            RunEvent::AssistantMessage { message, .. } => {
                let text = text_of(&message.content);
                let made_it = message.content.iter().any(
                    |b| matches!(b, ContentBlock::ToolUse { id, .. } if id.as_str() == call_id),
                );
                if made_it {
                    return Some(text);
                }
                last = Some(text);
            }
            RunEvent::ApprovalRequested { call_id: c, .. } if c == call_id => return last,
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::log;
    use nightshift_llm::{Message, Role, StopReason, Usage};

    fn assistant(blocks: Vec<ContentBlock>) -> RunEvent {
        RunEvent::AssistantMessage {
            message: Message {
                role: Role::Assistant,
                content: blocks,
            },
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
            model: "m".into(),
            cost_usd: 0.0,
            latency_ms: None,
            retries: 0,
        }
    }

    fn text(t: &str) -> ContentBlock {
        ContentBlock::Text { text: t.into() }
    }

    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "deploy".into(),
            input: serde_json::json!({"version": "v2"}),
            unparsed: None,
        }
    }

    fn requested(call: &str) -> RunEvent {
        RunEvent::ApprovalRequested {
            call_id: call.into(),
            name: "deploy".into(),
            input_hash: "h".into(),
            expires_at: 1,
        }
    }

    #[test]
    fn the_model_text_is_the_message_that_made_the_call() {
        let events = log(vec![
            assistant(vec![text("First I look."), call("c1")]),
            assistant(vec![text("Now I ship it."), text("Carefully."), call("c2")]),
            requested("c2"),
            assistant(vec![text("Later words.")]),
        ]);
        assert_eq!(
            model_text(&events, "c2").as_deref(),
            Some("Now I ship it.\nCarefully.")
        );
        assert_eq!(model_text(&events, "c1").as_deref(), Some("First I look."));
        assert_eq!(model_text(&events, "c9"), None);
    }

    #[test]
    fn without_the_call_in_a_message_the_last_one_before_the_request_is_taken() {
        let events = log(vec![
            assistant(vec![text("Older.")]),
            assistant(vec![text("Just before.")]),
            requested("c3"),
            assistant(vec![text("After.")]),
        ]);
        assert_eq!(model_text(&events, "c3").as_deref(), Some("Just before."));
    }

    #[test]
    fn the_types_read_are_those_the_loop_logs_and_a_request_names_its_call() {
        let events = log(vec![assistant(vec![text("Hi.")]), requested("c2")]);
        assert_eq!(events[0].event_type, ASSISTANT_MESSAGE);
        assert_eq!(events[1].event_type, APPROVAL_REQUESTED);
        assert!(requests_call(&events[1], "c2"));
        assert!(!requests_call(&events[1], "c1"), "another call's request");
        assert!(!requests_call(&events[0], "c2"), "not a request");
    }

    #[test]
    fn input_is_pretty_json_with_exact_numbers_or_kept_as_written() {
        assert_eq!(
            pretty_input(r#"{"a":[1],"n":12345678901234567890.5}"#),
            "{\n  \"a\": [\n    1\n  ],\n  \"n\": 12345678901234567890.5\n}"
        );
        assert_eq!(pretty_input("not json {"), "not json {");
    }
}
