//! Reading a chat completion: one JSON body or a stream of `data:` chunks, both collected
//! into the same [`Collected`] and turned into the reply by one function, so that the two
//! forms of the same answer give the same [`ModelResponse`].
//!
//! Guarantees (with those in `openai.rs`):
//! - A 200 that is not JSON or has the wrong shape, a completion without choices or a
//!   `finish_reason`, and a garbage chunk are [`ProviderError::Malformed`], naming what was
//!   wrong and quoting the start of it.
//! - An `{"error":{…}}` object, as the body or inside the stream, is the error its numeric
//!   `code` names ([`stream_error`]); one that says the context is too long is
//!   [`ProviderError::ContextTooLong`].
//! - Only the first choice is read (in a stream, the one with index 0). The reply holds the
//!   reasoning first, then the text, then a refusal (which makes the stop reason `Refusal`),
//!   then the tool calls in the order of their index.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::http;
use crate::message::{ModelResponse, StopReason, Usage};
use crate::provider::{ProviderError, says_context_too_long};
use crate::reply::{Draft, response, stop_reason};
use crate::sse::SseEvent;
use crate::wire::StreamDecoder;

#[derive(Debug, Default, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Debug, Default, Deserialize)]
struct PromptDetails {
    cached_tokens: Option<u64>,
}

impl WireUsage {
    fn canonical(&self) -> Usage {
        let cached = self
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0);
        Usage {
            input_tokens: self.prompt_tokens.saturating_sub(cached),
            output_tokens: self.completion_tokens,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: cached,
        }
    }
}

#[derive(Debug, Deserialize)]
struct Completion {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    choices: Vec<Choice>,
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    message: ChoiceMessage,
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ChoiceMessage {
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
    refusal: Option<String>,
    #[serde(flatten)]
    reasoning: WireReasoning,
}

/// The reasoning fields of a message or a delta, as compatible servers name them.
#[derive(Debug, Default, Deserialize)]
struct WireReasoning {
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    reasoning_details: Option<Vec<Value>>,
}

impl WireReasoning {
    /// The field the text came in, and the text (`reasoning_content` wins when both came).
    fn text(&self) -> Option<(&'static str, &str)> {
        match (&self.reasoning_content, &self.reasoning) {
            (Some(t), _) => Some(("reasoning_content", t)),
            (None, Some(t)) => Some(("reasoning", t)),
            (None, None) => None,
        }
    }
}

/// The fields of a `reasoning_details` item that arrive in pieces over a stream.
const STREAMED_DETAIL_FIELDS: [&str; 4] = ["text", "summary", "data", "signature"];

/// Accumulates reasoning over a stream's deltas.
#[derive(Default)]
struct ReasoningAcc {
    field: Option<&'static str>,
    text: String,
    /// `reasoning_details` items by their `index`: [`STREAMED_DETAIL_FIELDS`] concatenated,
    /// every other field set by its latest fragment.
    details: BTreeMap<u64, Map<String, Value>>,
}

impl ReasoningAcc {
    fn add(&mut self, r: WireReasoning) {
        if let Some((field, text)) = r.text() {
            self.field.get_or_insert(field);
            self.text.push_str(text);
        }
        for (pos, item) in r
            .reasoning_details
            .unwrap_or_default()
            .into_iter()
            .enumerate()
        {
            let Value::Object(item) = item else { continue };
            let index = item
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(pos as u64);
            let acc = self.details.entry(index).or_default();
            for (k, v) in item {
                match (acc.get_mut(&k), &v) {
                    (Some(Value::String(have)), Value::String(more))
                        if STREAMED_DETAIL_FIELDS.contains(&k.as_str()) =>
                    {
                        have.push_str(more)
                    }
                    _ => {
                        acc.insert(k, v);
                    }
                }
            }
        }
    }

