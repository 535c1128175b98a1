//! OpenAI-compatible chat completions (`POST {base}/chat/completions`): OpenAI itself, vLLM,
//! Ollama, llama.cpp server, OpenRouter. JSON or streamed (SSE, ending in `data: [DONE]`).
//!
//! Conversion from the canonical (Anthropic-shaped) conversation:
//! - the system prompt is a leading `system` message;
//! - an assistant message becomes `content` (its text, or `null`) plus `tool_calls` whose
//!   `arguments` are the input as a JSON string (keys sorted);
//! - a user message's `tool_result` blocks become `tool` messages (in order, before the user's
//!   text, so they follow the assistant's `tool_calls`); an error result is prefixed `Error: `;
//! - tools are `{"type":"function","function":{name,description,parameters}}`.
//! - the output limit is sent as `max_tokens`, which every compatible server accepts (OpenAI's
//!   reasoning models want `max_completion_tokens` instead; not supported yet).
//! - reasoning: an assistant message's [`ContentBlock::Reasoning`] goes back in the field it
//!   came in (`reasoning_content` for DeepSeek and vLLM, `reasoning` for OpenRouter and
//!   Ollama), byte for byte, with its `reasoning_details` when there were any — DeepSeek's
//!   thinking mode refuses a tool loop whose assistant messages lack it. Anthropic thinking
//!   blocks (from a fallback chain) are not sent. The request's [`crate::Thinking`] goes out
//!   as DeepSeek's `thinking: {"type": …}` and its [`crate::Effort`] as `reasoning_effort`.
//!
//! Guarantees:
//! - The request body is byte-stable ([`OpenAiProvider::request_body`]).
//! - `finish_reason` maps stop→EndTurn, tool_calls→ToolUse, length→MaxTokens,
//!   content_filter→Refusal; a `stop` (Ollama) or `end_turn` (a proxy) that carries complete
//!   tool calls is ToolUse.
//!   Any other reason is read like Anthropic's (`model_context_window_exceeded` from a proxy
//!   is that stop reason), else kept verbatim as `Other`.
//! - A streamed reply is returned only after `data: [DONE]`; a stream that ends before it is
//!   [`ProviderError::StreamBroken`]. Tool arguments are accumulated per `tool_calls[index]`
//!   and parsed at the end; cut-off calls in a `length` reply are dropped ([`crate::reply`]).
//! - A 200 that cannot be read — not JSON, the wrong shape, garbage `data:` — is
//!   [`ProviderError::Malformed`] (retryable), naming what was wrong and quoting the start of
//!   it. An `{"error":{…}}` object, in a 200 body or inside the stream, becomes the HTTP error
//!   its numeric `code` names, with its `type` and `message`.
//! - A tool call without an `id` (some compatible servers omit it, in JSON or SSE) keeps an
//!   empty id; the caller assigns one. Nothing like `call_0` is made up.
//! - Usage: `input_tokens` = `prompt_tokens` − `prompt_tokens_details.cached_tokens`,
//!   `cache_read_input_tokens` = the cached tokens, `output_tokens` = `completion_tokens`.
//! - `x-ratelimit-*` headers are read into [`RateLimits`]. Without an API key no
//!   `Authorization` header is sent (local servers).

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::http::{self, ApiKey, HttpTimeouts, SetupError, header_str, header_u64};
use crate::message::{ContentBlock, ModelRequest, ModelResponse, RateLimits, Role, Usage};
use crate::provider::{Provider, ProviderError, says_context_too_long, with_cancel};
use crate::reply::{Draft, finalize, settle_stop, stop_reason};
use crate::sse::SseEvent;

/// Used when neither the config nor `OPENAI_BASE_URL` names one.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// How to reach the server.
#[derive(Debug, Clone)]
pub struct OpenAiOptions {
    /// Up to and including the version segment, e.g. `http://localhost:11434/v1`.
    pub base_url: String,
    /// `None` sends no `Authorization` header.
    pub api_key: Option<ApiKey>,
    pub stream: bool,
    pub timeouts: HttpTimeouts,
}

/// A [`Provider`] for OpenAI-compatible chat completions.
#[derive(Debug)]
pub struct OpenAiProvider {
    http: reqwest::Client,
    url: String,
    key: Option<ApiKey>,
    stream: bool,
}

impl OpenAiProvider {
    pub fn new(opts: OpenAiOptions) -> Result<Self, SetupError> {
        if let Some(k) = &opts.api_key {
            k.header_value("Bearer ")?;
        }
        Ok(Self {
            http: http::build_client(opts.timeouts)?,
            url: http::join_url(&opts.base_url, "chat/completions"),
            key: opts.api_key,
            stream: opts.stream,
        })
    }

