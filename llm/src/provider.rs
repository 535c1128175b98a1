//! The one trait every model backend implements, and the one error type they all return.
//!
//! Guarantees:
//! - [`Provider`] is dyn-compatible (`Arc<dyn Provider>`), and a call honours its
//!   [`CancellationToken`]: once the token fires, the call returns [`ProviderError::Cancelled`]
//!   without waiting for the network.
//! - A provider never returns a reply it did not receive completely: a body or stream that ends
//!   early is [`ProviderError::StreamBroken`], never a partial [`ModelResponse`].
//! - [`ProviderError::is_retryable`] is true only for HTTP 408/409/429/500/502/503/504/529 and
//!   network or broken-stream failures; everything else (400, 401, 403, context too long,
//!   malformed replies, an exhausted script, cancellation) must not be retried.
//! - Errors carry the provider's own message, never the API key.

use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::message::{ModelRequest, ModelResponse, RateLimits};

/// A model backend: one HTTP API (or the scripted replayer) that turns a request into a reply.
///
/// A provider makes exactly one attempt per call; retries, backoff, rate-limit pauses, the
/// circuit breaker and fallback live in [`crate::ModelClient`].
pub trait Provider: Send + Sync {
    /// A short name for logs and errors, e.g. `anthropic`, `openai`, `scripted`.
    fn name(&self) -> &str;

    /// Sends `req` and returns the complete reply.
    fn send<'a>(
        &'a self,
        req: &'a ModelRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>>;
}

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The provider answered with a non-success HTTP status.
    #[error("HTTP {status}: {message}")]
    Http {
        status: u16,
        /// The provider's own error message (or the start of the body when it sent none).
        message: String,
        /// How long the provider asked us to wait (`retry-after-ms` / `retry-after`).
        retry_after: Option<Duration>,
        /// Rate-limit headers sent with the error, if any.
        rate_limits: Option<Box<RateLimits>>,
    },
    /// The prompt does not fit the model's context window (a 400 saying so).
    #[error("context too long (HTTP {status}): {message}")]
    ContextTooLong { status: u16, message: String },
    /// No HTTP response: connect failure, reset, DNS, timeout.
    #[error("network error: {0}")]
    Network(String),
    /// The response started but its body or event stream ended before the reply was complete.
    #[error("reply broke off mid-stream: {0}")]
    StreamBroken(String),
    /// The provider answered, but not with something we can read.
    #[error("malformed reply: {0}")]
    Malformed(String),
    /// The client's circuit breaker is open: the call was not attempted.
    #[error("circuit open for model {model}: failing fast for another {retry_in:?}")]
    CircuitOpen { model: String, retry_in: Duration },
    /// The caller's cancellation token fired.
    #[error("cancelled")]
    Cancelled,
    /// The call could not be made as configured (e.g. an empty fallback chain).
    #[error("configuration error: {0}")]
    Config(String),
    /// The scripted provider has no turn for this request.
    #[error("script {source_name}: {message}")]
    Script {
        source_name: String,
        message: String,
    },
}

impl ProviderError {
    /// Whether the same request may succeed if sent again.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Http { status, .. } => is_retryable_status(*status),
            ProviderError::Network(_) | ProviderError::StreamBroken(_) => true,
            _ => false,
        }
    }

    /// Whether the call may succeed later or elsewhere: retryable, or the circuit is open.
    /// This is what makes [`crate::send_with_fallback`] try the next model, and what a caller
    /// should treat as "re-arm the job" rather than "fail the run".
    pub fn is_transient(&self) -> bool {
        self.is_retryable() || matches!(self, ProviderError::CircuitOpen { .. })
    }

    /// Whether this failure says the provider is unhealthy (counts towards opening the
    /// circuit): 5xx, 529, 408 (timeouts) and network or stream failures. A 429 or another
    /// 4xx means the provider answered sensibly, so it does not count.
    pub fn is_provider_failure(&self) -> bool {
        match self {
            ProviderError::Http { status, .. } => *status >= 500 || *status == 408,
            ProviderError::Network(_) | ProviderError::StreamBroken(_) => true,
            _ => false,
        }
    }

    /// The HTTP status, for `Http` and `ContextTooLong`.
    pub fn status(&self) -> Option<u16> {
        match self {
            ProviderError::Http { status, .. } | ProviderError::ContextTooLong { status, .. } => {
                Some(*status)
            }
            _ => None,
        }
    }

    /// How long the provider asked us to wait before the next call.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// Whether this is a rate-limit answer (HTTP 429).
    pub fn is_rate_limited(&self) -> bool {
        self.status() == Some(429)
    }
}

/// The statuses worth retrying: timeouts, conflicts, rate limits and server-side failures.
pub fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429 | 500 | 502 | 503 | 504 | 529)
}

/// Whether an error message from a provider says the prompt is longer than the context
/// window. Covers Anthropic (`prompt is too long`), OpenAI (`context_length_exceeded`),
/// vLLM (`maximum context length`) and llama.cpp (`exceeds the available context size`).
pub fn says_context_too_long(message: &str, code: Option<&str>) -> bool {
    if matches!(
        code,
        Some("context_length_exceeded") | Some("exceed_context_size_error")
    ) {
        return true;
    }
    let m = message.to_ascii_lowercase();
    m.contains("prompt is too long")
        || m.contains("context_length_exceeded")
        || m.contains("maximum context length")
        || m.contains("exceeds the available context size")
}

/// Runs `fut` unless `cancel` fires first; a fired token wins even if both are ready.
pub async fn with_cancel<T>(
    cancel: &CancellationToken,
    fut: impl std::future::Future<Output = Result<T, ProviderError>>,
) -> Result<T, ProviderError> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(ProviderError::Cancelled),
        r = fut => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16) -> ProviderError {
        ProviderError::Http {
            status,
            message: "x".into(),
            retry_after: None,
            rate_limits: None,
        }
    }

    #[test]
    fn retryable_statuses_are_exactly_the_listed_ones() {
        let retryable: Vec<u16> = (100..600).filter(|s| http(*s).is_retryable()).collect();
        assert_eq!(retryable, vec![408, 409, 429, 500, 502, 503, 504, 529]);
        assert!(ProviderError::Network("reset".into()).is_retryable());
        assert!(ProviderError::StreamBroken("eof".into()).is_retryable());
        assert!(!ProviderError::Malformed("x".into()).is_retryable());
        assert!(!ProviderError::Cancelled.is_retryable());
        let ctx = ProviderError::ContextTooLong {
            status: 400,
            message: "prompt is too long".into(),
        };
        assert!(!ctx.is_retryable());
    }

    #[test]
    fn breaker_counts_server_failures_but_not_429_or_4xx() {
        assert!(http(500).is_provider_failure());
        assert!(http(529).is_provider_failure());
        assert!(http(408).is_provider_failure());
        assert!(!http(429).is_provider_failure());
        assert!(!http(400).is_provider_failure());
        assert!(!http(401).is_provider_failure());
        assert!(ProviderError::Network("timed out".into()).is_provider_failure());
    }

    #[test]
    fn context_too_long_detection() {
        assert!(says_context_too_long(
            "prompt is too long: 210000 tokens > 200000 maximum",
            None
        ));
        assert!(says_context_too_long(
            "whatever",
            Some("context_length_exceeded")
        ));
        assert!(says_context_too_long(
            "This model's maximum context length is 4096 tokens.",
            None
        ));
        assert!(!says_context_too_long("max_tokens: must be positive", None));
    }
}
