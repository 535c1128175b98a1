//! `http_request {method, url, headers?, body?}`: HTTP to allow-listed hosts.
//!
//! Guarantees: nothing is sent to a host that is not on the context's allowlist (a port-less
//! entry allows only the scheme's default port; redirects are not followed: a 3xx is returned
//! with its `Location` so the model can decide, and a new request is checked again), and a
//! secret bound to hosts is never placed in a request to another host (checked before
//! anything is sent); the model cannot set `Host`, pseudo-headers, hop-by-hop or framing
//! headers, or method overrides, so the request goes where its URL says, as it says; GET and HEAD
//! are `read_only`, every other method is `side_effect` and carries
//! `Idempotency-Key: <run id>:<tool call id>` (the same key on a re-run); a request that got
//! no answer is sent again as it is (up to three times in all) only when that cannot do
//! anything twice — it never left (no connection), or it is a GET/HEAD; a write that may
//! have been received is not sent again, and the model is told it may or may not have taken
//! effect, with its key, and to check before sending a new one; `{{secret:NAME}}`
//! placeholders are filled in headers and body, and a URL may be one placeholder as a whole
//! when that secret is bound to hosts (a webhook URL that is itself the credential: Slack's
//! incoming webhooks) — a placeholder in part of a URL is refused; secret values are redacted
//! from everything shown to the model; the response body is streamed into a bounded capture; cancellation aborts the
//! request; HTTP status >= 400 is an `is_error` output.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Client, Method, Url};
use serde::Deserialize;
use serde_json::{Value, json};

use super::parse_input;
use crate::context::{ToolContext, default_port};
use crate::output::Capture;
use crate::secrets::SecretResolver;
use crate::{Tool, ToolClass, ToolDefinition, ToolOutput};

const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
const SHOWN_HEADERS: [&str; 4] = ["content-type", "content-length", "location", "retry-after"];

/// Why the model may not set header `name` (any case), or `None` if it may.
fn refused_header(name: &str) -> Option<String> {
    let lower = name.to_ascii_lowercase();
    let why = match lower.as_str() {
        n if n.starts_with(':') => "pseudo-headers are set from the URL",
        "host" => {
            "the Host header is set from the URL, so the request goes only where the URL says"
        }
        "forwarded" | "x-forwarded-host" | "x-original-url" | "x-rewrite-url" => {
            "routing headers could make a proxy send the request to another host or path"
        }
        "connection" | "keep-alive" | "proxy-connection" | "te" | "trailer" | "upgrade"
        | "transfer-encoding" | "content-length" | "expect" => {
            "hop-by-hop and framing headers are managed by the HTTP client"
        }
        "x-http-method-override" | "x-http-method" | "x-method-override" => {
            "method overrides would change what the request does; set `method` instead"
        }
        _ => return None,
    };
    Some(format!(
        "header `{name}` cannot be set: {why}; remove it (the request was not sent)"
    ))
}

/// `http_request`: see the module documentation. One connection pool per value.
#[derive(Debug, Default)]
pub struct HttpRequest {
    client: OnceLock<Result<Client, String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpInput {
    method: String,
    url: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    body: Option<String>,
}

/// The method names the schema accepts: each of [`METHODS`] in upper and in lower case (the
/// tool itself is case-insensitive, and models send `post` as often as `POST`).
fn method_names() -> Vec<String> {
    METHODS
        .iter()
        .map(|m| m.to_string())
        .chain(METHODS.iter().map(|m| m.to_ascii_lowercase()))
        .collect()
}

fn is_read_only(method: &str) -> bool {
    method.eq_ignore_ascii_case("GET") || method.eq_ignore_ascii_case("HEAD")
}

impl HttpRequest {
    pub fn new() -> Self {
        Self::default()
    }

