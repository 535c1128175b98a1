//! http_request against a real loopback HTTP server (axum on 127.0.0.1:0): allowlist
//! refusal, the Idempotency-Key header, secret injection, and redaction of secrets echoed
//! back (in the output and in the artifact of a cut response).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use nightshift_tools::{
    HttpAllowlist, HttpRequest, Registry, SecretResolver, ToolClass, ToolContext,
};
use serde_json::{Value, json};

use crate::common::{Fixture, call, small_cap};

const SECRET: &str = "s3cr3t-t0ken-value";

#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub method: String,
    pub path: String,
    pub headers: HeaderMap,
    pub body: String,
}

#[derive(Clone, Default)]
pub(crate) struct Seen(Arc<Mutex<Vec<Received>>>);

impl Seen {
    pub(crate) fn all(&self) -> Vec<Received> {
        self.0.lock().unwrap().clone()
    }
}

async fn handle(
    State(seen): State<Seen>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = String::from_utf8_lossy(&body).into_owned();
    let auth = headers
        .get("authorization")
        .map(|v| v.to_str().unwrap_or("").to_string())
        .unwrap_or_default();
    seen.0.lock().unwrap().push(Received {
        method: method.to_string(),
        path: uri.path().to_string(),
        headers: headers.clone(),
        body: body.clone(),
    });
    match uri.path() {
        "/echo" => format!("auth={auth}\nbody={body}\n").into_response(),
        "/big" => format!("{}\n{auth}\n{}\n", "x".repeat(3000), "y".repeat(3000)).into_response(),
        "/fail" => (StatusCode::INTERNAL_SERVER_ERROR, "broken").into_response(),
        // `/goto?<url>`: a redirect to `<url>`.
        "/goto" => (
            StatusCode::FOUND,
            [("location", uri.query().unwrap_or("/").to_string())],
        )
            .into_response(),
        "/redirect" => {
            (StatusCode::FOUND, [("location", "http://example.invalid/")]).into_response()
        }
        _ => "hello".into_response(),
    }
}

pub(crate) async fn server() -> (SocketAddr, Seen) {
    server_on("127.0.0.1").await
}

/// A recording server on `ip` (any loopback address), port chosen by the kernel.
pub(crate) async fn server_on(ip: &str) -> (SocketAddr, Seen) {
    let seen = Seen::default();
    let app = Router::new().fallback(handle).with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind((ip, 0))
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    (addr, seen)
}

fn ctx(fx: &Fixture, allow: &[&str]) -> ToolContext {
    fx.ctx()
        .with_http_allowlist(HttpAllowlist::new(allow.iter().copied()))
        .with_secrets(SecretResolver::from_map([("API_TOKEN", SECRET)]))
}

#[tokio::test]
async fn get_is_read_only_and_carries_no_idempotency_key() {
    let (addr, seen) = server().await;
    let fx = Fixture::new();
    let ctx = ctx(&fx, &[&addr.to_string()]);
    let tool = HttpRequest::new();
    let input = json!({"method": "GET", "url": format!("http://{addr}/hello")});
    assert_eq!(
        nightshift_tools::Tool::class_for(&tool, &input),
        ToolClass::ReadOnly
    );
    let out = call(&tool, &ctx, input).await;
    assert!(!out.is_error, "{}", out.content);
    assert!(out.content.starts_with("HTTP 200 OK\n"), "{}", out.content);
    assert!(out.content.ends_with("\n\nhello"), "{}", out.content);
    let got = seen.all();
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].method.as_str(), got[0].path.as_str()),
        ("GET", "/hello")
    );
    assert!(got[0].headers.get("idempotency-key").is_none());
}

#[tokio::test]
async fn post_fills_secrets_sends_the_idempotency_key_and_redacts_the_echo() {
    let (addr, seen) = server().await;
    let fx = Fixture::new();
    let ctx = ctx(&fx, &[&addr.to_string()]);
    let registry = Registry::build(&nightshift_tools::RegistryConfig {
        tools: vec!["http_request".into()],
        ..Default::default()
    })
    .unwrap();
    let input = json!({
        "method": "post",
        "url": format!("http://{addr}/echo"),
        "headers": {"Authorization": "Bearer {{secret:API_TOKEN}}"},
        "body": "token={{secret:API_TOKEN}}"
    });
    assert_eq!(
        registry.class_for("http_request", &input),
        Some(ToolClass::SideEffect)
    );
    let out = registry.call(&ctx, "http_request", input.clone()).await;
    assert!(!out.is_error, "{}", out.content);
    assert!(
        !out.content.contains(SECRET),
        "secret leaked: {}",
        out.content
    );
    assert!(
        out.content
            .contains("auth=Bearer [REDACTED:API_TOKEN]\nbody=token=[REDACTED:API_TOKEN]"),
        "{}",
        out.content
    );

    // A retry of the same call (same run and call id) sends the same key.
    let retry = registry.call(&ctx, "http_request", input).await;
    assert!(!retry.is_error);
    let got = seen.all();
    assert_eq!(got.len(), 2);
    for request in &got {
        assert_eq!(request.method, "POST");
        assert_eq!(
            request.headers["authorization"],
            format!("Bearer {SECRET}").as_str()
        );
        assert_eq!(request.body, format!("token={SECRET}"));
        assert_eq!(request.headers["idempotency-key"], "run-1:call-7");
    }
}

