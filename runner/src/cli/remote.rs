//! The HTTP client of remote mode (`--server URL`): the daemon's API, with the token from
//! `NIGHTSHIFT_API_TOKEN`. What it guarantees:
//! - The token is sent only as the bearer header and never printed.
//! - An API refusal is shown as it came (`{"error": "…"}`) with its status; a 401 says to
//!   set NIGHTSHIFT_API_TOKEN; a server that cannot be reached is named, with a hint to check
//!   `--server` / NIGHTSHIFT_SERVER.

use anyhow::Context;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The environment variable the API token is read from.
pub(crate) const TOKEN_ENV: &str = "NIGHTSHIFT_API_TOKEN";

/// A client of one daemon's API.
pub(crate) struct ApiClient {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient")
            .field("base", &self.base)
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

impl ApiClient {
    /// A client of the API at `base` (`http://host:port`), authenticating with `token`.
    pub(crate) fn new(base: &str, token: Option<String>) -> anyhow::Result<ApiClient> {
        let base = base.trim().trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            anyhow::bail!(
                "--server '{base}' is not an http:// or https:// URL (e.g. http://127.0.0.1:8080)"
            );
        }
        let http = nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default())
            .map_err(anyhow::Error::msg)?;
        let token = token.filter(|t| !t.trim().is_empty());
        Ok(ApiClient { base, token, http })
    }

    /// `GET path?query` as `T`.
    pub(crate) async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> anyhow::Result<T> {
        self.call(Method::GET, path, query, None).await
    }

    /// `POST path` with a JSON body, as `T`.
    pub(crate) async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Value,
    ) -> anyhow::Result<T> {
        self.call(Method::POST, path, &[], Some(body)).await
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<Value>,
    ) -> anyhow::Result<T> {
        let url = format!("{}{path}{}", self.base, query_string(query));
        let mut req = self.http.request(method, &url);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        if let Some(body) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        let resp = req.send().await.map_err(|e| {
            anyhow::anyhow!(
                "cannot reach the Nightshift server at {}: {}; check --server (or \
                 NIGHTSHIFT_SERVER) and that `nightshift serve` is running there",
                self.base,
                if e.is_connect() {
                    "connection refused or no route".to_string()
                } else {
                    e.to_string()
                }
            )
        })?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .with_context(|| format!("reading the answer of {url}"))?;
        if !status.is_success() {
            anyhow::bail!(refusal(status, &bytes));
        }
        serde_json::from_slice(&bytes).with_context(|| {
            format!(
                "the server at {} answered {path} with something this CLI does not read \
                 (is it a Nightshift daemon of the same version?)",
                self.base
            )
        })
    }
}

/// `?a=1&b=x%20y` for the pairs (empty for none), every byte but the unreserved ones
/// percent-encoded.
fn query_string(pairs: &[(&str, String)]) -> String {
    let encode = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    let joined: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect();
    if joined.is_empty() {
        String::new()
    } else {
        format!("?{}", joined.join("&"))
    }
}

/// What a refused request says: the API's own `error` with the status, and for a 401 how
/// to give the token.
fn refusal(status: StatusCode, body: &[u8]) -> String {
    let message = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    if status == StatusCode::UNAUTHORIZED {
        format!(
            "the server refused the API token ({status}: {message}); set {TOKEN_ENV} to the \
             daemon's token (its [server] token_env, or <data_dir>/api-token)"
        )
    } else {
        format!("the server answered {status}: {message}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_keep_the_api_message_and_status() {
        let said = refusal(StatusCode::NOT_FOUND, br#"{"error": "run x not found"}"#);
        assert_eq!(said, "the server answered 404 Not Found: run x not found");
        let said = refusal(StatusCode::UNAUTHORIZED, br#"{"error": "bad token"}"#);
        assert!(said.contains("set NIGHTSHIFT_API_TOKEN"), "{said}");
        assert!(said.contains("bad token"), "{said}");
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(query_string(&[]), "");
        let q = query_string(&[("key", "a b&c=d/é".to_string()), ("limit", "5".to_string())]);
        assert_eq!(q, "?key=a%20b%26c%3Dd%2F%C3%A9&limit=5");
    }

    #[test]
    fn a_server_that_is_not_a_url_is_refused() {
        let err = ApiClient::new("localhost:8080", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not an http:// or https:// URL"), "{err}");
    }
}
