//! The Anthropic Messages API (`POST {base}/v1/messages`), JSON or streamed (SSE).
//!
//! Guarantees:
//! - The request body is byte-stable: the same [`ModelRequest`] always gives the same bytes
//!   ([`AnthropicProvider::request_body`]; keys sorted at every depth), which the prompt cache
//!   and resume fidelity rely on.
//! - Three `cache_control: {"type":"ephemeral"}` breakpoints: on the system block, on the last
//!   tool, and on the last content block of the newest message that is not thinking (each
//!   only when it exists; thinking blocks cannot carry one).
//! - Extended thinking: the request's [`crate::Thinking`] is sent as `thinking` (`{"type":
//!   "enabled", "budget_tokens": N}`) and its [`crate::Effort`] as `output_config.effort`;
//!   `temperature` and `top_k`, which thinking does not allow, are never sent. `thinking`
//!   (with `signature`, streamed as `thinking_delta` and `signature_delta`) and
//!   `redacted_thinking` blocks are read into the reply and sent back byte for byte, in
//!   place; an OpenAI-compatible server's reasoning (from a fallback chain) is not sent.
//! - A `tool_use` block goes out with an object as its `input` (a non-object one, which only a
//!   proxy sends and the loop answered with an error, as `{}`), since the API refuses others.
//! - A streamed reply is returned only after `message_stop`; a stream that ends before it is
//!   [`ProviderError::StreamBroken`] (retryable). An in-stream `error` event (or a 200 JSON
//!   body that is an error object) becomes the error its type stands for (`overloaded_error`
//!   → HTTP 529 with that type and message, …). Tool input arrives as `input_json_delta`
//!   fragments and is parsed at `content_block_stop`; cut-off tool calls in a `max_tokens` or
//!   `model_context_window_exceeded` reply are dropped (see [`crate::reply`]).
//! - A 200 that cannot be read — not JSON, the wrong shape, garbage `data:` — is
//!   [`ProviderError::Malformed`] (retryable), naming what was wrong and quoting the start of it.
//! - A reply whose `stop_reason` is `end_turn` or `stop_sequence` but which carries complete
//!   `tool_use` blocks is returned as `ToolUse` (some proxies and models do this).
//! - A `tool_use` block without an `id` keeps an empty id; the caller assigns one.
//! - Rate-limit headers (`anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`)
//!   are read into the response's [`RateLimits`]; `retry-after` into the error.
//! - The key goes only into the `x-api-key` header, marked sensitive; `Debug` redacts it.
//!
//! Sending, errors, `retry-after`, streaming and the key's redaction are the path every HTTP
//! provider shares (`wire.rs`); this module says what the Messages API does its own way:
//! its path and headers, how a request is encoded and how a reply, whole or streamed, is read.

use std::collections::BTreeMap;

use futures::future::BoxFuture;
use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::http::{self, ApiKey, HttpTimeouts, RateLimitHeaders, SetupError};
use crate::message::{ContentBlock, ModelRequest, ModelResponse, RateLimits, ThinkingKind, Usage};
use crate::provider::{Provider, ProviderError, says_context_too_long};
use crate::reply::{Draft, response, stop_reason};
use crate::sse::SseEvent;
use crate::wire::{self, StreamDecoder, Wire, WireProvider};

/// Used when neither the config nor `ANTHROPIC_BASE_URL` names one.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The `anthropic-version` header sent with every request.
pub const API_VERSION: &str = "2023-06-01";

/// How to reach the API.
#[derive(Debug, Clone)]
pub struct AnthropicOptions {
    pub base_url: String,
    pub api_key: ApiKey,
    /// Stream the reply (SSE) rather than wait for one JSON body.
    pub stream: bool,
    pub timeouts: HttpTimeouts,
}

/// A [`Provider`] for the Anthropic Messages API.
#[derive(Debug)]
pub struct AnthropicProvider(WireProvider<Messages>);

impl AnthropicProvider {
    pub fn new(opts: AnthropicOptions) -> Result<Self, SetupError> {
        let AnthropicOptions {
            base_url,
            api_key,
            stream,
            timeouts,
        } = opts;
        WireProvider::new(&base_url, Some(api_key), stream, timeouts).map(Self)
    }

    /// The base URL to use: the configured one, else `ANTHROPIC_BASE_URL`, else the default.
    pub fn resolve_base_url(configured: Option<&str>) -> String {
        wire::resolve_base_url::<Messages>(configured)
    }

    /// The exact bytes sent for `req`.
    pub fn request_body(req: &ModelRequest, stream: bool) -> Vec<u8> {
        wire::request_body::<Messages>(req, stream)
    }
}