    fn client(&self) -> Result<&Client, String> {
        self.client
            .get_or_init(|| {
                // Another provider may already be installed by the process; either is fine.
                let _ = rustls::crypto::ring::default_provider().install_default();
                Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .no_proxy()
                    .build()
                    .map_err(|e| format!("cannot build the HTTP client: {e}"))
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl Tool for HttpRequest {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "http_request".into(),
            description: "Send an HTTP request to an allowed host and return the status, main \
                          headers and body. Use `{{secret:NAME}}` in header values or the body to \
                          insert a configured secret (its value is never shown; a secret bound \
                          to hosts can only be sent to those). Host, hop-by-hop and routing \
                          headers cannot be set. Redirects are not followed. Requests other than GET/HEAD carry an Idempotency-Key \
                          header that stays the same if this call is retried."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "method": {"type": "string", "enum": method_names(), "description": "HTTP method (upper or lower case)."},
                    "url": {"type": "string", "description": "Absolute http(s) URL, or `{{secret:NAME}}` for a webhook URL kept as a secret."},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                    "body": {"type": "string"}
                },
                "required": ["method", "url"],
                "additionalProperties": false
            }),
            class: ToolClass::SideEffect,
        }
    }

    fn class_for(&self, input: &Value) -> ToolClass {
        match input.get("method").and_then(Value::as_str) {
            Some(m) if is_read_only(m) => ToolClass::ReadOnly,
            _ => ToolClass::SideEffect,
        }
    }

    fn call<'a>(&'a self, ctx: &'a ToolContext, input: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let input: HttpInput = match parse_input("http_request", input) {
                Ok(i) => i,
                Err(e) => return e,
            };
            let request = match self.build(ctx, input) {
                Ok(r) => r,
                Err(e) => return ToolOutput::error(e),
            };
            tokio::select! {
                biased;
                _ = ctx.cancel().cancelled() => ToolOutput::error("cancelled before the response arrived; the request may or may not have been received"),
                out = send(ctx, request) => out,
            }
        })
    }
}

impl HttpRequest {
    /// The request's URL: as written, or — when it is exactly one `{{secret:NAME}}` of a
    /// secret bound to hosts — the secret's value (a webhook URL that is itself the
    /// credential). A placeholder anywhere else in a URL is refused.
    fn url(&self, ctx: &ToolContext, text: &str) -> Result<Url, String> {
        if !SecretResolver::has_placeholder(text) {
            return Url::parse(text).map_err(|e| format!("invalid URL `{text}`: {e}"));
        }
        let whole = crate::secrets::PLACEHOLDER
            .captures(text.trim())
            .filter(|c| c.get(0).is_some_and(|m| m.as_str() == text.trim()))
            .and_then(|c| c.get(1))
            .map(|m| m.as_str().to_string());
        let Some(name) = whole else {
            return Err(
                "a secret may be the whole URL (`{{secret:NAME}}`, for a webhook URL that is \
                 itself the credential) or go in header values and the body, never in part of \
                 a URL"
                    .to_string(),
            );
        };
        if ctx.secret_bindings().hosts(&name).is_none() {
            return Err(format!(
                "secret `{name}` can be a URL only when it is bound to hosts (runtime.secrets = \
                 [{{ name = \"{name}\", hosts = [\"hooks.example.com\"] }}]), so that it can \
                 only go there; the request was not sent"
            ));
        }
        let value = ctx
            .secrets()
            .substitute(text.trim())
            .map_err(|e| e.to_string())?;
        match Url::parse(&value) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => Ok(url),
            // Nothing of the value is shown: not even its scheme.
            _ => Err(format!(
                "secret `{name}` is not an http(s) URL, so it cannot be the request's URL"
            )),
        }
    }

    fn build(
        &self,
        ctx: &ToolContext,
        input: HttpInput,
    ) -> Result<reqwest::RequestBuilder, String> {
        let method_name = input.method.to_ascii_uppercase();
        if !METHODS.contains(&method_name.as_str()) {
            return Err(format!(
                "unsupported method `{}`; use one of {}",
                input.method,
                METHODS.join(", ")
            ));
        }
        let method = Method::from_bytes(method_name.as_bytes()).map_err(|e| e.to_string())?;
        let url = self.url(ctx, &input.url)?;
        let (host, port, default_port) = allowed_target(ctx, &url)?;
        if let Some(refusal) = input.headers.keys().find_map(|n| refused_header(n)) {
            return Err(refusal);
        }
        let texts = input
            .headers
            .values()
            .chain(&input.body)
            .chain(std::iter::once(&input.url))
            .map(String::as_str);
        ctx.secret_bindings()
            .check(texts, host, port, default_port)
            .map_err(|e| e.to_string())?;
        let headers = request_headers(ctx, &input.headers, !is_read_only(&method_name))?;
        let mut request = self
            .client()?
            .request(method, url)
            .headers(headers)
            .timeout(ctx.limits().http_timeout);
        if let Some(body) = &input.body {
            let filled = ctx.secrets().substitute(body).map_err(|e| e.to_string())?;
            request = request.body(filled);
        }
        Ok(request)
    }
}

