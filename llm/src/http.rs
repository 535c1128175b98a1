//! HTTP plumbing shared by the Anthropic and OpenAI-compatible providers.
//!
//! Guarantees:
//! - [`ApiKey`] never shows its value in `Debug` or `Display`, and the header carrying it is
//!   marked sensitive so reqwest does not log it either.
//! - Setting up fails only as a [`SetupError`]: a key that cannot be a header value, or a
//!   client reqwest cannot build.
//! - `post` turns every failure into the right [`ProviderError`]: no response → `Network`;
//!   non-2xx → `Http` with the provider's own error type and message (Anthropic and OpenAI
//!   error bodies; the start of the body otherwise), `retry-after` and rate-limit headers, or
//!   `ContextTooLong` when a 400 says the prompt is too long.
//! - `read_body` and `drive_sse` report a body that breaks off as `StreamBroken`.
//! - [`canonical_bytes`] gives the same bytes for equal JSON values whatever order their
//!   object keys were inserted in (even if a dependency turns on serde_json's `preserve_order`).

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use crate::message::RateLimits;
use crate::provider::{ProviderError, says_context_too_long};
use crate::sse::{SseEvent, SseParser};

/// An API key read from the environment. Its value is never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// Reads the key from the environment variable named `var`.
    pub fn from_env(var: &str) -> Option<Self> {
        std::env::var(var)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| Self(v.trim().to_string()))
    }

    /// The key's value, for redacting it from error text (never for printing).
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }

    pub(crate) fn header_value(&self, prefix: &str) -> Result<HeaderValue, SetupError> {
        let mut v = HeaderValue::from_str(&format!("{prefix}{}", self.0))
            .map_err(|_| SetupError::KeyNotAHeader)?;
        v.set_sensitive(true);
        Ok(v)
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Why an HTTP provider, or the HTTP client under it, could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The key cannot travel in an HTTP header (a line break or another control character
    /// in the variable's value).
    #[error("the API key contains characters not allowed in a header")]
    KeyNotAHeader,
    /// reqwest could not build the client; its error says why.
    #[error("cannot build the HTTP client: {0}")]
    Client(reqwest::Error),
}

/// Network timeouts of one provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpTimeouts {
    /// TCP + TLS connect.
    pub connect: Duration,
    /// Longest silence between two reads of the body (a stalled stream).
    pub read_idle: Duration,
    /// The whole call, from sending to the last byte.
    pub total: Duration,
}

impl Default for HttpTimeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            read_idle: Duration::from_secs(300),
            total: Duration::from_secs(900),
        }
    }
}

/// Installs rustls' `ring` crypto provider if the process has none: reqwest is built here
/// without one, so call this before building any client of your own.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing the race to another thread installing one is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Builds the reqwest client, installing rustls' `ring` crypto provider if the process has none.
pub fn build_client(timeouts: HttpTimeouts) -> Result<reqwest::Client, SetupError> {
    install_crypto_provider();
    reqwest::Client::builder()
        .connect_timeout(timeouts.connect)
        .read_timeout(timeouts.read_idle)
        .timeout(timeouts.total)
        .build()
        .map_err(SetupError::Client)
}

/// Sends `body` as a JSON POST. Returns the response when its status is 2xx, else the error.
pub(crate) async fn post(
    http: &reqwest::Client,
    url: &str,
    headers: HeaderMap,
    body: Vec<u8>,
    rate_limits: fn(&HeaderMap) -> RateLimits,
) -> Result<reqwest::Response, ProviderError> {
    let resp = http
        .post(url)
        .headers(headers)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| ProviderError::Network(describe(&e)))?;
    let status = resp.status().as_u16();
    if resp.status().is_success() {
        return Ok(resp);
    }
    let headers = resp.headers().clone();
    let body = resp.bytes().await.unwrap_or_default();
    Err(with_endpoint_hint(
        error_from_status(status, &headers, &body, rate_limits),
        url,
    ))
}

