//! What the hostile provider is told to send, and how each step looks on the wire.
//!
//! Guarantees: a [`Step`] is wire-neutral; [`render`] turns it into the exact HTTP answer of
//! the Anthropic Messages API or of OpenAI chat completions, as one JSON body or as SSE when
//! the request asked for a stream. Hostile shapes are explicit: tool calls without ids
//! (`id: None` omits the key), duplicate ids (just repeat one), any stop reason string
//! (mapped to OpenAI's `finish_reason` where one exists, else passed through), cut-off tool
//! input, truncated JSON, garbage SSE and cut streams. Rendering does no I/O.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::thinking_rules as rules;

/// One block of a scripted reply.
#[derive(Debug, Clone)]
pub enum Block {
    Text(String),
    /// A complete tool call; `id: None` sends no id at all.
    ToolUse {
        id: Option<String>,
        name: String,
        input: Value,
    },
    /// A tool call whose input stops mid-JSON (the model hit `max_tokens` writing it).
    CutToolUse {
        id: Option<String>,
        name: String,
        partial_json: String,
    },
    /// The model's reasoning about `thought`: an Anthropic `thinking` block signed by the fake
    /// (streamed as `thinking_delta`s and a `signature_delta`), or a DeepSeek
    /// `reasoning_content` marked by it ([`super::thinking_rules`]).
    Thinking(String),
    /// An Anthropic `redacted_thinking` block standing for the secret (not sent on OpenAI).
    RedactedThinking(String),
}

/// A scripted model reply.
#[derive(Debug, Clone)]
pub struct Reply {
    pub blocks: Vec<Block>,
    /// Anthropic's `stop_reason` vocabulary, or any other string.
    pub stop_reason: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// A body that is not what the status promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// A JSON 200 cut in the middle.
    TruncatedJson,
    /// An SSE 200 whose first `data:` line is not JSON.
    GarbageSse,
    /// An SSE 200 that stops before `message_stop` / `[DONE]`.
    CutStream,
}

/// Releases an outage ([`Step::Down`]) when the test says so, or at a deadline.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    released: Arc<AtomicBool>,
    until: Option<std::time::Instant>,
}

impl Gate {
    /// Down until [`Gate::release`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Down until `at` (or an earlier release).
    #[allow(dead_code)]
    pub fn until(at: std::time::Instant) -> Self {
        Self {
            released: Arc::default(),
            until: Some(at),
        }
    }

    pub fn release(&self) {
        self.released.store(true, Ordering::SeqCst);
    }

    pub fn is_open(&self) -> bool {
        self.released.load(Ordering::SeqCst)
            || self.until.is_some_and(|t| std::time::Instant::now() >= t)
    }
}

/// One step of a conversation's script; each request takes the next step.
#[derive(Debug, Clone)]
pub enum Step {
    Reply(Reply),
    /// An HTTP error with the API's error body.
    HttpError {
        status: u16,
        kind: String,
        message: String,
        retry_after: Option<u64>,
    },
    /// An in-stream `error` event after the stream began (SSE), else an HTTP error.
    #[allow(dead_code)]
    StreamError {
        kind: String,
        message: String,
    },
    Malformed(Malformed),
    /// 529 `overloaded_error` "Overloaded" to every request until the gate opens; the step
    /// is used up only then (the request that finds it open takes the next step).
    Down(Gate),
}

/// A text-only reply ending the turn.
pub fn text(t: &str) -> Step {
    reply(vec![Block::Text(t.into())], "end_turn")
}

/// A reply of `blocks` with `stop_reason`.
pub fn reply(blocks: Vec<Block>, stop_reason: &str) -> Step {
    Step::Reply(Reply {
        blocks,
        stop_reason: stop_reason.into(),
        input_tokens: 20,
        output_tokens: 5,
    })
}

/// A tool call block.
pub fn call(id: Option<&str>, name: &str, input: Value) -> Block {
    Block::ToolUse {
        id: id.map(str::to_string),
        name: name.into(),
        input,
    }
}

/// A reply that only calls tools.
pub fn calls(blocks: Vec<Block>) -> Step {
    reply(blocks, "tool_use")
}

/// Which API a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Anthropic,
    OpenAi,
}

fn sse(body: String) -> Response {
    (
        [
            ("content-type", "text/event-stream"),
            ("cache-control", "no-cache"),
        ],
        body,
    )
        .into_response()
}

fn json_body(v: &Value) -> Response {
    ([("content-type", "application/json")], v.to_string()).into_response()
}