impl Provider for AnthropicProvider {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn send<'a>(
        &'a self,
        req: &'a ModelRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>> {
        self.0.send(req, cancel)
    }
}

/// The Messages API's wire format.
#[derive(Debug)]
pub(crate) struct Messages;

const RATE_LIMITS: RateLimitHeaders = RateLimitHeaders {
    requests_limit: "anthropic-ratelimit-requests-limit",
    requests_remaining: "anthropic-ratelimit-requests-remaining",
    requests_reset: "anthropic-ratelimit-requests-reset",
    tokens_limit: "anthropic-ratelimit-tokens-limit",
    tokens_remaining: "anthropic-ratelimit-tokens-remaining",
    tokens_reset: "anthropic-ratelimit-tokens-reset",
};

impl Wire for Messages {
    const NAME: &'static str = "anthropic";
    const BASE_URL_ENV: &'static str = "ANTHROPIC_BASE_URL";
    const DEFAULT_BASE_URL: &'static str = DEFAULT_BASE_URL;
    const PATH: &'static str = "v1/messages";
    const KEY_HEADER: &'static str = "x-api-key";
    const KEY_PREFIX: &'static str = "";
    const HEADERS: &'static [(&'static str, &'static str)] = &[("anthropic-version", API_VERSION)];
    const RATE_LIMITS: RateLimitHeaders = RATE_LIMITS;
    type Stream = StreamState;

    fn request_json(req: &ModelRequest, stream: bool) -> Value {
        request_json(req, stream)
    }

    fn decode_body(body: &[u8]) -> Result<ModelResponse, ProviderError> {
        parse_message(body)
    }
}

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// The request as JSON (before canonical serialisation).
fn request_json(req: &ModelRequest, stream: bool) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert("max_tokens".into(), json!(req.max_tokens));
    if !req.system.is_empty() {
        body.insert(
            "system".into(),
            json!([{"type": "text", "text": req.system, "cache_control": ephemeral()}]),
        );
    }
    let last_msg = req.messages.len().saturating_sub(1);
    let messages: Vec<Value> = req
        .messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let mut content: Vec<Value> = m.content.iter().filter_map(block_json).collect();
            if i == last_msg
                && let Some(Value::Object(block)) = content
                    .iter_mut()
                    .rev()
                    .find(|b| !is_thinking(b.get("type").and_then(Value::as_str)))
            {
                block.insert("cache_control".into(), ephemeral());
            }
            json!({"role": m.role, "content": content})
        })
        .collect();
    body.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        let last_tool = req.tools.len() - 1;
        let tools: Vec<Value> = req
            .tools
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut tool = json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.input_schema,
                });
                if i == last_tool {
                    tool["cache_control"] = ephemeral();
                }
                tool
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if !req.stop_sequences.is_empty() {
        body.insert("stop_sequences".into(), json!(req.stop_sequences));
    }
    if let Some(t) = &req.thinking {
        let mut thinking = json!({"type": t.kind.as_str()});
        if let (ThinkingKind::Enabled, Some(budget)) = (t.kind, t.budget_tokens) {
            thinking["budget_tokens"] = json!(budget);
        }
        body.insert("thinking".into(), thinking);
    }
    if let Some(effort) = req.effort {
        body.insert("output_config".into(), json!({"effort": effort.as_str()}));
    }
    body.insert("stream".into(), json!(stream));
    Value::Object(body)
}

/// A content block as the Messages API takes it; `None` for another provider's reasoning.
fn block_json(block: &ContentBlock) -> Option<Value> {
    match block {
        // The wire shape without the arguments as written (the API knows no such field), and
        // with an object for input: the API refuses anything else (a proxy's `[]`), and the
        // call's error result already told the model what was wrong with it.
        ContentBlock::ToolUse {
            id, name, input, ..
        } => {
            let input = if input.is_object() {
                input.clone()
            } else {
                json!({})
            };
            Some(json!({"type": "tool_use", "id": id, "name": name, "input": input}))
        }
        ContentBlock::Reasoning { .. } => None,
        // The canonical form of the rest is the Messages API's own.
        other => Some(serde_json::to_value(other).expect("content serialises")),
    }
}

fn is_thinking(block_type: Option<&str>) -> bool {
    matches!(block_type, Some("thinking" | "redacted_thinking"))
}

/// Reads `anthropic-ratelimit-*` headers.
pub fn rate_limits(h: &HeaderMap) -> RateLimits {
    RATE_LIMITS.read(h)
}