    fn draft(self) -> Option<Draft> {
        let details = (!self.details.is_empty())
            .then(|| Value::Array(self.details.into_values().map(Value::Object).collect()));
        if self.field.is_none() && details.is_none() {
            return None;
        }
        Some(Draft::Reasoning {
            text: self.text,
            field: self.field.unwrap_or("reasoning_content").to_string(),
            details,
        })
    }
}

#[derive(Debug, Deserialize)]
struct WireToolCall {
    id: Option<String>,
    function: WireFunction,
}

#[derive(Debug, Deserialize)]
struct WireFunction {
    name: String,
    /// A JSON string per the spec; some servers send the object itself.
    #[serde(default)]
    arguments: Value,
}

fn arguments_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Maps a `finish_reason` (knowing whether the reply carries tool calls).
fn finish(reason: &str, has_tool_calls: bool) -> StopReason {
    use StopReason as S;
    match reason {
        "tool_calls" | "function_call" => S::ToolUse,
        "stop" if has_tool_calls => S::ToolUse,
        "stop" => S::EndTurn,
        "length" => S::MaxTokens,
        "content_filter" => S::Refusal,
        // Text Generation Inference ends a turn with `eos_token`; Mistral says
        // `model_length` when the context window is full.
        "eos_token" => S::EndTurn,
        "model_length" => S::ModelContextWindowExceeded,
        other => stop_reason(other),
    }
}

/// Reads a non-streamed completion.
pub(super) fn parse_completion(body: &[u8]) -> Result<ModelResponse, ProviderError> {
    let malformed = |e: serde_json::Error| {
        ProviderError::Malformed(format!(
            "chat completion is not valid ({e}); body starts: {}",
            http::truncate(&String::from_utf8_lossy(body), 200)
        ))
    };
    let value: Value = serde_json::from_slice(body).map_err(malformed)?;
    if let Some(err) = value.get("error").filter(|e| !e.is_null()) {
        // A server or proxy that answers 200 with an error object.
        return Err(stream_error(err));
    }
    let c: Completion = serde_json::from_value(value).map_err(malformed)?;
    let choice = c
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| ProviderError::Malformed("chat completion has no choices".into()))?;
    let message = choice.message;
    let mut got = Collected {
        id: c.id,
        model: c.model,
        text: message.content.unwrap_or_default(),
        refusal: message.refusal.unwrap_or_default(),
        finish_reason: choice.finish_reason,
        usage: c.usage,
        ..Collected::default()
    };
    got.reasoning.add(message.reasoning);
    for (i, call) in message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        let tool = ToolAcc {
            id: call.id.unwrap_or_default(),
            name: call.function.name,
            args: arguments_text(&call.function.arguments),
        };
        got.tools.insert(i as u64, tool);
    }
    got.into_response("chat completion has no finish_reason")
}

#[derive(Debug, Deserialize)]
struct Chunk {
    id: Option<String>,
    model: Option<String>,
    choices: Option<Vec<ChunkChoice>>,
    usage: Option<WireUsage>,
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    index: u64,
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Delta {
    content: Option<String>,
    refusal: Option<String>,
    tool_calls: Option<Vec<DeltaToolCall>>,
    #[serde(flatten)]
    reasoning: WireReasoning,
}

#[derive(Debug, Deserialize)]
struct DeltaToolCall {
    index: Option<u64>,
    id: Option<String>,
    function: Option<DeltaFunction>,
}

#[derive(Debug, Deserialize)]
struct DeltaFunction {
    name: Option<String>,
    arguments: Option<Value>,
}

#[derive(Default)]
struct ToolAcc {
    id: String,
    name: String,
    args: String,
}

/// A completion as collected, from one JSON body or from a stream's chunks.
#[derive(Default)]
pub(crate) struct Collected {
    id: String,
    model: String,
    text: String,
    refusal: String,
    reasoning: ReasoningAcc,
    /// By their index in `tool_calls`; every call is complete (a stream is only read whole).
    tools: BTreeMap<u64, ToolAcc>,
    finish_reason: Option<String>,
    usage: Option<WireUsage>,
}

impl StreamDecoder for Collected {
    const UNFINISHED: &'static str = "the stream ended before data: [DONE]";