/// The API's error answer.
pub fn error(
    wire: Wire,
    status: u16,
    kind: &str,
    message: &str,
    retry_after: Option<u64>,
) -> Response {
    let body = match wire {
        Wire::Anthropic => json!({"type": "error", "error": {"type": kind, "message": message}}),
        Wire::OpenAi => {
            json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
        }
    };
    let mut resp = (
        StatusCode::from_u16(status).expect("a valid status"),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response();
    if let Some(s) = retry_after {
        resp.headers_mut()
            .insert("retry-after", s.to_string().parse().unwrap());
    }
    resp
}

/// The answer to a request that takes `step` (`stream`: the request asked for SSE).
pub fn render(wire: Wire, step: &Step, model: &str, stream: bool, n: usize) -> Response {
    match step {
        Step::Reply(r) => match (wire, stream) {
            (Wire::Anthropic, false) => json_body(&anthropic_message(r, model, n)),
            (Wire::Anthropic, true) => sse(anthropic_events(r, model, n, None)),
            (Wire::OpenAi, false) => json_body(&openai_completion(r, model, n)),
            (Wire::OpenAi, true) => sse(openai_chunks(r, model, n, true)),
        },
        Step::HttpError {
            status,
            kind,
            message,
            retry_after,
        } => error(wire, *status, kind, message, *retry_after),
        Step::StreamError { kind, message } if stream => {
            let empty = Reply {
                blocks: vec![],
                stop_reason: String::new(),
                input_tokens: 1,
                output_tokens: 0,
            };
            match wire {
                Wire::Anthropic => sse(anthropic_events(&empty, model, n, Some((kind, message)))),
                Wire::OpenAi => sse(format!(
                    "data: {}\n\n",
                    json!({"error": {"message": message, "type": kind, "code": null}})
                )),
            }
        }
        Step::StreamError { kind, message } => error(wire, 500, kind, message, None),
        Step::Down(_) => error(wire, 529, "overloaded_error", "Overloaded", None),
        Step::Malformed(m) => malformed(wire, *m, model, n),
    }
}

fn malformed(wire: Wire, m: Malformed, model: &str, n: usize) -> Response {
    let good = Reply {
        blocks: vec![Block::Text("this reply never arrives whole".into())],
        stop_reason: "end_turn".into(),
        input_tokens: 20,
        output_tokens: 5,
    };
    match m {
        Malformed::TruncatedJson => {
            let full = match wire {
                Wire::Anthropic => anthropic_message(&good, model, n),
                Wire::OpenAi => openai_completion(&good, model, n),
            }
            .to_string();
            (
                [("content-type", "application/json")],
                full[..full.len() / 2].to_string(),
            )
                .into_response()
        }
        Malformed::GarbageSse => sse(match wire {
            Wire::Anthropic => {
                "event: message_start\ndata: {\"type\": \"message_st<<garbage\n\n".to_string()
            }
            Wire::OpenAi => {
                "data: {\"id\": \"chatcmpl-x\", \"choices\": [<<garbage\n\n".to_string()
            }
        }),
        Malformed::CutStream => {
            let full = match wire {
                Wire::Anthropic => anthropic_events(&good, model, n, None),
                Wire::OpenAi => openai_chunks(&good, model, n, true),
            };
            let cut: Vec<&str> = full.split("\n\n").collect();
            sse(cut[..cut.len() / 2].join("\n\n") + "\n\n")
        }
    }
}

fn anthropic_message(r: &Reply, model: &str, n: usize) -> Value {
    let content: Vec<Value> = r
        .blocks
        .iter()
        .map(|b| match b {
            Block::Text(t) => json!({"type": "text", "text": t}),
            Block::ToolUse { id, name, input } => tool_use_json(id, name, input.clone()),
            // The JSON form of a cut-off call: whatever input was parsed so far.
            Block::CutToolUse { id, name, .. } => tool_use_json(id, name, json!({})),
            Block::Thinking(t) => json!({"type": "thinking", "thinking": t,
                                         "signature": rules::signature(t)}),
            Block::RedactedThinking(secret) => {
                json!({"type": "redacted_thinking", "data": rules::redacted_data(secret)})
            }
        })
        .collect();
    json!({
        "id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": r.stop_reason, "stop_sequence": null,
        "usage": {"input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    })
}

fn tool_use_json(id: &Option<String>, name: &str, input: Value) -> Value {
    let mut b = json!({"type": "tool_use", "name": name, "input": input});
    if let Some(id) = id {
        b["id"] = json!(id);
    }
    b
}

fn event(out: &mut String, name: &str, data: Value) {
    out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
}

/// Splits `s` in two at a char boundary near its middle.
fn halves(s: &str) -> (&str, &str) {
    let mut mid = s.len() / 2;
    while !s.is_char_boundary(mid) {
        mid += 1;
    }
    s.split_at(mid)
}

fn anthropic_events(r: &Reply, model: &str, n: usize, error: Option<(&String, &String)>) -> String {
    let mut out = String::new();
    event(
        &mut out,
        "message_start",
        json!({"type": "message_start", "message": {
            "id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": r.input_tokens, "output_tokens": 1,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}}),
    );
    event(&mut out, "ping", json!({"type": "ping"}));
    if let Some((kind, message)) = error {
        event(
            &mut out,
            "error",
            json!({"type": "error", "error": {"type": kind, "message": message}}),
        );
        return out;
    }
    for (i, b) in r.blocks.iter().enumerate() {
        let (start, deltas): (Value, Vec<Value>) = match b {
            Block::Text(t) => {
                let (a, z) = halves(t);
                (
                    json!({"type": "text", "text": ""}),
                    [a, z]
                        .iter()
                        .filter(|s| !s.is_empty())
                        .map(|s| json!({"type": "text_delta", "text": s}))
                        .collect(),
                )
            }
            Block::ToolUse { id, name, input } => {
                let raw = input.to_string();
                let (a, z) = halves(&raw);
                (
                    tool_use_json(id, name, json!({})),
                    vec![
                        json!({"type": "input_json_delta", "partial_json": ""}),
                        json!({"type": "input_json_delta", "partial_json": a}),
                        json!({"type": "input_json_delta", "partial_json": z}),
                    ],
                )
            }
            Block::CutToolUse {
                id,
                name,
                partial_json,
            } => (
                tool_use_json(id, name, json!({})),
                vec![json!({"type": "input_json_delta", "partial_json": partial_json})],
            ),
            Block::Thinking(t) => {
                let (a, z) = halves(t);
                let mut deltas: Vec<Value> = [a, z]
                    .iter()
                    .filter(|s| !s.is_empty())
                    .map(|s| json!({"type": "thinking_delta", "thinking": s}))
                    .collect();
                deltas.push(json!({"type": "signature_delta", "signature": rules::signature(t)}));
                (
                    json!({"type": "thinking", "thinking": "", "signature": ""}),
                    deltas,
                )
            }
            Block::RedactedThinking(secret) => (
                json!({"type": "redacted_thinking", "data": rules::redacted_data(secret)}),
                vec![],
            ),
        };
        event(
            &mut out,
            "content_block_start",
            json!({"type": "content_block_start", "index": i, "content_block": start}),
        );
        for d in deltas {
            event(
                &mut out,
                "content_block_delta",
                json!({"type": "content_block_delta", "index": i, "delta": d}),
            );
        }
        event(
            &mut out,
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        );
    }
    event(
        &mut out,
        "message_delta",
        json!({"type": "message_delta",
               "delta": {"stop_reason": r.stop_reason, "stop_sequence": null},
               "usage": {"output_tokens": r.output_tokens}}),
    );
    event(&mut out, "message_stop", json!({"type": "message_stop"}));
    out
}

/// Anthropic's stop reason as an OpenAI `finish_reason` (unknown ones pass through).
fn finish_reason(stop: &str) -> &str {
    match stop {
        "end_turn" | "stop_sequence" => "stop",
        "tool_use" => "tool_calls",
        "max_tokens" => "length",
        "refusal" => "content_filter",
        other => other,
    }
}

fn openai_call(index: usize, id: &Option<String>, name: &str, args: &str) -> Value {
    let mut c = json!({"index": index, "type": "function",
                       "function": {"name": name, "arguments": args}});
    if let Some(id) = id {
        c["id"] = json!(id);
    }
    c
}

/// The text, the tool calls and the DeepSeek `reasoning_content` of a reply.
type OpenAiParts = (
    String,
    Vec<(Option<String>, String, String)>,
    Option<String>,
);

fn openai_parts(r: &Reply) -> OpenAiParts {
    let mut text = String::new();
    let mut calls = Vec::new();
    let mut reasoning: Option<String> = None;
    for b in &r.blocks {
        match b {
            Block::Text(t) => text.push_str(t),
            Block::Thinking(t) => {
                reasoning
                    .get_or_insert_default()
                    .push_str(&rules::deepseek_reasoning(t));
            }
            Block::RedactedThinking(_) => {}
            Block::ToolUse { id, name, input } => {
                calls.push((id.clone(), name.clone(), input.to_string()))
            }
            Block::CutToolUse {
                id,
                name,
                partial_json,
            } => calls.push((id.clone(), name.clone(), partial_json.clone())),
        }
    }
    (text, calls, reasoning)
}

fn openai_usage(r: &Reply) -> Value {
    json!({"prompt_tokens": r.input_tokens, "completion_tokens": r.output_tokens,
           "total_tokens": r.input_tokens + r.output_tokens})
}

fn openai_completion(r: &Reply, model: &str, n: usize) -> Value {
    let (text, calls, reasoning) = openai_parts(r);
    let mut message = json!({"role": "assistant",
                             "content": if text.is_empty() { Value::Null } else { json!(text) }});
    if let Some(reasoning) = reasoning {
        message["reasoning_content"] = json!(reasoning);
    }
    if !calls.is_empty() {
        let calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (id, name, args))| {
                let mut c = openai_call(i, id, name, args);
                c.as_object_mut().unwrap().remove("index");
                c
            })
            .collect();
        message["tool_calls"] = json!(calls);
    }
    json!({
        "id": format!("chatcmpl-{n}"), "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(&r.stop_reason)}],
        "usage": openai_usage(r),
    })
}

fn openai_chunks(r: &Reply, model: &str, n: usize, usage: bool) -> String {
    let (text, calls, reasoning) = openai_parts(r);
    let mut out = String::new();
    let chunk = |out: &mut String, delta: Value, finish: Value| {
        let c = json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion.chunk",
                       "created": 0, "model": model,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        out.push_str(&format!("data: {c}\n\n"));
    };
    chunk(
        &mut out,
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    );
    let reasoning = reasoning.unwrap_or_default();
    let (a, z) = halves(&reasoning);
    for part in [a, z].into_iter().filter(|s| !s.is_empty()) {
        chunk(
            &mut out,
            json!({"reasoning_content": part, "content": null}),
            Value::Null,
        );
    }
    let (a, z) = halves(&text);
    for part in [a, z].into_iter().filter(|s| !s.is_empty()) {
        chunk(&mut out, json!({"content": part}), Value::Null);
    }
    for (i, (id, name, args)) in calls.iter().enumerate() {
        chunk(
            &mut out,
            json!({"tool_calls": [openai_call(i, id, name, "")]}),
            Value::Null,
        );
        let (a, z) = halves(args);
        for part in [a, z] {
            chunk(
                &mut out,
                json!({"tool_calls": [{"index": i, "function": {"arguments": part}}]}),
                Value::Null,
            );
        }
    }
    chunk(&mut out, json!({}), json!(finish_reason(&r.stop_reason)));
    if usage {
        let c = json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion.chunk",
                       "created": 0, "model": model, "choices": [], "usage": openai_usage(r)});
        out.push_str(&format!("data: {c}\n\n"));
    }
    out.push_str("data: [DONE]\n\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_stream_carries_cut_tool_input_verbatim() {
        let r = Reply {
            blocks: vec![Block::CutToolUse {
                id: Some("toolu_cut".into()),
                name: "pay".into(),
                partial_json: "{\"amount\": 4".into(),
            }],
            stop_reason: "max_tokens".into(),
            input_tokens: 1,
            output_tokens: 1,
        };
        let s = anthropic_events(&r, "m", 1, None);
        assert!(s.contains(r#""partial_json":"{\"amount\": 4""#), "{s}");
        assert!(s.contains(r#""stop_reason":"max_tokens""#), "{s}");
        assert!(s.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
    }

    #[test]
    fn openai_forms_omit_missing_ids_and_map_stop_reasons() {
        let r = Reply {
            blocks: vec![call(None, "pay", json!({"amount": 5}))],
            stop_reason: "tool_use".into(),
            input_tokens: 1,
            output_tokens: 1,
        };
        let c = openai_completion(&r, "m", 1);
        assert_eq!(c["choices"][0]["finish_reason"], "tool_calls");
        assert!(
            c["choices"][0]["message"]["tool_calls"][0]
                .get("id")
                .is_none()
        );
        let s = openai_chunks(&r, "m", 1, true);
        assert!(
            !s.contains("\"id\":\"call") && s.ends_with("data: [DONE]\n\n"),
            "{s}"
        );
        assert_eq!(finish_reason("weird_new_reason"), "weird_new_reason");
    }
}
