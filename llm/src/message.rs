//! The canonical conversation: what the agent loop stores in its log and hands to a
//! provider. Shaped like the Anthropic Messages API (the richest of the formats); the
//! OpenAI-compatible adapter converts to and from it.
//!
//! Serialisation is stable: struct fields serialise in declaration order and JSON objects
//! (`serde_json::Value`) with sorted keys, so the same conversation always gives the same
//! bytes — the prompt cache and the resume-fidelity guarantee depend on it.
//!
//! A model's reasoning is part of the conversation and kept verbatim: Anthropic `thinking`
//! blocks with their `signature` and `redacted_thinking` blocks with their `data`
//! ([`ContentBlock::Thinking`], [`ContentBlock::RedactedThinking`], whose serialised form is
//! the Messages API's own), and an OpenAI-compatible server's `reasoning_content`
//! ([`ContentBlock::Reasoning`], with the field it came in and any `reasoning_details`). They
//! are logged and checkpointed like every block and sent back exactly as received, because
//! the providers refuse a tool loop whose reasoning was dropped or altered.

use serde::{Deserialize, Serialize};

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
}

impl Message {
    /// A user message with one text block.
    pub fn user_text(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }

    /// The tool calls in this message, in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = ToolUse<'_>> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolUse {
                id,
                name,
                input,
                unparsed,
            } => Some(ToolUse {
                id,
                name,
                input,
                unparsed: unparsed.as_deref(),
            }),
            _ => None,
        })
    }

    /// The concatenated text blocks.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("")
    }
}

/// A borrowed view of a tool call. See [`ContentBlock::ToolUse`] for what `id` promises.
#[derive(Debug, Clone, Copy)]
pub struct ToolUse<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub input: &'a serde_json::Value,
    /// The arguments as written, when they were not valid JSON.
    pub unparsed: Option<&'a str>,
}

/// One block of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// A tool call by the model. `input` is the parsed JSON arguments.
    ///
    /// `id` is the provider's id, verbatim, and the caller's to replace: providers and proxies
    /// omit ids, hand out duplicates within one reply and reuse them across turns, so ids in a
    /// reply are **not** guaranteed unique. An empty id means the provider gave none; the
    /// caller (the agent loop) assigns every call a run-unique id before it logs the reply,
    /// and the `tool_result` it sends back names that id.
    ///
    /// `unparsed` is set when the arguments the model wrote were not valid JSON: it holds
    /// them as written, and `input` is then `{}` (so the call can be sent back to any
    /// provider). Such a call is never run; the loop answers it with an error the model can
    /// correct.
    ToolUse {
        id: String,
        name: String,
        input: serde_json::Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unparsed: Option<String>,
    },
    /// The result of a tool call, sent back in the next user message.
    ToolResult {
        tool_use_id: String,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
    /// Anthropic extended thinking, verbatim: the `signature` covers the text, so neither may
    /// change (an empty `thinking` with a signature is kept too). Sent back only to the
    /// Messages API.
    Thinking {
        thinking: String,
        signature: String,
    },
    /// Anthropic thinking the safety systems encrypted: `data` is opaque and sent back as is.
    RedactedThinking {
        data: String,
    },
    /// An OpenAI-compatible server's reasoning (DeepSeek's thinking mode, vLLM, OpenRouter):
    /// `text` as received in `field` (`reasoning_content`, or `reasoning`), and the
    /// `reasoning_details` items (with their ids and signatures) when the server sent any.
    /// Sent back in the same fields of the assistant message, only to OpenAI-compatible
    /// servers.
    Reasoning {
        text: String,
        #[serde(default = "reasoning_field")]
        field: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<serde_json::Value>,
    },
}

fn reasoning_field() -> String {
    "reasoning_content".to_string()
}

impl ContentBlock {
    /// Whether the block is a model's reasoning (of any provider).
    pub fn is_reasoning(&self) -> bool {
        matches!(
            self,
            ContentBlock::Thinking { .. }
                | ContentBlock::RedactedThinking { .. }
                | ContentBlock::Reasoning { .. }
        )
    }
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub input_schema: serde_json::Value,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    StopSequence,
    ToolUse,
    MaxTokens,
    PauseTurn,
    Refusal,
    /// The reply was cut off because the conversation filled the model's context window
    /// (Anthropic `model_context_window_exceeded`). Treated like `MaxTokens` for tool calls:
    /// the call being written is dropped. The loop should compact, then continue.
    ModelContextWindowExceeded,
    /// A reason this version does not know, kept verbatim.
    #[serde(untagged)]
    Other(String),
}