#[tokio::test]
async fn hosts_off_the_allowlist_are_never_contacted() {
    let (addr, seen) = server().await;
    let fx = Fixture::new();
    let wrong_port = format!("127.0.0.1:{}", addr.port().wrapping_add(1).max(1));
    // A port-less entry means the scheme's default port (80 here), not every port.
    for allow in [
        vec![],
        vec!["example.com"],
        vec![wrong_port.as_str()],
        vec!["127.0.0.1"],
    ] {
        let ctx = ctx(&fx, &allow);
        let out = call(
            &HttpRequest::new(),
            &ctx,
            json!({"method": "GET", "url": format!("http://{addr}/hello")}),
        )
        .await;
        assert!(out.is_error, "{allow:?}: {}", out.content);
        assert!(
            out.content.contains("not on this agent's HTTP allowlist"),
            "{}",
            out.content
        );
    }
    assert!(
        seen.all().is_empty(),
        "a refused request reached the server"
    );

    // Positive control: the exact host:port entry is allowed.
    let ctx = ctx(&fx, &[&format!("127.0.0.1:{}", addr.port())]);
    let ok = call(
        &HttpRequest::new(),
        &ctx,
        json!({"method": "GET", "url": format!("http://{addr}/")}),
    )
    .await;
    assert!(!ok.is_error, "{}", ok.content);
    assert_eq!(seen.all().len(), 1);
}

#[tokio::test]
async fn bad_secrets_and_bad_input_send_nothing() {
    let (addr, seen) = server().await;
    let fx = Fixture::new();
    let ctx = ctx(&fx, &[&addr.to_string()]);
    let url = format!("http://{addr}/echo");
    let cases: [(Value, &str); 5] = [
        (
            json!({"method": "POST", "url": url, "body": "{{secret:NOPE}}"}),
            "unknown secret `NOPE`; available secrets: API_TOKEN",
        ),
        (
            json!({"method": "GET", "url": format!("{url}?k={{{{secret:API_TOKEN}}}}")}),
            "never in part of a URL",
        ),
        (
            json!({"method": "GET", "url": "{{secret:API_TOKEN}}"}),
            "can be a URL only when it is bound to hosts",
        ),
        (json!({"method": "BREW", "url": url}), "unsupported method"),
        (
            json!({"method": "GET", "url": "ftp://127.0.0.1/x"}),
            "only http and https",
        ),
    ];
    for (input, expected) in cases {
        let out = call(&HttpRequest::new(), &ctx, input.clone()).await;
        assert!(out.is_error, "{input}: {}", out.content);
        assert!(out.content.contains(expected), "{input}: {}", out.content);
    }
    assert!(seen.all().is_empty());
}

#[tokio::test]
async fn error_statuses_and_redirects_are_reported_not_followed() {
    let (addr, seen) = server().await;
    let fx = Fixture::new();
    let ctx = ctx(&fx, &[&addr.to_string()]);
    let fail = call(
        &HttpRequest::new(),
        &ctx,
        json!({"method": "DELETE", "url": format!("http://{addr}/fail")}),
    )
    .await;
    assert!(fail.is_error);
    assert!(
        fail.content.starts_with("HTTP 500 Internal Server Error\n"),
        "{}",
        fail.content
    );
    assert!(fail.content.ends_with("broken"), "{}", fail.content);

    let redirect = call(
        &HttpRequest::new(),
        &ctx,
        json!({"method": "GET", "url": format!("http://{addr}/redirect")}),
    )
    .await;
    assert!(!redirect.is_error, "{}", redirect.content);
    assert!(
        redirect.content.starts_with("HTTP 302 Found\n"),
        "{}",
        redirect.content
    );
    assert!(
        redirect
            .content
            .contains("location: http://example.invalid/"),
        "{}",
        redirect.content
    );
    assert_eq!(seen.all().len(), 2, "the redirect was not followed");
}

#[tokio::test]
async fn a_cut_response_is_redacted_in_the_artifact_too() {
    let (addr, _seen) = server().await;
    let fx = Fixture::new();
    let ctx = ctx(&fx, &[&addr.to_string()]).with_limits(small_cap(400));
    let out = call(
        &HttpRequest::new(),
        &ctx,
        json!({"method": "GET", "url": format!("http://{addr}/big"), "headers": {"Authorization": "{{secret:API_TOKEN}}"}}),
    )
    .await;
    assert!(!out.is_error, "{}", out.content);
    assert!(
        out.content
            .contains("bytes (2 lines) cut; full output saved as artifact"),
        "{}",
        out.content
    );
    let artifact = out.artifact.expect("artifact");
    let saved = std::fs::read_to_string(&artifact.path).unwrap();
    assert!(!saved.contains(SECRET), "secret in artifact");
    assert_eq!(
        saved,
        format!(
            "{}\n[REDACTED:API_TOKEN]\n{}\n",
            "x".repeat(3000),
            "y".repeat(3000)
        )
    );
}
