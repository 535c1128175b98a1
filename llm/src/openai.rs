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
//!
//! Sending, errors, `retry-after`, streaming and the key's redaction are the path every HTTP
//! provider shares (`wire.rs`); this module says what chat completions do their own way:
//! the path and the `Authorization` header, and how a request is encoded; `openai/decode.rs`
//! reads the reply, whole or streamed.

use futures::future::BoxFuture;
use reqwest::header::HeaderMap;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::http::{self, ApiKey, HttpTimeouts, RateLimitHeaders, SetupError};
use crate::message::{ContentBlock, Message, ModelRequest, ModelResponse, RateLimits, Role};
use crate::provider::{Provider, ProviderError};
use crate::wire::{self, Wire, WireProvider};

mod decode;

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
pub struct OpenAiProvider(WireProvider<ChatCompletions>);

impl OpenAiProvider {
    pub fn new(opts: OpenAiOptions) -> Result<Self, SetupError> {
        let OpenAiOptions {
            base_url,
            api_key,
            stream,
            timeouts,
        } = opts;
        WireProvider::new(&base_url, api_key, stream, timeouts).map(Self)
    }

    /// The configured base URL, else `OPENAI_BASE_URL`, else the default.
    pub fn resolve_base_url(configured: Option<&str>) -> String {
        wire::resolve_base_url::<ChatCompletions>(configured)
    }

    /// The exact bytes sent for `req`.
    pub fn request_body(req: &ModelRequest, stream: bool) -> Vec<u8> {
        wire::request_body::<ChatCompletions>(req, stream)
    }
}

impl Provider for OpenAiProvider {
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

/// The chat-completions wire format.
#[derive(Debug)]
pub(crate) struct ChatCompletions;

const RATE_LIMITS: RateLimitHeaders = RateLimitHeaders {
    requests_limit: "x-ratelimit-limit-requests",
    requests_remaining: "x-ratelimit-remaining-requests",
    requests_reset: "x-ratelimit-reset-requests",
    tokens_limit: "x-ratelimit-limit-tokens",
    tokens_remaining: "x-ratelimit-remaining-tokens",
    tokens_reset: "x-ratelimit-reset-tokens",
};

impl Wire for ChatCompletions {
    const NAME: &'static str = "openai";
    const BASE_URL_ENV: &'static str = "OPENAI_BASE_URL";
    const DEFAULT_BASE_URL: &'static str = DEFAULT_BASE_URL;
    const PATH: &'static str = "chat/completions";
    const KEY_HEADER: &'static str = "authorization";
    const KEY_PREFIX: &'static str = "Bearer ";
    const HEADERS: &'static [(&'static str, &'static str)] = &[];
    const RATE_LIMITS: RateLimitHeaders = RATE_LIMITS;
    type Stream = decode::Collected;

    fn request_json(req: &ModelRequest, stream: bool) -> Value {
        request_json(req, stream)
    }

    fn decode_body(body: &[u8]) -> Result<ModelResponse, ProviderError> {
        decode::parse_completion(body)
    }
}

/// Reads `x-ratelimit-*` headers.
pub fn rate_limits(h: &HeaderMap) -> RateLimits {
    RATE_LIMITS.read(h)
}

fn request_json(req: &ModelRequest, stream: bool) -> Value {
    let mut messages = Vec::new();
    if !req.system.is_empty() {
        messages.push(json!({"role": "system", "content": req.system}));
    }
    for m in &req.messages {
        match m.role {
            Role::User => user_messages(m, &mut messages),
            Role::Assistant => messages.push(assistant_message(m)),
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

/// A user message as chat messages: a `tool` message per tool result, in order, then one
/// `user` message with the text blocks (when there are any).
fn user_messages(m: &Message, out: &mut Vec<Value>) {
    let mut texts = Vec::new();
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
                out.push(json!({
                    "role": "tool", "tool_call_id": tool_use_id, "content": content,
                }));
            }
            _ => {}
        }
    }
    if !texts.is_empty() {
        out.push(json!({"role": "user", "content": texts.join("\n\n")}));
    }
}

/// An assistant message: its text (or `null`), its reasoning in the field it came in, and its
/// tool calls with their arguments as a JSON string.
fn assistant_message(m: &Message) -> Value {
    let mut texts = Vec::new();
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
    msg
}
