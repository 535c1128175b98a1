//! The request rules the real APIs enforce, as pure functions over a parsed request body.
//!
//! Guarantees: [`anthropic`] and [`openai`] return `Err` with a message of the kind the real
//! API sends (naming the message index) exactly when a body breaks one of the rules below, and
//! `Ok` otherwise. They do no I/O; the hostile server answers 400 with the message.
//!
//! Anthropic Messages: `messages` is a non-empty array whose first message is `user`; roles
//! alternate; every message has non-empty content except an optional final assistant message;
//! no text block is empty; every `tool_result` answers a `tool_use` of the message right
//! before it and comes before any other block of its message; every `tool_use` of a non-final
//! assistant message has exactly one `tool_result` in the next message; `tool_use` ids are
//! unique across the request and match `^[a-zA-Z0-9_-]+$`.
//!
//! OpenAI chat completions: every assistant message has content or `tool_calls`; every
//! `tool` message answers a `tool_call` of the assistant message before it (only `tool`
//! messages between); every `tool_call` is answered exactly once; `tool_call` ids are
//! non-empty and unique across the request.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

const EMPTY_CONTENT: &str =
    "all messages must have non-empty content except for the optional final assistant message";

/// The content blocks of an Anthropic message (a string is one text block).
fn blocks(message: &Value) -> Vec<Value> {
    match &message["content"] {
        Value::String(s) => vec![serde_json::json!({"type": "text", "text": s})],
        Value::Array(a) => a.clone(),
        _ => Vec::new(),
    }
}

fn block_type(block: &Value) -> &str {
    block["type"].as_str().unwrap_or_default()
}

fn valid_tool_use_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks an Anthropic Messages request body.
pub fn anthropic(body: &Value) -> Result<(), String> {
    let messages = body["messages"]
        .as_array()
        .ok_or("messages: Field required")?;
    if messages.is_empty() {
        return Err("messages: at least one message is required".into());
    }
    let last = messages.len() - 1;
    let mut seen_ids = BTreeSet::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or_default();
        if !matches!(role, "user" | "assistant") {
            return Err(format!(
                "messages.{i}.role: Input should be 'user' or 'assistant'"
            ));
        }
        if i == 0 && role != "user" {
            return Err("messages: first message must use the \"user\" role".into());
        }
        if i > 0 && messages[i - 1]["role"] == m["role"] {
            return Err(format!(
                "messages.{i}: roles must alternate between \"user\" and \"assistant\", but \
                 found multiple \"{role}\" roles in a row"
            ));
        }
        let content = blocks(m);
        let empty = match &m["content"] {
            Value::String(s) => s.is_empty(),
            _ => content.is_empty(),
        };
        if empty && !(i == last && role == "assistant") {
            return Err(format!("messages.{i}: {EMPTY_CONTENT}"));
        }
        let mut other_seen = false;
        for (j, b) in content.iter().enumerate() {
            match block_type(b) {
                "text" if b["text"].as_str().unwrap_or_default().is_empty() => {
                    return Err(format!(
                        "messages.{i}.content.{j}.text: text content blocks must be non-empty"
                    ));
                }
                "tool_use" => {
                    if role != "assistant" {
                        return Err(format!(
                            "messages.{i}.content.{j}: tool_use blocks are only allowed in \
                             assistant messages"
                        ));
                    }
                    let id = b["id"].as_str().unwrap_or_default();
                    if !valid_tool_use_id(id) {
                        return Err(format!(
                            "messages.{i}.content.{j}.tool_use.id: String should match pattern \
                             '^[a-zA-Z0-9_-]+$' (got {id:?})"
                        ));
                    }
                    if !seen_ids.insert(id.to_string()) {
                        return Err(format!(
                            "messages.{i}.content.{j}: `tool_use` ids must be unique (found \
                             {id} more than once)"
                        ));
                    }
                }
                "tool_result" => {
                    if other_seen {
                        return Err(format!(
                            "messages.{i}.content.{j}: tool_result blocks must come before any \
                             other content in a user message"
                        ));
                    }
                }
                _ => other_seen = true,
            }
            if block_type(b) == "tool_use" {
                other_seen = true;
            }
        }
        check_results_answer(messages, i)?;
    }
    Ok(())
}