/// Usage as the API sends it: every field optional (a `message_delta` sends only some).
#[derive(Debug, Default, Deserialize)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    fn merge_into(&self, u: &mut Usage) {
        let set = |dst: &mut u64, src: Option<u64>| {
            if let Some(v) = src {
                *dst = v;
            }
        };
        set(&mut u.input_tokens, self.input_tokens);
        set(&mut u.output_tokens, self.output_tokens);
        set(
            &mut u.cache_creation_input_tokens,
            self.cache_creation_input_tokens,
        );
        set(&mut u.cache_read_input_tokens, self.cache_read_input_tokens);
    }
}

#[derive(Debug, Deserialize)]
struct WireMessage {
    #[serde(default)]
    id: String,
    #[serde(default)]
    model: String,
    content: Vec<Value>,
    stop_reason: Option<String>,
    #[serde(default)]
    usage: WireUsage,
}

/// Parses a non-streamed reply.
fn parse_message(body: &[u8]) -> Result<ModelResponse, ProviderError> {
    let malformed = |e: serde_json::Error| {
        ProviderError::Malformed(format!(
            "Anthropic reply is not a valid message ({e}); body starts: {}",
            http::truncate(&String::from_utf8_lossy(body), 200)
        ))
    };
    let value: Value = serde_json::from_slice(body).map_err(malformed)?;
    if value.get("type").and_then(Value::as_str) == Some("error") {
        // A proxy that answers 200 with an error object: the error it stands for.
        return Err(stream_error(&value["error"]));
    }
    let msg: WireMessage = serde_json::from_value(value).map_err(malformed)?;
    let stop = stop_reason(msg.stop_reason.as_deref().ok_or_else(|| {
        ProviderError::Malformed("Anthropic reply has no stop_reason".to_string())
    })?);
    let drafts = msg
        .content
        .iter()
        .filter_map(|b| match b.get("type").and_then(Value::as_str) {
            Some("text") => Some(Draft::Text(str_field(b, "text"))),
            Some("tool_use") => Some(Draft::ParsedTool {
                id: str_field(b, "id"),
                name: str_field(b, "name"),
                input: b.get("input").cloned().unwrap_or_else(|| json!({})),
            }),
            Some("thinking") => Some(Draft::Thinking {
                thinking: str_field(b, "thinking"),
                signature: str_field(b, "signature"),
                complete: true,
            }),
            Some("redacted_thinking") => Some(Draft::RedactedThinking(str_field(b, "data"))),
            _ => None,
        })
        .collect();
    let mut usage = Usage::default();
    msg.usage.merge_into(&mut usage);
    response(msg.id, msg.model, drafts, stop, usage)
}

fn str_field(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// A streamed content block as far as it arrived.
enum Block {
    Text(String),
    Tool {
        id: String,
        name: String,
        json: String,
        closed: bool,
    },
    Thinking {
        thinking: String,
        signature: String,
        closed: bool,
    },
    RedactedThinking(String),
    /// A block type this crate does not keep (server tools, …).
    Ignored,
}

impl Block {
    /// The block a `content_block_start` opens.
    fn start(b: &Value) -> Block {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => Block::Text(str_field(b, "text")),
            Some("tool_use") => Block::Tool {
                id: str_field(b, "id"),
                name: str_field(b, "name"),
                // Input arrives as deltas; a non-empty start input is kept as-is.
                json: match b.get("input") {
                    Some(Value::Object(o)) if !o.is_empty() => b["input"].to_string(),
                    _ => String::new(),
                },
                closed: false,
            },
            Some("thinking") => Block::Thinking {
                thinking: str_field(b, "thinking"),
                signature: str_field(b, "signature"),
                closed: false,
            },
            Some("redacted_thinking") => Block::RedactedThinking(str_field(b, "data")),
            _ => Block::Ignored,
        }
    }

    /// Adds a `content_block_delta` of the block's own kind; any other is ignored.
    fn extend(&mut self, d: &Value) {
        match (self, d.get("type").and_then(Value::as_str)) {
            (Block::Text(t), Some("text_delta")) => t.push_str(&str_field(d, "text")),
            (Block::Tool { json, .. }, Some("input_json_delta")) => {
                json.push_str(&str_field(d, "partial_json"))
            }
            (Block::Thinking { thinking, .. }, Some("thinking_delta")) => {
                thinking.push_str(&str_field(d, "thinking"))
            }
            (Block::Thinking { signature, .. }, Some("signature_delta")) => {
                signature.push_str(&str_field(d, "signature"))
            }
            _ => {}
        }
    }

    fn close(&mut self) {
        if let Block::Tool { closed, .. } | Block::Thinking { closed, .. } = self {
            *closed = true;
        }
    }

    fn draft(self) -> Option<Draft> {
        match self {
            Block::Text(t) => Some(Draft::Text(t)),
            Block::Tool {
                id,
                name,
                json,
                closed,
            } => Some(Draft::Tool {
                id,
                name,
                raw: json,
                complete: closed,
            }),
            Block::Thinking {
                thinking,
                signature,
                closed,
            } => Some(Draft::Thinking {
                thinking,
                signature,
                complete: closed,
            }),
            Block::RedactedThinking(data) => Some(Draft::RedactedThinking(data)),
            Block::Ignored => None,
        }
    }
}

