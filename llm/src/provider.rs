//! The one trait every model backend implements, and the one error type they all return.
//!
//! Guarantees:
//! - [`Provider`] is dyn-compatible (`Arc<dyn Provider>`), and a call honours its
//!   [`CancellationToken`]: once the token fires, the call returns [`ProviderError::Cancelled`]
//!   without waiting for the network.
//! - A provider never returns a reply it did not receive completely: a body or stream that ends
//!   early is [`ProviderError::StreamBroken`], never a partial [`ModelResponse`].
//! - A 200 whose body cannot be read (not JSON, the wrong shape, truncated, garbage SSE
//!   `data:`) is [`ProviderError::Malformed`] with a message saying what was wrong — never a
//!   panic. A broken proxy is as transient as a broken stream, so it is retried like one. A
//!   tool call whose arguments are not valid JSON is not an error: the model wrote them, and
//!   the reply carries them as written for the loop to answer (see [`crate::reply`]).
//! - [`ProviderError::is_retryable`] is true only for HTTP 408/409/429/500/502/503/504/529,
//!   network failures, broken streams and malformed replies; everything else (400, 401, 403,
//!   context too long, an exhausted script, cancellation, configuration) must not be retried.
//! - [`ProviderError::Http`] keeps the provider's real error as (status, type, message), shown
//!   as `HTTP 529 overloaded_error: Overloaded`; [`ProviderError::CircuitOpen`] carries the
//!   failure that keeps the circuit open and leads its message with it, so the real cause is
//!   never hidden behind "circuit open". [`ProviderError::retry_hint`] says how long to wait.
//! - Errors carry the provider's own message, never the API key (a key the provider echoes
//!   back is replaced by `<redacted>`).

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
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderError {
    /// The provider answered with a non-success HTTP status (or an error event standing for
    /// one inside a stream).
    #[error("HTTP {status}{}: {message}", type_suffix(.error_type))]
    Http {
        status: u16,
        /// The provider's machine-readable error type, e.g. `overloaded_error` (Anthropic's
        /// `error.type`), `invalid_request_error` (OpenAI's `error.type`, else its
        /// `error.code`). `None` when the body had none.
        error_type: Option<String>,
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
    /// The provider answered 200, but not with something we can read. Retryable: a broken
    /// proxy or a garbled stream is as transient as a dropped connection.
    #[error("malformed reply: {0}")]
    Malformed(String),
    /// The client's circuit breaker is open: the call was not attempted (or, if the circuit
    /// opened during this call, not attempted again).
    #[error("{}", circuit_open_message(.model, *.retry_in, .last_error.as_deref()))]
    CircuitOpen {
        model: String,
        /// How long until the breaker lets its next probe through. While a probe is already
        /// in flight this is one cooldown: the wait if that probe fails.
        retry_in: Duration,
        /// The latest provider failure the breaker saw (the one that opened the circuit, or
        /// the failed probe since): the real cause of the outage.
        last_error: Option<Box<ProviderError>>,
    },
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

fn type_suffix(error_type: &Option<String>) -> String {
    error_type
        .as_deref()
        .map(|t| format!(" {t}"))
        .unwrap_or_default()
}

fn circuit_open_message(model: &str, retry_in: Duration, cause: Option<&ProviderError>) -> String {
    let wait = human_duration(retry_in);
    match cause {
        Some(cause) => {
            format!("model {model} is unavailable: {cause} (circuit open; next probe in {wait})")
        }
        None => format!("model {model} is unavailable: circuit open; next probe in {wait}"),
    }
}

/// `25s`, `1m30s`, `200ms`: a wait as a person reads it (whole seconds from one second up).
pub fn human_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    let secs = d.as_secs() + u64::from(d.subsec_millis() >= 500);
    match (secs / 3600, secs % 3600 / 60, secs % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, 0) => format!("{h}h"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}

impl ProviderError {
    /// What kind of failure an attempt met, as the metrics count it
    /// (`nightshift_model_errors_total`): `rate_limited` (429), `overloaded` (529 or an
    /// `overloaded_error`), `timeout` (408, 504, or no answer in time), `server_error` (other
    /// 5xx), `client_error` (other 4xx), `network`, `stream_broken`, `malformed`,
    /// `context_too_long`, `other`. `None` when no attempt reached the provider (an open
    /// circuit, a cancellation).
    pub fn kind(&self) -> Option<&'static str> {
        Some(match self {
            ProviderError::Http { status: 429, .. } => "rate_limited",
            ProviderError::Http { status: 529, .. } => "overloaded",
            ProviderError::Http {
                error_type: Some(t),
                ..
            } if t == "overloaded_error" => "overloaded",
            ProviderError::Http {
                status: 408 | 504, ..
            } => "timeout",
            ProviderError::Http { status, .. } if *status >= 500 => "server_error",
            ProviderError::Http { .. } => "client_error",
            ProviderError::ContextTooLong { .. } => "context_too_long",
            ProviderError::Network(m) if m.starts_with("timed out") => "timeout",
            ProviderError::Network(_) => "network",
            ProviderError::StreamBroken(_) => "stream_broken",
            ProviderError::Malformed(_) => "malformed",
            ProviderError::Config(_) | ProviderError::Script { .. } => "other",
            ProviderError::CircuitOpen { .. } | ProviderError::Cancelled => return None,
        })
    }

    /// Whether the same request may succeed if sent again.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Http { status, .. } => is_retryable_status(*status),
            ProviderError::Network(_)
            | ProviderError::StreamBroken(_)
            | ProviderError::Malformed(_) => true,
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
    /// circuit): 5xx, 529, 408 (timeouts), network or stream failures and malformed replies.
    /// A 429 or another 4xx means the provider answered sensibly, so it does not count.
    pub fn is_provider_failure(&self) -> bool {
        match self {
            ProviderError::Http { status, .. } => *status >= 500 || *status == 408,
            ProviderError::Network(_)
            | ProviderError::StreamBroken(_)
            | ProviderError::Malformed(_) => true,
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

    /// The provider's error type (`overloaded_error`, …), for `Http`.
    pub fn error_type(&self) -> Option<&str> {
        match self {
            ProviderError::Http { error_type, .. } => error_type.as_deref(),
            _ => None,
        }
    }

    /// How long the provider asked us to wait before the next call (its `retry-after`).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::Http { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// How long a caller should wait before trying again, when anyone said: for an open
    /// circuit, the time until the breaker's next probe (which already honours the
    /// provider's `retry-after`); for an HTTP error, the provider's `retry-after`. `None`
    /// means nobody said (use your own backoff) or the error is not worth retrying.
    pub fn retry_hint(&self) -> Option<Duration> {
        match self {
            ProviderError::CircuitOpen { retry_in, .. } => Some(*retry_in),
            _ => self.retry_after(),
        }
    }

    /// The provider's real failure behind this error: for an open circuit, the latest
    /// failure the breaker saw (if any); otherwise the error itself. Use it to record
    /// (status, type, message) on a run.
    pub fn root_cause(&self) -> &ProviderError {
        match self {
            ProviderError::CircuitOpen {
                last_error: Some(e),
                ..
            } => e.root_cause(),
            e => e,
        }
    }

    /// Whether this is a rate-limit answer (HTTP 429).
    pub fn is_rate_limited(&self) -> bool {
        self.status() == Some(429)
    }

    /// Replaces every occurrence of `secret` in the error's text with `<redacted>`.
    pub(crate) fn redact(self, secret: &str) -> Self {
        if secret.is_empty() {
            return self;
        }
        let r = |s: String| s.replace(secret, "<redacted>");
        match self {
            ProviderError::Http {
                status,
                error_type,
                message,
                retry_after,
                rate_limits,
            } => ProviderError::Http {
                status,
                error_type: error_type.map(r),
                message: r(message),
                retry_after,
                rate_limits,
            },
            ProviderError::ContextTooLong { status, message } => ProviderError::ContextTooLong {
                status,
                message: r(message),
            },
            ProviderError::Network(m) => ProviderError::Network(r(m)),
            ProviderError::StreamBroken(m) => ProviderError::StreamBroken(r(m)),
            ProviderError::Malformed(m) => ProviderError::Malformed(r(m)),
            other => other,
        }
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
            error_type: None,
            message: "x".into(),
            retry_after: None,
            rate_limits: None,
        }
    }

    fn overloaded() -> ProviderError {
        ProviderError::Http {
            status: 529,
            error_type: Some("overloaded_error".into()),
            message: "Overloaded".into(),
            retry_after: Some(Duration::from_secs(7)),
            rate_limits: None,
        }
    }

    #[test]
    fn failed_attempts_are_named_for_the_metrics() {
        let kinds: Vec<(u16, &str)> = [400, 401, 404, 408, 429, 500, 503, 504, 529]
            .into_iter()
            .map(|s| (s, http(s).kind().unwrap()))
            .collect();
        assert_eq!(
            kinds,
            [
                (400, "client_error"),
                (401, "client_error"),
                (404, "client_error"),
                (408, "timeout"),
                (429, "rate_limited"),
                (500, "server_error"),
                (503, "server_error"),
                (504, "timeout"),
                (529, "overloaded"),
            ]
        );
        let mut overloaded_500 = http(500);
        if let ProviderError::Http { error_type, .. } = &mut overloaded_500 {
            *error_type = Some("overloaded_error".into());
        }
        assert_eq!(overloaded_500.kind(), Some("overloaded"));
        let network = |m: &str| ProviderError::Network(m.into()).kind();
        assert_eq!(network("timed out: operation timed out"), Some("timeout"));
        assert_eq!(network("cannot connect: refused"), Some("network"));
        assert_eq!(ProviderError::Cancelled.kind(), None);
        assert_eq!(
            ProviderError::CircuitOpen {
                model: "m".into(),
                retry_in: Duration::from_secs(1),
                last_error: None
            }
            .kind(),
            None
        );
    }

    #[test]
    fn retryable_statuses_are_exactly_the_listed_ones_plus_network_stream_and_malformed() {
        let retryable: Vec<u16> = (100..600).filter(|s| http(*s).is_retryable()).collect();
        assert_eq!(retryable, vec![408, 409, 429, 500, 502, 503, 504, 529]);
        assert!(ProviderError::Network("reset".into()).is_retryable());
        assert!(ProviderError::StreamBroken("eof".into()).is_retryable());
        assert!(ProviderError::Malformed("truncated JSON".into()).is_retryable());
        assert!(!ProviderError::Cancelled.is_retryable());
        assert!(!ProviderError::Config("x".into()).is_retryable());
        let open = ProviderError::CircuitOpen {
            model: "m".into(),
            retry_in: Duration::from_secs(1),
            last_error: None,
        };
        assert!(
            !open.is_retryable(),
            "the client does not retry into an open circuit"
        );
        assert!(open.is_transient());
        assert!(ProviderError::Malformed("x".into()).is_transient());
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
        assert!(ProviderError::StreamBroken("eof".into()).is_provider_failure());
        assert!(ProviderError::Malformed("garbage".into()).is_provider_failure());
        assert!(!ProviderError::Cancelled.is_provider_failure());
    }

    #[test]
    fn http_errors_show_status_type_and_message() {
        assert_eq!(
            overloaded().to_string(),
            "HTTP 529 overloaded_error: Overloaded"
        );
        assert_eq!(http(502).to_string(), "HTTP 502: x");
        assert_eq!(overloaded().error_type(), Some("overloaded_error"));
    }

    #[test]
    fn an_open_circuit_leads_with_the_real_cause_and_hints_its_probe() {
        let open = ProviderError::CircuitOpen {
            model: "claude-x".into(),
            retry_in: Duration::from_millis(24_600),
            last_error: Some(Box::new(overloaded())),
        };
        assert_eq!(
            open.to_string(),
            "model claude-x is unavailable: HTTP 529 overloaded_error: Overloaded \
             (circuit open; next probe in 25s)"
        );
        assert_eq!(open.retry_hint(), Some(Duration::from_millis(24_600)));
        assert_eq!(open.root_cause().status(), Some(529));
        assert_eq!(open.root_cause().error_type(), Some("overloaded_error"));
        assert_eq!(overloaded().retry_hint(), Some(Duration::from_secs(7)));
        assert_eq!(ProviderError::Network("x".into()).retry_hint(), None);

        let bare = ProviderError::CircuitOpen {
            model: "m".into(),
            retry_in: Duration::from_millis(200),
            last_error: None,
        };
        assert_eq!(
            bare.to_string(),
            "model m is unavailable: circuit open; next probe in 200ms"
        );
        assert!(matches!(
            bare.root_cause(),
            ProviderError::CircuitOpen { .. }
        ));
    }

    #[test]
    fn durations_read_like_a_person_wrote_them() {
        let d = |ms: u64| human_duration(Duration::from_millis(ms));
        assert_eq!(d(0), "0ms");
        assert_eq!(d(999), "999ms");
        assert_eq!(d(1_000), "1s");
        assert_eq!(d(59_400), "59s");
        assert_eq!(d(90_000), "1m30s");
        assert_eq!(d(120_000), "2m");
        assert_eq!(d(3_600_000), "1h");
        assert_eq!(d(5_430_000), "1h30m");
    }

    #[test]
    fn redact_removes_the_key_from_every_message() {
        let e = ProviderError::Http {
            status: 401,
            error_type: None,
            message: "bad key sk-secret".into(),
            retry_after: None,
            rate_limits: None,
        }
        .redact("sk-secret");
        assert_eq!(e.to_string(), "HTTP 401: bad key <redacted>");
        let e = ProviderError::Malformed("body: sk-secret".into()).redact("sk-secret");
        assert!(!e.to_string().contains("sk-secret"));
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