impl StopReason {
    /// The reason as the Anthropic wire format names it (`end_turn`, `tool_use`, …; an
    /// unknown one verbatim).
    pub fn as_str(&self) -> &str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::StopSequence => "stop_sequence",
            StopReason::ToolUse => "tool_use",
            StopReason::MaxTokens => "max_tokens",
            StopReason::PauseTurn => "pause_turn",
            StopReason::Refusal => "refusal",
            StopReason::ModelContextWindowExceeded => "model_context_window_exceeded",
            StopReason::Other(other) => other,
        }
    }

    /// Whether the model stopped because the context window is full (so the conversation
    /// must be compacted before it can go on).
    pub fn means_context_full(&self) -> bool {
        matches!(self, StopReason::ModelContextWindowExceeded)
    }

    /// Whether the reply was cut off mid-way (by `max_tokens` or a full context window), so
    /// that its last tool call may be incomplete and is never run.
    pub fn is_cut_off(&self) -> bool {
        matches!(self, StopReason::MaxTokens) || self.means_context_full()
    }
}

/// Token counts of one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
}

impl Usage {
    /// Adds `other` to `self`.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_creation_input_tokens += other.cache_creation_input_tokens;
        self.cache_read_input_tokens += other.cache_read_input_tokens;
    }
}

/// A request to a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    pub model: String,
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub max_tokens: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_sequences: Vec<String>,
    /// Extended thinking (reasoning) for this call; `None` leaves it to the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Thinking>,
    /// How much effort the model should spend (Anthropic `output_config.effort`, OpenAI
    /// `reasoning_effort`); `None` leaves it to the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<Effort>,
}

/// Whether a model thinks before it answers: an agent's `thinking = { type = "enabled",
/// budget_tokens = N }` (also `"adaptive"` or `"disabled"`), sent to the Messages API as its
/// `thinking` parameter and to an OpenAI-compatible server as DeepSeek's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thinking {
    #[serde(rename = "type")]
    pub kind: ThinkingKind,
    /// The most tokens the model may think for (Anthropic: at least 1024 and below
    /// `max_tokens`; needed with `enabled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_tokens: Option<u32>,
}

/// The `type` of [`Thinking`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThinkingKind {
    Enabled,
    Adaptive,
    Disabled,
}

impl ThinkingKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ThinkingKind::Enabled => "enabled",
            ThinkingKind::Adaptive => "adaptive",
            ThinkingKind::Disabled => "disabled",
        }
    }
}

/// How hard a model should think: an agent's `effort`, sent as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effort {
    Minimal,
    Low,
    Medium,
    High,
    Xhigh,
    Max,
}

impl Effort {
    pub fn as_str(self) -> &'static str {
        match self {
            Effort::Minimal => "minimal",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
            Effort::Xhigh => "xhigh",
            Effort::Max => "max",
        }
    }
}

/// Rate-limit headers of the last response, when the provider sent them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimits {
    pub requests_limit: Option<u64>,
    pub requests_remaining: Option<u64>,
    pub requests_reset: Option<String>,
    pub tokens_limit: Option<u64>,
    pub tokens_remaining: Option<u64>,
    pub tokens_reset: Option<String>,
}

/// A complete model reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    pub id: String,
    /// The model that actually answered (after any fallback).
    pub model: String,
    pub content: Vec<ContentBlock>,
    pub stop_reason: StopReason,
    pub usage: Usage,
    #[serde(default)]
    pub rate_limits: RateLimits,
    /// How many attempts at this model failed (and were retried) before this reply; set by
    /// [`crate::ModelClient::send`].
    #[serde(default)]
    pub retries: u32,
}

impl ModelResponse {
    /// The reply as an assistant message.
    pub fn message(&self) -> Message {
        Message {
            role: Role::Assistant,
            content: self.content.clone(),
        }
    }
}
