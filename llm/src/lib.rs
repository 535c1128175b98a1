//! # nightshift-llm
//!
//! Talking to models. The canonical conversation types ([`message`]) and, behind one
//! [`Provider`] trait, the Anthropic Messages API ([`anthropic`]), OpenAI-compatible chat
//! completions ([`openai`]) and a scripted provider that replays model turns from a file
//! ([`scripted`], for the demo and tests). [`ModelClient`] wraps a provider with retries,
//! rate-limit pauses and a circuit breaker, shared by all worker slots through a
//! [`ClientRegistry`]; [`send_with_fallback`] walks a chain of models. Providers are
//! configured with [`ProviderConfig`].
//!
//! Guarantees that hold across the crate: request bodies are byte-stable for equal requests;
//! a partial or cut-off reply is never returned as a tool call to run; API keys are read from
//! the environment by name and never printed.
//!
//! ## Using it
//!
//! A worker builds its clients once, through one shared registry (one client per provider,
//! model and key, so a 429 or an open circuit is seen by every worker slot), and calls the
//! chain of models configured for an agent:
//!
//! ```
//! use std::sync::Arc;
//! use nightshift_llm::{
//!     CancellationToken, ClientConfig, Message, ModelClient, ModelRequest, ScriptedProvider,
//!     ScriptedTurn, StopReason, send_with_fallback,
//! };
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // In the daemon: `ClientRegistry::client(&provider_config, "claude-sonnet-4-5")`.
//! let provider = Arc::new(ScriptedProvider::new(vec![ScriptedTurn::text("Hello!")]));
//! let client = Arc::new(ModelClient::new(provider, "demo-model", ClientConfig::default()));
//!
//! let req = ModelRequest {
//!     model: "demo-model".into(),
//!     system: "You are terse.".into(),
//!     messages: vec![Message::user_text("Say hello")],
//!     tools: vec![],
//!     max_tokens: 256,
//!     stop_sequences: vec![],
//!     thinking: None,
//!     effort: None,
//! };
//! let cancel = CancellationToken::new();
//! let reply = send_with_fallback(&[client.clone()], &req, &cancel).await.unwrap();
//! assert_eq!(reply.stop_reason, StopReason::EndTurn);
//! assert_eq!(reply.model, "demo-model"); // which model of the chain answered
//! assert_eq!(reply.message().text(), "Hello!");
//! # }
//! ```
//!
//! How the loop should treat the outcome:
//! - `Ok` with `stop_reason` `ToolUse`: run the tool calls (each is complete and parsed);
//!   `MaxTokens`: never run anything from it (a cut-off call has already been dropped);
//!   `ModelContextWindowExceeded` (any reason with [`StopReason::means_context_full`]):
//!   likewise cut off, then compact and continue; `PauseTurn`: resend; `Refusal`: finish
//!   with that outcome; `Other(name)`: a reason this crate does not know.
//! - Tool-call ids in a reply are the provider's, may be empty (none given) and are not
//!   unique: give every call a run-unique id before logging the reply.
//! - `Err(ProviderError::ContextTooLong { .. })`: compact the conversation, then retry.
//! - `Err(ProviderError::Cancelled)`: the run was cancelled; stop.
//! - `Err(e)` with `e.is_transient()` (an outage: 5xx/529, network, broken or malformed
//!   replies, an open circuit): re-arm the job, waiting [`ProviderError::retry_hint`] when
//!   it says; record [`ProviderError::root_cause`] (status, type, message) as the reason.
//! - Any other `Err`: the chain gave up for good; fail the run. Retrying here again is
//!   pointless, the client already did.

pub mod anthropic;
pub mod client;
pub mod config;
pub mod conversation;
pub mod http;
pub mod json;
pub mod message;
pub mod openai;
pub mod provider;
pub mod reply;
pub mod scripted;
pub mod sse;
mod wire;

pub use anthropic::{AnthropicOptions, AnthropicProvider};
pub use client::{
    BreakerState, ClientConfig, ClientKey, ClientRegistry, ModelClient, send_with_fallback,
};
pub use config::{
    BreakerConfig, ConfigError, ProviderConfig, ProviderKind, RetryConfig, TimeoutConfig,
};
pub use http::{ApiKey, HttpTimeouts, SetupError};
pub use message::{
    ContentBlock, Effort, Message, ModelRequest, ModelResponse, RateLimits, Role, StopReason,
    Thinking, ThinkingKind, ToolSpec, ToolUse, Usage,
};
pub use openai::{OpenAiOptions, OpenAiProvider};
pub use provider::{Provider, ProviderError};
pub use scripted::{ScriptError, ScriptedProvider, ScriptedTurn};
pub use tokio_util::sync::CancellationToken;