    /// The configured base URL, else `OPENAI_BASE_URL`, else the default.
    pub fn resolve_base_url(configured: Option<&str>) -> String {
        configured
            .map(str::to_string)
            .or_else(|| std::env::var("OPENAI_BASE_URL").ok())
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_string())
    }

    /// The exact bytes sent for `req`.
    pub fn request_body(req: &ModelRequest, stream: bool) -> Vec<u8> {
        http::canonical_bytes(&request_json(req, stream))
    }

    async fn call(&self, req: &ModelRequest) -> Result<ModelResponse, ProviderError> {
        let result = self.call_once(req).await;
        match &self.key {
            Some(k) => result.map_err(|e| e.redact(k.expose())),
            None => result,
        }
    }

    async fn call_once(&self, req: &ModelRequest) -> Result<ModelResponse, ProviderError> {
        let mut headers = HeaderMap::new();
        if let Some(k) = &self.key {
            let v = k
                .header_value("Bearer ")
                .map_err(|e| ProviderError::Network(e.to_string()))?;
            headers.insert(reqwest::header::AUTHORIZATION, v);
        }
        let body = Self::request_body(req, self.stream);
        let resp = http::post(&self.http, &self.url, headers, body, rate_limits).await?;
        let limits = rate_limits(resp.headers());
        let is_sse = header_str(resp.headers(), "content-type")
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        let mut reply = if is_sse {
            let mut state = StreamState::default();
            let complete = http::drive_sse(resp, |ev| state.on_event(ev)).await?;
            state.finish(complete)?
        } else {
            parse_completion(&http::read_body(resp).await?)?
        };
        if reply.model.is_empty() {
            reply.model = req.model.clone();
        }
        reply.rate_limits = limits;
        Ok(reply)
    }
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
    }

    fn send<'a>(
        &'a self,
        req: &'a ModelRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>> {
        Box::pin(with_cancel(cancel, self.call(req)))
    }
}