    /// Handles one `data:` event; `Ok(true)` at `[DONE]`.
    fn on_event(&mut self, ev: SseEvent) -> Result<bool, ProviderError> {
        if ev.data.trim() == "[DONE]" {
            return Ok(true);
        }
        let chunk: Chunk = serde_json::from_str(&ev.data).map_err(|e| {
            ProviderError::Malformed(format!(
                "stream chunk is not valid ({e}): {}",
                http::truncate(&ev.data, 200)
            ))
        })?;
        if let Some(err) = chunk.error {
            return Err(stream_error(&err));
        }
        if let Some(id) = chunk.id.filter(|s| !s.is_empty()) {
            self.id = id;
        }
        if let Some(model) = chunk.model.filter(|s| !s.is_empty()) {
            self.model = model;
        }
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        for choice in chunk.choices.unwrap_or_default() {
            if choice.index != 0 {
                continue;
            }
            if let Some(r) = choice.finish_reason {
                self.finish_reason = Some(r);
            }
            self.add_delta(choice.delta.unwrap_or_default());
        }
        Ok(false)
    }

    fn finish(self) -> Result<ModelResponse, ProviderError> {
        self.into_response("stream finished without a finish_reason")
    }
}

impl Collected {
    /// Adds the first choice's delta: text, refusal, reasoning and tool-call fragments.
    fn add_delta(&mut self, delta: Delta) {
        self.reasoning.add(delta.reasoning);
        self.text
            .push_str(delta.content.as_deref().unwrap_or_default());
        self.refusal
            .push_str(delta.refusal.as_deref().unwrap_or_default());
        for (pos, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
            let acc = self
                .tools
                .entry(call.index.unwrap_or(pos as u64))
                .or_default();
            if let Some(id) = call.id.filter(|s| !s.is_empty()) {
                acc.id = id;
            }
            if let Some(f) = call.function {
                if let Some(name) = f.name.filter(|s| !s.is_empty()) {
                    acc.name = name;
                }
                acc.args
                    .push_str(&arguments_text(&f.arguments.unwrap_or(Value::Null)));
            }
        }
    }

    /// The reply; [`ProviderError::Malformed`] saying `no_reason` without a finish reason.
    fn into_response(self, no_reason: &str) -> Result<ModelResponse, ProviderError> {
        let reason = self
            .finish_reason
            .ok_or_else(|| ProviderError::Malformed(no_reason.into()))?;
        let mut stop = finish(&reason, !self.tools.is_empty());
        let mut drafts: Vec<Draft> = self.reasoning.draft().into_iter().collect();
        drafts.push(Draft::Text(self.text));
        if !self.refusal.is_empty() {
            drafts.push(Draft::Text(self.refusal));
            stop = StopReason::Refusal;
        }
        drafts.extend(self.tools.into_values().map(|t| Draft::Tool {
            id: t.id,
            name: t.name,
            raw: t.args,
            complete: true,
        }));
        let usage = self.usage.map(|u| u.canonical()).unwrap_or_default();
        response(self.id, self.model, drafts, stop, usage)
    }
}

/// An error object sent with a 200: inside the stream (vLLM, OpenRouter) or as the body.
fn stream_error(err: &Value) -> ProviderError {
    let text = |k: &str| {
        err.get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let message = text("message").unwrap_or_else(|| {
        err.as_str()
            .map(str::to_string)
            .unwrap_or_else(|| http::truncate(&err.to_string(), 500))
    });
    let code = err.get("code");
    if says_context_too_long(&message, code.and_then(Value::as_str)) {
        return ProviderError::ContextTooLong {
            status: 400,
            message,
        };
    }
    let error_type = text("type").or_else(|| text("code"));
    match code.and_then(Value::as_u64) {
        Some(status @ 400..=599) => ProviderError::Http {
            status: status as u16,
            error_type,
            message,
            retry_after: None,
            rate_limits: None,
        },
        _ => ProviderError::StreamBroken(match error_type {
            Some(t) => format!("error in stream: {t}: {message}"),
            None => format!("error in stream: {message}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StopReason as S;

    #[test]
    fn finish_reasons_of_compatible_servers_map_to_what_they_mean() {
        let cases = [
            ("stop", false, S::EndTurn),
            ("stop", true, S::ToolUse),
            ("tool_calls", true, S::ToolUse),
            ("length", false, S::MaxTokens),
            ("content_filter", false, S::Refusal),
            ("eos_token", false, S::EndTurn),
            ("model_length", false, S::ModelContextWindowExceeded),
            ("brand_new", false, S::Other("brand_new".into())),
        ];
        for (reason, tools, want) in cases {
            assert_eq!(finish(reason, tools), want, "{reason}");
        }
    }
}