/// The tool_result blocks of message `i` answer the tool_use blocks of message `i - 1`, and
/// (when message `i` is an assistant message that is not the last) its tool_use blocks are
/// each answered once by message `i + 1`.
fn check_results_answer(messages: &[Value], i: usize) -> Result<(), String> {
    let m = &messages[i];
    let ids_of = |m: &Value, ty: &str, field: &str| -> Vec<String> {
        blocks(m)
            .iter()
            .filter(|b| block_type(b) == ty)
            .map(|b| b[field].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let results = ids_of(m, "tool_result", "tool_use_id");
    if !results.is_empty() {
        let asked: BTreeSet<String> = if i == 0 {
            BTreeSet::new()
        } else {
            ids_of(&messages[i - 1], "tool_use", "id")
                .into_iter()
                .collect()
        };
        if asked.is_empty() {
            return Err(format!(
                "messages.{i}: `tool_result` block(s) provided when previous message does not \
                 contain any `tool_use` blocks"
            ));
        }
        for id in &results {
            if !asked.contains(id) {
                return Err(format!(
                    "messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. \
                     Each `tool_result` block must have a corresponding `tool_use` block in the \
                     previous message."
                ));
            }
        }
    }
    if m["role"] == "assistant" && i + 1 < messages.len() {
        let uses = ids_of(m, "tool_use", "id");
        let answers = ids_of(&messages[i + 1], "tool_result", "tool_use_id");
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for a in &answers {
            *count.entry(a.as_str()).or_default() += 1;
        }
        let missing: Vec<&str> = uses
            .iter()
            .map(String::as_str)
            .filter(|id| !count.contains_key(id))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "messages.{i}: `tool_use` ids were found without `tool_result` blocks \
                 immediately after: {}. Each `tool_use` block must have a corresponding \
                 `tool_result` block in the next message.",
                missing.join(", ")
            ));
        }
        if let Some((id, _)) = count.iter().find(|(_, n)| **n > 1) {
            return Err(format!(
                "messages.{}: each `tool_use` must have a single result. Found multiple \
                 `tool_result` blocks with id: {id}",
                i + 1
            ));
        }
    }
    Ok(())
}

