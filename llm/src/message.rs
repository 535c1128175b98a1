//! The canonical conversation: what the agent loop stores in its log and hands to a
//! provider. Shaped like the Anthropic Messages API (the richest of the formats); the
//! OpenAI-compatible adapter converts to and from it.
//!
//! Serialisation is stable: struct fields serialise in declaration order and JSON objects
//! (`serde_json::Value`) with sorted keys, so the same conversation always gives the same
//! bytes — the prompt cache and the resume-fidelity guarantee depend on it.

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
            ContentBlock::ToolUse { id, name, input } => Some(ToolUse { id, name, input }),
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
    ToolUse {
        id: String,
        name: String,
        input: serde_json::Value,
    },
    /// The result of a tool call, sent back in the next user message.
    ToolResult {
        tool_use_id: String,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
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