/// `url`'s host, port and its scheme's default port, when the agent's HTTP allowlist lets
/// the request go there; otherwise why not.
fn allowed_target<'u>(ctx: &ToolContext, url: &'u Url) -> Result<(&'u str, u16, u16), String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "only http and https URLs are allowed, not `{}`",
            url.scheme()
        ));
    }
    let host = url.host_str().unwrap_or_default();
    let default_port = default_port(url.scheme()).unwrap_or_default();
    let port = url.port_or_known_default().unwrap_or(default_port);
    if ctx.http_allowlist().allows(url) {
        return Ok((host, port, default_port));
    }
    let allowed = ctx.http_allowlist().entries();
    let target = if port == default_port {
        format!("host `{host}`")
    } else {
        format!("`{host}:{port}`")
    };
    Err(format!(
        "{target} is not on this agent's HTTP allowlist (allowed: {}; an entry without a port \
         allows only port {default_port} for {}); the request was not sent",
        if allowed.is_empty() {
            "none".to_string()
        } else {
            allowed.join(", ")
        },
        url.scheme()
    ))
}

/// The request's headers with their secrets filled in (and marked sensitive), plus the
/// call's `Idempotency-Key` when the request is a `write`.
fn request_headers(
    ctx: &ToolContext,
    given: &BTreeMap<String, String>,
    write: bool,
) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::new();
    for (name, value) in given {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("invalid header name `{name}`"))?;
        let filled = ctx.secrets().substitute(value).map_err(|e| e.to_string())?;
        let mut filled = HeaderValue::from_str(&filled)
            .map_err(|_| format!("invalid value for header `{name}`"))?;
        if SecretResolver::has_placeholder(value) {
            filled.set_sensitive(true);
        }
        headers.insert(header, filled);
    }
    if write {
        let key = HeaderValue::from_str(&ctx.idempotency_key())
            .map_err(|_| "the idempotency key is not a valid header value".to_string())?;
        headers.insert("idempotency-key", key);
    }
    Ok(headers)
}

/// How many times in all a request is sent when no answer comes.
const SENDS: u32 = 3;
/// The pause before sending again (doubled each time).
const RESEND_PAUSE: Duration = Duration::from_millis(500);

/// What to do about a try that got no answer: the decision, apart from the I/O.
#[derive(Debug, PartialEq, Eq)]
enum Unanswered {
    /// Send it again: it never left (no connection), or it changes nothing (GET, HEAD).
    SendAgain,
    /// Give up: tell the model what is known.
    GiveUp,
}

/// After try `sent` got no answer: a request is sent again only when that cannot do
/// anything twice — it never left, or it is a read. A write that may have been received is
/// not: a server that does not honour `Idempotency-Key` would do it again.
fn after_no_answer(sent: u32, never_left: bool, read_only: bool) -> Unanswered {
    if (never_left || read_only) && sent < SENDS {
        Unanswered::SendAgain
    } else {
        Unanswered::GiveUp
    }
}

/// Sends `request`; when no answer comes, sends it again as it is when that is safe
/// ([`after_no_answer`]), up to [`SENDS`] times. The answer's status, main headers and body.
async fn send(ctx: &ToolContext, request: reqwest::RequestBuilder) -> ToolOutput {
    match until_answered(ctx, request).await {
        Ok(response) => read_response(ctx, response).await,
        Err(unanswered) => unanswered,
    }
}