fn request_json(req: &ModelRequest, stream: bool) -> Value {
    let mut messages = Vec::new();
    if !req.system.is_empty() {
        messages.push(json!({"role": "system", "content": req.system}));
    }
    for m in &req.messages {
        let mut texts = Vec::new();
        match m.role {
            Role::User => {
                for b in &m.content {
                    match b {
                        ContentBlock::Text { text } => texts.push(text.as_str()),
                        ContentBlock::ToolResult {
                            tool_use_id,
                            content,
                            is_error,
                        } => {
                            let content = if *is_error {
                                format!("Error: {content}")
                            } else {
                                content.clone()
                            };
                            messages.push(json!({
                                "role": "tool", "tool_call_id": tool_use_id, "content": content,
                            }));
                        }
                        _ => {}
                    }
                }
                if !texts.is_empty() {
                    messages.push(json!({"role": "user", "content": texts.join("\n\n")}));
                }
            }
            Role::Assistant => {
                let mut calls = Vec::new();
                let mut reasoning: Option<(&str, String, Option<&Value>)> = None;
                for b in &m.content {
                    match b {
                        ContentBlock::Text { text } => texts.push(text.as_str()),
                        ContentBlock::Reasoning {
                            text,
                            field,
                            details,
                        } => match &mut reasoning {
                            Some((_, all, _)) => all.push_str(text),
                            None => reasoning = Some((field, text.clone(), details.as_ref())),
                        },
                        ContentBlock::ToolUse {
                            id, name, input, ..
                        } => calls.push(json!({
                            "id": id,
                            "type": "function",
                            "function": {
                                "name": name,
                                "arguments": String::from_utf8(http::canonical_bytes(input))
                                    .expect("JSON is UTF-8"),
                            },
                        })),
                        ContentBlock::ToolResult { .. }
                        | ContentBlock::Thinking { .. }
                        | ContentBlock::RedactedThinking { .. } => {}
                    }
                }
                let mut msg = json!({"role": "assistant", "content": Value::Null});
                if !texts.is_empty() {
                    msg["content"] = json!(texts.join("\n\n"));
                }
                if let Some((field, text, details)) = reasoning {
                    msg[field] = json!(text);
                    if let Some(details) = details {
                        msg["reasoning_details"] = details.clone();
                    }
                }
                if !calls.is_empty() {
                    msg["tool_calls"] = Value::Array(calls);
                }
                messages.push(msg);
            }
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("max_tokens".into(), json!(req.max_tokens));
    body.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        let tools = req.tools.iter().map(|t| {
            json!({"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.input_schema,
            }})
        });
        body.insert("tools".into(), Value::Array(tools.collect()));
    }
    if !req.stop_sequences.is_empty() {
        body.insert("stop".into(), json!(req.stop_sequences));
    }
    if let Some(t) = &req.thinking {
        body.insert("thinking".into(), json!({"type": t.kind.as_str()}));
    }
    if let Some(effort) = req.effort {
        body.insert("reasoning_effort".into(), json!(effort.as_str()));
    }
    body.insert("stream".into(), json!(stream));
    if stream {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Value::Object(body)
}

/// Reads `x-ratelimit-*` headers.
pub fn rate_limits(h: &HeaderMap) -> RateLimits {
    let s = |n: &str| header_str(h, n).map(str::to_string);
    RateLimits {
        requests_limit: header_u64(h, "x-ratelimit-limit-requests"),
        requests_remaining: header_u64(h, "x-ratelimit-remaining-requests"),
        requests_reset: s("x-ratelimit-reset-requests"),
        tokens_limit: header_u64(h, "x-ratelimit-limit-tokens"),
        tokens_remaining: header_u64(h, "x-ratelimit-remaining-tokens"),
        tokens_reset: s("x-ratelimit-reset-tokens"),
    }
}

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
fn finish(reason: &str, has_tool_calls: bool) -> crate::StopReason {
    use crate::StopReason as S;
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

fn parse_completion(body: &[u8]) -> Result<ModelResponse, ProviderError> {
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
    let calls = choice.message.tool_calls.unwrap_or_default();
    let reason = choice
        .finish_reason
        .ok_or_else(|| ProviderError::Malformed("chat completion has no finish_reason".into()))?;
    let mut stop = finish(&reason, !calls.is_empty());
    let mut reasoning = ReasoningAcc::default();
    reasoning.add(choice.message.reasoning);
    let mut drafts: Vec<Draft> = reasoning.draft().into_iter().collect();
    drafts.push(Draft::Text(choice.message.content.unwrap_or_default()));
    if let Some(r) = choice.message.refusal.filter(|r| !r.is_empty()) {
        drafts.push(Draft::Text(r));
        stop = crate::StopReason::Refusal;
    }
    for call in calls {
        drafts.push(Draft::Tool {
            id: call.id.unwrap_or_default(),
            name: call.function.name,
            raw: arguments_text(&call.function.arguments),
            complete: true,
        });
    }
    let content = finalize(drafts, &stop)?;
    Ok(ModelResponse {
        id: c.id,
        model: c.model,
        stop_reason: settle_stop(stop, &content),
        content,
        usage: c.usage.map(|u| u.canonical()).unwrap_or_default(),
        rate_limits: RateLimits::default(),
        retries: 0,
    })
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

#[derive(Default)]
struct StreamState {
    id: String,
    model: String,
    text: String,
    refusal: String,
    reasoning: ReasoningAcc,
    tools: BTreeMap<u64, ToolAcc>,
    finish_reason: Option<String>,
    usage: Option<WireUsage>,
    events: usize,
}

impl StreamState {
    /// Handles one `data:` event; `Ok(true)` at `[DONE]`.
    fn on_event(&mut self, ev: SseEvent) -> Result<bool, ProviderError> {
        self.events += 1;
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
            let delta = choice.delta.unwrap_or_default();
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
        Ok(false)
    }

    fn finish(self, complete: bool) -> Result<ModelResponse, ProviderError> {
        if !complete {
            return Err(ProviderError::StreamBroken(format!(
                "the stream ended before data: [DONE] (after {} events)",
                self.events
            )));
        }
        let reason = self.finish_reason.ok_or_else(|| {
            ProviderError::Malformed("stream finished without a finish_reason".into())
        })?;
        let mut stop = finish(&reason, !self.tools.is_empty());
        let mut drafts: Vec<Draft> = self.reasoning.draft().into_iter().collect();
        drafts.push(Draft::Text(self.text));
        if !self.refusal.is_empty() {
            drafts.push(Draft::Text(self.refusal));
            stop = crate::StopReason::Refusal;
        }
        for t in self.tools.into_values() {
            drafts.push(Draft::Tool {
                id: t.id,
                name: t.name,
                raw: t.args,
                complete: true,
            });
        }
        let content = finalize(drafts, &stop)?;
        Ok(ModelResponse {
            id: self.id,
            model: self.model,
            stop_reason: settle_stop(stop, &content),
            content,
            usage: self.usage.map(|u| u.canonical()).unwrap_or_default(),
            rate_limits: RateLimits::default(),
            retries: 0,
        })
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