/// A 404 says which URL was asked and what usually makes it wrong: the provider's
/// `base_url` (an OpenAI-compatible server — vLLM, Ollama, llama.cpp — serves under `/v1`).
fn with_endpoint_hint(e: ProviderError, url: &str) -> ProviderError {
    match e {
        ProviderError::Http {
            status: 404,
            error_type,
            message,
            retry_after,
            rate_limits,
        } => {
            let asked = url.split('?').next().unwrap_or(url);
            ProviderError::Http {
                status: 404,
                error_type,
                message: format!(
                    "{message} (POST {asked} was not found: check the provider's base_url — an \
                     OpenAI-compatible server usually wants it to end in /v1, like \
                     http://127.0.0.1:11434/v1 for Ollama or http://127.0.0.1:8000/v1 for vLLM — \
                     and the model name)"
                ),
                retry_after,
                rate_limits,
            }
        }
        other => other,
    }
}

/// The error for a non-2xx answer.
pub(crate) fn error_from_status(
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    rate_limits: fn(&HeaderMap) -> RateLimits,
) -> ProviderError {
    let ErrorBody {
        message,
        error_type,
        code,
    } = error_body(body);
    if (status == 400 || status == 413) && says_context_too_long(&message, code.as_deref()) {
        return ProviderError::ContextTooLong { status, message };
    }
    let limits = rate_limits(headers);
    ProviderError::Http {
        status,
        error_type: error_type.or(code),
        message,
        retry_after: retry_after(headers),
        rate_limits: (limits != RateLimits::default()).then(|| Box::new(limits)),
    }
}

/// What an error body says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ErrorBody {
    pub message: String,
    /// `error.type` (Anthropic `overloaded_error`, OpenAI `invalid_request_error`).
    pub error_type: Option<String>,
    /// `error.code` when it is a string (OpenAI `context_length_exceeded`).
    pub code: Option<String>,
}