/// The response to `request`, sent again while that is safe; `Err` says what is known of a
/// request that got no answer.
async fn until_answered(
    ctx: &ToolContext,
    request: reqwest::RequestBuilder,
) -> Result<reqwest::Response, ToolOutput> {
    let keyed = request
        .try_clone()
        .and_then(|r| r.build().ok())
        .and_then(|r| {
            r.headers()
                .get("idempotency-key")
                .and_then(|v| v.to_str().ok().map(str::to_string))
        });
    let mut sent = 0;
    let mut next = Some(request);
    loop {
        let Some(request) = next.take() else {
            return Err(ToolOutput::error(
                "internal error: the request could not be sent again",
            ));
        };
        let again = request.try_clone();
        sent += 1;
        let e = match request.send().await {
            Ok(response) => return Ok(response),
            Err(e) => e,
        };
        let never_left = e.is_connect() || e.is_builder();
        // Only writes carry a key.
        let read_only = keyed.is_none();
        let next_step = after_no_answer(sent, never_left, read_only);
        if next_step == Unanswered::SendAgain && again.is_some() {
            tokio::time::sleep(RESEND_PAUSE.saturating_mul(1 << (sent - 1))).await;
            next = again;
            continue;
        }
        let text = match (&keyed, never_left) {
            (_, true) => format!("request failed (nothing was received): {e}"),
            (Some(key), false) => format!(
                "no answer ({e}); the request was sent with Idempotency-Key {key} and may or may \
                 not have been received, so it was not sent again. Check whether it took effect \
                 (a GET of what it would have changed) before sending it again: a new call \
                 carries a new key"
            ),
            (None, false) => format!("request failed after {sent} tries: {e}"),
        };
        return Err(ToolOutput::error(ctx.secrets().redact(&text)));
    }
}

/// What the model is told of `response`: its status line, the [`SHOWN_HEADERS`] and the
/// body (redacted, read up to `max_artifact_bytes`); a status of 400 or more is an error.
async fn read_response(ctx: &ToolContext, mut response: reqwest::Response) -> ToolOutput {
    let status = response.status();
    let mut head = format!(
        "HTTP {} {}\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    for name in SHOWN_HEADERS {
        for value in response.headers().get_all(name) {
            head.push_str(&format!(
                "{name}: {}\n",
                String::from_utf8_lossy(value.as_bytes())
            ));
        }
    }
    head.push('\n');
    let mut capture = Capture::new(ctx, "http_response");
    let limit = ctx.limits().max_artifact_bytes;
    let mut read: u64 = 0;
    let mut note = String::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                read += chunk.len() as u64;
                capture.push(&chunk);
                if read >= limit {
                    // What could be the start of a secret cut by this limit is dropped.
                    capture.cut_here();
                    note = format!("\n[body not read past {limit} bytes]");
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                capture.cut_here();
                note = format!("\n[reading the body failed after {read} bytes: {e}]");
                break;
            }
        }
    }
    let rendered = match tokio::task::spawn_blocking(move || capture.finish()).await {
        Ok(r) => r,
        Err(e) => return ToolOutput::error(format!("internal error reading the response: {e}")),
    };
    let body = if rendered.total == 0 {
        "(empty body)".to_string()
    } else {
        rendered.text
    };
    ToolOutput {
        content: ctx.secrets().redact(&format!("{head}{body}{note}")),
        is_error: status.as_u16() >= 400,
        artifact: rendered.artifact,
        unresolved: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_cannot_act_twice_is_sent_again() {
        // A write that may have been received is never sent again.
        assert_eq!(after_no_answer(1, false, false), Unanswered::GiveUp);
        // One that never left, or a read, is — up to SENDS tries in all.
        assert_eq!(after_no_answer(1, true, false), Unanswered::SendAgain);
        assert_eq!(after_no_answer(1, false, true), Unanswered::SendAgain);
        assert_eq!(
            after_no_answer(SENDS - 1, false, true),
            Unanswered::SendAgain
        );
        assert_eq!(after_no_answer(SENDS, true, true), Unanswered::GiveUp);
    }
}
