//! One call to a model over HTTP, whatever the wire format: the path every HTTP provider
//! takes, written once, and the [`Wire`] trait in which the Anthropic Messages API
//! ([`crate::anthropic`]) and OpenAI-compatible chat completions ([`crate::openai`]) say what
//! differs — the path, the key's header, the fixed headers, the rate-limit headers, how a
//! request is encoded and how a reply is decoded.
//!
//! Guarantees, for every wire:
//! - The base URL is the configured one, else the wire's environment variable, else its
//!   default ([`resolve_base_url`]); the wire's path is joined to it with one `/`.
//! - The body sent is the wire's JSON serialised with sorted keys ([`request_body`]): equal
//!   requests give equal bytes, which the prompt cache and resume fidelity rely on.
//! - The key is checked once, when the provider is built ([`SetupError::KeyNotAHeader`]),
//!   and goes only into the wire's key header, marked sensitive; without a key no such header
//!   is sent. Every error a call returns has the key's value replaced by `<redacted>`.
//! - A non-2xx answer is the error [`http::post`] makes of it: the provider's status, type
//!   and message, its `retry-after` and the wire's rate-limit headers.
//! - An answer of type `text/event-stream` is decoded event by event and returned only once
//!   the wire's decoder saw it complete; a stream that ends before is
//!   [`ProviderError::StreamBroken`], saying after how many events. Any other answer is read
//!   whole and decoded as one body.
//! - A reply carries the answer's rate-limit headers, and the request's model when the
//!   provider named none.
//! - A call returns [`ProviderError::Cancelled`] as soon as its token fires.

use std::marker::PhantomData;

use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::http::{self, ApiKey, HttpTimeouts, RateLimitHeaders, SetupError, header_str};
use crate::message::{ModelRequest, ModelResponse, RateLimits};
use crate::provider::{Provider, ProviderError, with_cancel};
use crate::sse::SseEvent;

/// What one wire format does its own way.
pub(crate) trait Wire: Send + Sync + 'static {
    /// The provider's name in logs and errors ([`Provider::name`]).
    const NAME: &'static str;
    /// The variable that names the base URL when the config does not.
    const BASE_URL_ENV: &'static str;
    /// The base URL when neither the config nor [`Self::BASE_URL_ENV`] names one.
    const DEFAULT_BASE_URL: &'static str;
    /// Where requests go, below the base URL.
    const PATH: &'static str;
    /// The header that carries the key, and what goes before the key in it.
    const KEY_HEADER: &'static str;
    const KEY_PREFIX: &'static str;
    /// Headers sent with every request, after the key's.
    const HEADERS: &'static [(&'static str, &'static str)];
    /// The provider's rate-limit headers.
    const RATE_LIMITS: RateLimitHeaders;
    /// Decodes a streamed reply.
    type Stream: StreamDecoder;

    /// The request as JSON, before canonical serialisation.
    fn request_json(req: &ModelRequest, stream: bool) -> Value;

    /// Decodes a whole (non-streamed) body.
    fn decode_body(body: &[u8]) -> Result<ModelResponse, ProviderError>;
}

/// Accumulates a streamed reply event by event.
pub(crate) trait StreamDecoder: Default + Send {
    /// What the error says when the stream ends before the reply is complete, e.g. `the
    /// stream ended before data: [DONE]`.
    const UNFINISHED: &'static str;

    /// Takes one event; `Ok(true)` once the reply is complete.
    fn on_event(&mut self, ev: SseEvent) -> Result<bool, ProviderError>;

    /// The reply, once [`Self::on_event`] said it is complete.
    fn finish(self) -> Result<ModelResponse, ProviderError>;
}

/// The base URL for wire `W`: the configured one, else `W::BASE_URL_ENV`, else the default.
pub(crate) fn resolve_base_url<W: Wire>(configured: Option<&str>) -> String {
    configured
        .map(str::to_string)
        .or_else(|| std::env::var(W::BASE_URL_ENV).ok())
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| W::DEFAULT_BASE_URL.to_string())
}

/// The exact bytes sent for `req` over wire `W`.
pub(crate) fn request_body<W: Wire>(req: &ModelRequest, stream: bool) -> Vec<u8> {
    http::canonical_bytes(&W::request_json(req, stream))
}

fn rate_limits<W: Wire>(h: &HeaderMap) -> RateLimits {
    W::RATE_LIMITS.read(h)
}

/// A [`Provider`] speaking wire `W` over HTTP.
#[derive(Debug)]
pub(crate) struct WireProvider<W> {
    http: reqwest::Client,
    url: String,
    /// The key header's value (sensitive), checked when built.
    auth: Option<HeaderValue>,
    /// Kept to redact it from errors.
    key: Option<ApiKey>,
    stream: bool,
    wire: PhantomData<W>,
}

impl<W: Wire> WireProvider<W> {
    /// Checks the key and builds the client; `None` sends no key header.
    pub(crate) fn new(
        base_url: &str,
        key: Option<ApiKey>,
        stream: bool,
        timeouts: HttpTimeouts,
    ) -> Result<Self, SetupError> {
        let auth = match &key {
            Some(k) => Some(k.header_value(W::KEY_PREFIX)?),
            None => None,
        };
        Ok(Self {
            http: http::build_client(timeouts)?,
            url: http::join_url(base_url, W::PATH),
            auth,
            key,
            stream,
            wire: PhantomData,
        })
    }

    fn headers(&self) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(auth) = &self.auth {
            h.insert(http::header_name(W::KEY_HEADER), auth.clone());
        }
        for (name, value) in W::HEADERS {
            h.insert(http::header_name(name), HeaderValue::from_static(value));
        }
        h
    }

    async fn call(&self, req: &ModelRequest) -> Result<ModelResponse, ProviderError> {
        let result = self.call_once(req).await;
        match &self.key {
            Some(k) => result.map_err(|e| e.redact(k.expose())),
            None => result,
        }
    }

    async fn call_once(&self, req: &ModelRequest) -> Result<ModelResponse, ProviderError> {
        let body = request_body::<W>(req, self.stream);
        let resp = http::post(
            &self.http,
            &self.url,
            self.headers(),
            body,
            rate_limits::<W>,
        )
        .await?;
        let limits = rate_limits::<W>(resp.headers());
        let is_sse = header_str(resp.headers(), "content-type")
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        let mut reply = if is_sse {
            decode_stream::<W::Stream>(resp).await?
        } else {
            W::decode_body(&http::read_body(resp).await?)?
        };
        if reply.model.is_empty() {
            reply.model = req.model.clone();
        }
        reply.rate_limits = limits;
        Ok(reply)
    }
}

/// Feeds the event stream to a fresh `D` and returns its reply if the stream completed it.
async fn decode_stream<D: StreamDecoder>(
    resp: reqwest::Response,
) -> Result<ModelResponse, ProviderError> {
    let mut decoder = D::default();
    let mut events = 0usize;
    let complete = http::drive_sse(resp, |ev| {
        events += 1;
        decoder.on_event(ev)
    })
    .await?;
    if !complete {
        return Err(ProviderError::StreamBroken(format!(
            "{} (after {events} events)",
            D::UNFINISHED
        )));
    }
    decoder.finish()
}

impl<W: Wire> Provider for WireProvider<W> {
    fn name(&self) -> &str {
        W::NAME
    }

    fn send<'a>(
        &'a self,
        req: &'a ModelRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>> {
        Box::pin(with_cancel(cancel, self.call(req)))
    }
}