/// Reads an error body. Understands Anthropic's `{"type":"error","error":{"type","message"}}`,
/// OpenAI's `{"error":{"message","type","code"}}`, `{"error":"…"}` and `{"message":"…"}`;
/// anything else gives the start of the body as the message.
pub(crate) fn error_body(body: &[u8]) -> ErrorBody {
    if let Ok(v) = serde_json::from_slice::<Value>(body)
        && let Some(parsed) = error_object(&v)
    {
        return parsed;
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    ErrorBody {
        message: if text.is_empty() {
            "(empty body)".to_string()
        } else {
            truncate(text, 1000)
        },
        error_type: None,
        code: None,
    }
}

/// The error a JSON value describes (see [`error_body`]), if it has a message.
pub(crate) fn error_object(v: &Value) -> Option<ErrorBody> {
    let err = v.get("error").unwrap_or(v);
    if let Some(s) = err.as_str() {
        return Some(ErrorBody {
            message: s.to_string(),
            error_type: None,
            code: None,
        });
    }
    let text = |k: &str| {
        err.get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    Some(ErrorBody {
        message: text("message")?,
        error_type: text("type"),
        code: text("code"),
    })
}

/// `retry-after-ms` (milliseconds) if present, else `retry-after` (seconds or an HTTP date).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    if let Some(ms) = header_str(headers, "retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let v = header_str(headers, "retry-after")?;
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(
        when.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

pub(crate) fn header_str<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

pub(crate) fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    header_str(headers, name).and_then(|v| v.parse().ok())
}

pub(crate) fn header_name(name: &'static str) -> HeaderName {
    HeaderName::from_static(name)
}

/// The names of one provider's rate-limit headers.
pub(crate) struct RateLimitHeaders {
    pub requests_limit: &'static str,
    pub requests_remaining: &'static str,
    pub requests_reset: &'static str,
    pub tokens_limit: &'static str,
    pub tokens_remaining: &'static str,
    pub tokens_reset: &'static str,
}

impl RateLimitHeaders {
    /// Reads them from `h`; one missing (or, for a count, not a number) is `None`.
    pub(crate) fn read(&self, h: &HeaderMap) -> RateLimits {
        let s = |n: &str| header_str(h, n).map(str::to_string);
        RateLimits {
            requests_limit: header_u64(h, self.requests_limit),
            requests_remaining: header_u64(h, self.requests_remaining),
            requests_reset: s(self.requests_reset),
            tokens_limit: header_u64(h, self.tokens_limit),
            tokens_remaining: header_u64(h, self.tokens_remaining),
            tokens_reset: s(self.tokens_reset),
        }
    }
}

/// Reads a whole (non-streamed) body; a body that breaks off is `StreamBroken`.
pub(crate) async fn read_body(resp: reqwest::Response) -> Result<Bytes, ProviderError> {
    resp.bytes()
        .await
        .map_err(|e| ProviderError::StreamBroken(describe(&e)))
}

/// Feeds a server-sent-event body to `on_event` until it returns `true` (the reply is
/// complete) or the body ends. Returns whether the handler saw the reply complete.
pub(crate) async fn drive_sse(
    resp: reqwest::Response,
    mut on_event: impl FnMut(SseEvent) -> Result<bool, ProviderError>,
) -> Result<bool, ProviderError> {
    let mut parser = SseParser::default();
    let mut body = resp.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| ProviderError::StreamBroken(describe(&e)))?;
        for event in parser.push(&chunk) {
            if on_event(event)? {
                return Ok(true);
            }
        }
    }
    for event in parser.finish() {
        if on_event(event)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Serialises `value` with every object's keys sorted.
pub fn canonical_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(&canonical(value)).expect("a JSON value always serialises")
}

/// A copy of `value` whose objects have their keys inserted in sorted order.
pub fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), canonical(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// A reqwest error with its causes, without the URL's query (which never holds the key here,
/// but may hold other things).
fn describe(e: &reqwest::Error) -> String {
    let mut out = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "cannot connect".to_string()
    } else {
        "request failed".to_string()
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Joins a base URL and a path with exactly one `/` between them.
pub(crate) fn join_url(base: &str, path: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_key_is_never_printed() {
        let k = ApiKey::new("sk-secret-123");
        assert_eq!(format!("{k:?}"), "ApiKey(<redacted>)");
        assert!(k.header_value("Bearer ").unwrap().is_sensitive());
    }

    #[test]
    fn error_bodies_of_each_shape() {
        let anthropic =
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(
            error_body(anthropic),
            ErrorBody {
                message: "Overloaded".into(),
                error_type: Some("overloaded_error".into()),
                code: None,
            }
        );
        let openai = br#"{"error":{"message":"too long","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        assert_eq!(
            error_body(openai),
            ErrorBody {
                message: "too long".into(),
                error_type: Some("invalid_request_error".into()),
                code: Some("context_length_exceeded".into()),
            }
        );
        // vLLM sends a numeric code: it is not a type.
        let vllm = br#"{"object":"error","message":"boom","type":"BadRequestError","code":400}"#;
        assert_eq!(
            error_body(vllm).error_type.as_deref(),
            Some("BadRequestError")
        );
        assert_eq!(error_body(vllm).code, None);
        assert_eq!(
            error_body(br#"{"error":"model not found"}"#).message,
            "model not found"
        );
        assert_eq!(error_body(b"Bad Gateway").message, "Bad Gateway");
        assert_eq!(error_body(b"").message, "(empty body)");
        assert_eq!(
            error_body(br#"{"error":{"code":1}}"#).message,
            r#"{"error":{"code":1}}"#
        );
    }

    #[test]
    fn an_http_error_keeps_type_or_else_code() {
        let h = HeaderMap::new();
        let none = |_: &HeaderMap| RateLimits::default();
        let e = error_from_status(
            529,
            &h,
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            none,
        );
        assert_eq!(e.to_string(), "HTTP 529 overloaded_error: Overloaded");
        let e = error_from_status(
            429,
            &h,
            br#"{"error":{"message":"slow","code":"rate_limit_exceeded"}}"#,
            none,
        );
        assert_eq!(e.error_type(), Some("rate_limit_exceeded"));
        let e = error_from_status(502, &h, b"<html>Bad Gateway</html>", none);
        assert_eq!(e.to_string(), "HTTP 502: <html>Bad Gateway</html>");
    }

    #[test]
    fn retry_after_forms() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
        let mut h = HeaderMap::new();
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn canonical_sorts_keys_at_every_depth() {
        let v: Value = serde_json::from_str(r#"{"b":{"z":1,"a":[{"y":2,"x":1}]},"a":0}"#).unwrap();
        assert_eq!(
            String::from_utf8(canonical_bytes(&v)).unwrap(),
            r#"{"a":0,"b":{"a":[{"x":1,"y":2}],"z":1}}"#
        );
    }

    #[test]
    fn url_join() {
        assert_eq!(
            join_url("http://h/v1/", "/chat/completions"),
            "http://h/v1/chat/completions"
        );
        assert_eq!(join_url("http://h", "v1/messages"), "http://h/v1/messages");
    }
}
