//! Calling a daemon's HTTP API from tests: a `GET` or a JSON `POST` with the API token, and
//! the status with the JSON answer, in one call.
//!
//! [`get_json`] and [`post_json`] panic naming the method and URL when the request fails in
//! transport or the answer is not JSON (with its status and text); the status is returned, not
//! checked, so each test still asserts the one it expects. [`try_get_json`] is for polling
//! inside [`crate::eventually`]: a failed request or a non-JSON answer is `None`, to try again.
//!
//! Requests that need the answer's raw text or headers, send a body that is not JSON, or do
//! not read the answer use `reqwest` directly.

use reqwest::{Client, RequestBuilder, StatusCode};
use serde_json::Value;

/// `GET url` with `token` as the bearer token: the status and the JSON answer.
pub async fn get_json(client: &Client, url: &str, token: &str) -> (StatusCode, Value) {
    send_json("GET", url, client.get(url).bearer_auth(token)).await
}

/// `POST url` with `body` as JSON and `token` as the bearer token: the status and the JSON
/// answer.
pub async fn post_json(
    client: &Client,
    url: &str,
    token: &str,
    body: &Value,
) -> (StatusCode, Value) {
    send_json("POST", url, client.post(url).bearer_auth(token).json(body)).await
}

/// `GET url` with `token` as the bearer token: the JSON answer, whatever its status, or `None`
/// when the request fails or the answer is not JSON (to poll until a daemon answers).
pub async fn try_get_json(client: &Client, url: &str, token: &str) -> Option<Value> {
    client
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()
}

async fn send_json(method: &str, url: &str, request: RequestBuilder) -> (StatusCode, Value) {
    let resp = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = resp.status();
    let bytes = resp
        .bytes()
        .await
        .unwrap_or_else(|e| panic!("{method} {url}: reading the {status} answer: {e}"));
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{method} {url}: the {status} answer is not JSON ({e}): {}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (status, body)
}