/// Checks an OpenAI chat completions request body.
pub fn openai(body: &Value) -> Result<(), String> {
    let messages = body["messages"]
        .as_array()
        .ok_or("'messages' is a required property")?;
    if messages.is_empty() {
        return Err("'messages' must contain at least one message".into());
    }
    let mut seen_ids = BTreeSet::new();
    // The open tool calls of the latest assistant message, and how often each was answered.
    let mut open: Option<(usize, BTreeMap<String, usize>)> = None;
    let close = |open: &mut Option<(usize, BTreeMap<String, usize>)>| -> Result<(), String> {
        if let Some((at, calls)) = open.take() {
            let missing: Vec<&str> = calls
                .iter()
                .filter(|(_, n)| **n == 0)
                .map(|(id, _)| id.as_str())
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "messages[{at}]: An assistant message with 'tool_calls' must be followed by \
                     tool messages responding to each 'tool_call_id'. The following \
                     tool_call_ids did not have response messages: {}",
                    missing.join(", ")
                ));
            }
        }
        Ok(())
    };
    for (i, m) in messages.iter().enumerate() {
        match m["role"].as_str().unwrap_or_default() {
            "tool" => {
                let id = m["tool_call_id"].as_str().unwrap_or_default();
                match open.as_mut().and_then(|(_, calls)| calls.get_mut(id)) {
                    Some(n) if *n == 0 => *n += 1,
                    Some(_) => {
                        return Err(format!(
                            "messages[{i}]: tool_call_id {id} was already answered; each \
                             tool call takes exactly one tool message"
                        ));
                    }
                    None => {
                        return Err(format!(
                            "messages[{i}]: messages with role 'tool' must be a response to a \
                             preceeding message with 'tool_calls' (no tool call {id:?})"
                        ));
                    }
                }
            }
            role => {
                close(&mut open)?;
                if role != "assistant" {
                    continue;
                }
                let calls = m["tool_calls"].as_array().cloned().unwrap_or_default();
                let has_text = m["content"].as_str().is_some_and(|s| !s.is_empty());
                if !has_text && calls.is_empty() {
                    return Err(format!(
                        "messages[{i}]: an assistant message must have 'content' or \
                         'tool_calls'"
                    ));
                }
                if calls.is_empty() {
                    continue;
                }
                let mut mine = BTreeMap::new();
                for (j, c) in calls.iter().enumerate() {
                    let id = c["id"].as_str().unwrap_or_default();
                    if id.is_empty() {
                        return Err(format!(
                            "messages[{i}].tool_calls[{j}].id: expected a non-empty string"
                        ));
                    }
                    if !seen_ids.insert(id.to_string()) {
                        return Err(format!(
                            "messages[{i}].tool_calls[{j}].id: duplicate tool_call id {id} in \
                             the request"
                        ));
                    }
                    mine.insert(id.to_string(), 0);
                }
                open = Some((i, mine));
            }
        }
    }
    close(&mut open)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": [{"type": "text", "text": text}]})
    }
    fn tool_use(ids: &[&str]) -> Value {
        let blocks: Vec<Value> = ids
            .iter()
            .map(|id| json!({"type": "tool_use", "id": id, "name": "t", "input": {}}))
            .collect();
        json!({"role": "assistant", "content": blocks})
    }
    fn results(ids: &[&str]) -> Value {
        let blocks: Vec<Value> = ids
            .iter()
            .map(|id| json!({"type": "tool_result", "tool_use_id": id, "content": "ok"}))
            .collect();
        json!({"role": "user", "content": blocks})
    }
    fn a(messages: Vec<Value>) -> Result<(), String> {
        anthropic(&json!({ "messages": messages }))
    }

    #[test]
    fn anthropic_accepts_a_valid_conversation_and_a_final_empty_assistant_message() {
        a(vec![
            user("hi"),
            tool_use(&["toolu_1", "toolu_2"]),
            results(&["toolu_2", "toolu_1"]),
            json!({"role": "assistant", "content": [{"type": "text", "text": "done"}]}),
            user("again"),
            json!({"role": "assistant", "content": []}),
        ])
        .unwrap();
        anthropic(&json!({"messages": [{"role": "user", "content": "plain string"}]})).unwrap();
    }

    #[test]
    fn anthropic_refuses_empty_or_misordered_conversations() {
        assert!(a(vec![]).unwrap_err().contains("at least one message"));
        let err = a(vec![json!({"role": "assistant", "content": "x"})]).unwrap_err();
        assert!(
            err.contains("first message must use the \"user\" role"),
            "{err}"
        );
        let err = a(vec![user("a"), user("b")]).unwrap_err();
        assert!(err.contains("roles must alternate"), "{err}");
        let err = a(vec![
            user("a"),
            json!({"role": "assistant", "content": []}),
            user("b"),
        ])
        .unwrap_err();
        assert!(
            err.starts_with("messages.1: ") && err.contains(EMPTY_CONTENT),
            "{err}"
        );
        let err = a(vec![json!({"role": "user", "content": ""})]).unwrap_err();
        assert!(err.contains(EMPTY_CONTENT), "{err}");
        let err = a(vec![
            json!({"role": "user", "content": [{"type": "text", "text": ""}]}),
        ])
        .unwrap_err();
        assert!(
            err.contains("text content blocks must be non-empty"),
            "{err}"
        );
    }

    #[test]
    fn anthropic_refuses_unanswered_unexpected_and_repeated_tool_results() {
        let err = a(vec![user("a"), tool_use(&["t1", "t2"]), results(&["t1"])]).unwrap_err();
        assert!(
            err.contains(
                "`tool_use` ids were found without `tool_result` blocks immediately after: t2"
            ),
            "{err}"
        );
        let err = a(vec![user("a"), tool_use(&["t1"]), results(&["t1", "t9"])]).unwrap_err();
        assert!(
            err.contains("unexpected `tool_use_id`") && err.contains("t9"),
            "{err}"
        );
        let err = a(vec![user("a"), tool_use(&["t1"]), results(&["t1", "t1"])]).unwrap_err();
        assert!(
            err.contains("Found multiple `tool_result` blocks with id: t1"),
            "{err}"
        );
        let err = a(vec![results(&["t1"])]).unwrap_err();
        assert!(
            err.contains("previous message does not contain any `tool_use`"),
            "{err}"
        );
        let mut late = results(&["t1"]);
        late["content"]
            .as_array_mut()
            .unwrap()
            .insert(0, json!({"type": "text", "text": "first"}));
        let err = a(vec![user("a"), tool_use(&["t1"]), late]).unwrap_err();
        assert!(err.contains("must come before any other content"), "{err}");
    }

    #[test]
    fn anthropic_refuses_duplicate_and_malformed_tool_use_ids() {
        let err = a(vec![
            user("a"),
            tool_use(&["same", "same"]),
            results(&["same"]),
        ])
        .unwrap_err();
        assert!(err.contains("ids must be unique"), "{err}");
        let err = a(vec![
            user("a"),
            tool_use(&["same"]),
            results(&["same"]),
            tool_use(&["same"]),
            results(&["same"]),
        ])
        .unwrap_err();
        assert!(err.contains("ids must be unique"), "{err}");
        for bad in ["", "call 0", "id:1"] {
            let err = a(vec![user("a"), tool_use(&[bad]), results(&[bad])]).unwrap_err();
            assert!(err.contains("should match pattern"), "{bad:?}: {err}");
        }
    }

    fn o(messages: Vec<Value>) -> Result<(), String> {
        openai(&json!({ "messages": messages }))
    }
    fn calls(ids: &[&str]) -> Value {
        let calls: Vec<Value> = ids
            .iter()
            .map(|id| json!({"id": id, "type": "function", "function": {"name": "t", "arguments": "{}"}}))
            .collect();
        json!({"role": "assistant", "content": null, "tool_calls": calls})
    }
    fn tool(id: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": "ok"})
    }

    #[test]
    fn openai_accepts_a_valid_conversation() {
        o(vec![
            json!({"role": "system", "content": "s"}),
            json!({"role": "user", "content": "hi"}),
            calls(&["c1", "c2"]),
            tool("c2"),
            tool("c1"),
            json!({"role": "assistant", "content": "done"}),
            json!({"role": "user", "content": "more"}),
        ])
        .unwrap();
    }

    #[test]
    fn openai_refuses_bad_tool_calls_and_empty_assistant_messages() {
        let u = || json!({"role": "user", "content": "hi"});
        let err = o(vec![u(), json!({"role": "assistant", "content": null})]).unwrap_err();
        assert!(err.contains("must have 'content' or 'tool_calls'"), "{err}");
        let err = o(vec![u(), json!({"role": "assistant", "content": ""})]).unwrap_err();
        assert!(err.contains("must have 'content' or 'tool_calls'"), "{err}");
        let err = o(vec![u(), calls(&["c1", "c2"]), tool("c1"), u()]).unwrap_err();
        assert!(err.contains("did not have response messages: c2"), "{err}");
        let err = o(vec![u(), calls(&["c1"]), tool("c1"), tool("c1")]).unwrap_err();
        assert!(err.contains("already answered"), "{err}");
        let err = o(vec![u(), tool("c1")]).unwrap_err();
        assert!(
            err.contains("must be a response to a preceeding message"),
            "{err}"
        );
        let err = o(vec![u(), calls(&["c1"]), tool("c1"), u(), tool("c1")]).unwrap_err();
        assert!(
            err.contains("must be a response to a preceeding message"),
            "{err}"
        );
        let err = o(vec![u(), calls(&[""]), tool("")]).unwrap_err();
        assert!(err.contains("non-empty string"), "{err}");
        let err = o(vec![u(), calls(&["c1", "c1"]), tool("c1")]).unwrap_err();
        assert!(err.contains("duplicate tool_call id c1"), "{err}");
        let err = o(vec![
            u(),
            calls(&["c"]),
            tool("c"),
            calls(&["c"]),
            tool("c"),
        ])
        .unwrap_err();
        assert!(err.contains("duplicate tool_call id c"), "{err}");
    }
}