/// Accumulates a streamed reply event by event.
#[derive(Default)]
pub(crate) struct StreamState {
    id: String,
    model: String,
    usage: Usage,
    blocks: BTreeMap<u64, Block>,
    stop_reason: Option<String>,
}

impl StreamDecoder for StreamState {
    const UNFINISHED: &'static str = "the event stream ended before message_stop";

    /// Handles one event; `Ok(true)` at `message_stop`.
    fn on_event(&mut self, ev: SseEvent) -> Result<bool, ProviderError> {
        let v: Value = serde_json::from_str(&ev.data).map_err(|e| {
            ProviderError::Malformed(format!(
                "stream event {} is not JSON ({e}): {}",
                ev.event.as_deref().unwrap_or("(unnamed)"),
                http::truncate(&ev.data, 200)
            ))
        })?;
        let ty = v
            .get("type")
            .and_then(Value::as_str)
            .or(ev.event.as_deref())
            .unwrap_or_default();
        let index = || {
            v.get("index")
                .and_then(Value::as_u64)
                .ok_or_else(|| missing(ty, "index"))
        };
        match ty {
            "message_start" => {
                let m = &v["message"];
                self.id = str_field(m, "id");
                self.model = str_field(m, "model");
                self.merge_usage(m.get("usage"))?;
            }
            "content_block_start" => {
                self.blocks
                    .insert(index()?, Block::start(&v["content_block"]));
            }
            "content_block_delta" => {
                let index = index()?;
                let block = self.blocks.get_mut(&index).ok_or_else(|| {
                    ProviderError::Malformed(format!("delta for unknown content block {index}"))
                })?;
                block.extend(&v["delta"]);
            }
            "content_block_stop" => {
                if let Some(block) = self.blocks.get_mut(&index()?) {
                    block.close();
                }
            }
            "message_delta" => {
                if let Some(r) = v["delta"].get("stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(r.to_string());
                }
                self.merge_usage(v.get("usage"))?;
            }
            "message_stop" => return Ok(true),
            "error" => return Err(stream_error(&v["error"])),
            _ => {} // ping, and event types added later
        }
        Ok(false)
    }

    fn finish(self) -> Result<ModelResponse, ProviderError> {
        let stop = stop_reason(self.stop_reason.as_deref().ok_or_else(|| {
            ProviderError::Malformed("stream finished without a stop_reason".to_string())
        })?);
        let drafts = self.blocks.into_values().filter_map(Block::draft).collect();
        response(self.id, self.model, drafts, stop, self.usage)
    }
}

impl StreamState {
    fn merge_usage(&mut self, usage: Option<&Value>) -> Result<(), ProviderError> {
        if let Some(u) = usage {
            let wire: WireUsage = serde_json::from_value(u.clone())
                .map_err(|e| ProviderError::Malformed(format!("bad usage in stream: {e}")))?;
            wire.merge_into(&mut self.usage);
        }
        Ok(())
    }
}

fn missing(event: &str, field: &str) -> ProviderError {
    ProviderError::Malformed(format!("{event} event without {field}"))
}

/// The error an in-stream `error` event stands for.
fn stream_error(err: &Value) -> ProviderError {
    let ty = err.get("type").and_then(Value::as_str).unwrap_or_default();
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or(ty)
        .to_string();
    let status = match ty {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => {
            let ty = if ty.is_empty() { "(untyped)" } else { ty };
            return ProviderError::StreamBroken(format!("error event {ty}: {message}"));
        }
    };
    if status == 400 && says_context_too_long(&message, None) {
        return ProviderError::ContextTooLong { status, message };
    }
    ProviderError::Http {
        status,
        error_type: Some(ty.to_string()),
        message,
        retry_after: None,
        rate_limits: None,
    }
}
