//! The REST client: one request at a time, as GitHub documents its answers — rate limits
//! waited out (within a bound), errors carrying GitHub's `message`, `Link` pagination
//! followed — and a token sent only to the configured API origin.
//!
//! A request whose answer did not come is told apart by what it may have done:
//! - a **read** (`GET`, `HEAD`) changes nothing, so it is asked again after a short backoff
//!   when GitHub cannot be reached or answers 5xx (at most [`READ_RETRIES`] times);
//! - a **write** that may have reached GitHub — the connection broke or timed out after it
//!   was sent, the answer's body was cut, or GitHub answered 5xx — ends in
//!   [`GithubError::Ambiguous`], never in a plain failure: GitHub may have done it. The
//!   caller finds out by looking ([`crate::once`]) before anything is sent again. A write
//!   that never left (no connection) is [`GithubError::Transport`]: nothing happened.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, USER_AGENT};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use url::Url;

use crate::limits::{next_link, rate_limit_wait};
use crate::once::Patience;
use crate::tokens::Secret;

/// GitHub's REST media type and the API version these requests are written for.
const MEDIA_TYPE: &str = "application/vnd.github+json";
const API_VERSION: &str = "2022-11-28";
/// The most a request waits for rate limits in all, by default.
const MAX_RATE_LIMIT_WAIT: Duration = Duration::from_secs(300);
/// The most times one request is asked again after rate limits.
const MAX_RATE_LIMIT_RETRIES: u32 = 10;
/// The most pages [`Api::get_all`] reads.
const MAX_PAGES: usize = 100;
/// The most times a read is asked again after no answer or a 5xx.
pub const READ_RETRIES: u32 = 3;
/// The first wait before a read is asked again (doubled each time).
const READ_BACKOFF: Duration = Duration::from_secs(1);

/// How a request authenticates.
#[derive(Debug, Clone, Copy)]
pub enum Auth<'a> {
    /// No credentials (public data on GitHub.com; rate-limited hard).
    None,
    /// `Authorization: Bearer …`: an App JWT, an installation token or a personal token.
    Bearer(&'a Secret),
}

/// What a request to GitHub ended in, when not in its answer.
#[derive(Debug, thiserror::Error)]
pub enum GithubError {
    /// GitHub answered with an error status; `message` is GitHub's own.
    #[error("GitHub answered {status} to {method} {path}: {message}")]
    Status {
        status: u16,
        method: Method,
        path: String,
        message: String,
        documentation_url: Option<String>,
    },
    /// Still rate-limited after waiting as long as allowed.
    #[error(
        "GitHub still rate-limits {method} {path} after {waited_secs} s of waiting; try again \
         later"
    )]
    RateLimited {
        method: Method,
        path: String,
        waited_secs: u64,
    },
    /// No answer (connection refused, timeout, TLS) to a read, or a write that never left:
    /// nothing was done.
    #[error("cannot reach GitHub at {origin}: {reason}")]
    Transport { origin: String, reason: String },
    /// A write that may have reached GitHub got no usable answer (a timeout or a broken
    /// connection after it was sent, a cut body, a 5xx): it may have been done. Look before
    /// sending it again.
    #[error(
        "GitHub may or may not have done {method} {path}: {reason}; what it did must be \
         looked up before the request is sent again"
    )]
    Ambiguous {
        method: Method,
        path: String,
        reason: String,
    },
    /// An answer that is not the JSON expected.
    #[error("GitHub's answer to {method} {path} is not what was expected: {reason}")]
    Decode {
        method: Method,
        path: String,
        reason: String,
    },
    /// No configured credential reaches the repository.
    #[error(
        "no credential for {repo}: {}; install the App on the repository, or set \
         github.token_env to a token that can read it",
        if apps.is_empty() { "no GitHub App is configured".to_string() }
        else { format!("the GitHub App(s) {} are not installed on it", apps.join(", ")) }
    )]
    NoCredential { repo: String, apps: Vec<String> },
    /// A URL (a pagination link) outside the configured API: the token is not sent there.
    #[error("{url} is not under the GitHub API at {base}; it is not requested with the token")]
    Foreign { url: String, base: String },
}

impl GithubError {
    /// Whether a write may have been done although no answer said so.
    pub fn is_ambiguous(&self) -> bool {
        matches!(self, GithubError::Ambiguous { .. })
    }
}

/// Whether a request of `method` may change something at GitHub.
fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD)
}

/// One page of a list.
#[derive(Debug, Clone)]
pub struct Page {
    pub items: Vec<Value>,
    /// The next page's URL (already checked to be under the API).
    pub next: Option<Url>,
}

/// The REST client of one GitHub API (GitHub.com, or an Enterprise Server's `/api/v3`).
#[derive(Debug, Clone)]
pub struct Api {
    http: reqwest::Client,
    base: Url,
    max_wait: Duration,
    read_backoff: Duration,
    patience: Patience,
}

impl Api {
    /// A client of the API at `base_url` (`https://api.github.com`, or
    /// `https://ghe.example.com/api/v3`), sending with `http`.
    pub fn new(http: reqwest::Client, base_url: &str) -> Result<Api, String> {
        let base = check_base_url(base_url)?;
        Ok(Api {
            http,
            base,
            max_wait: MAX_RATE_LIMIT_WAIT,
            read_backoff: READ_BACKOFF,
            patience: Patience::default(),
        })
    }

    /// The first wait before a read is asked again (default 1 s, doubled each time).
    pub fn with_read_backoff(mut self, backoff: Duration) -> Api {
        self.read_backoff = backoff;
        self
    }

    /// The most one request may wait for rate limits in all.
    pub fn with_max_wait(mut self, max_wait: Duration) -> Api {
        self.max_wait = max_wait;
        self
    }

    /// How a write whose answer was lost is looked up ([`crate::once`]).
    pub fn with_patience(mut self, patience: Patience) -> Api {
        self.patience = patience;
        self
    }

    /// How a write whose answer was lost is looked up.
    pub fn patience(&self) -> &Patience {
        &self.patience
    }

    /// The API's base URL (always ending in `/`).
    pub fn base(&self) -> &Url {
        &self.base
    }

    /// `path` (`/repos/o/r/pulls/1`) under the base URL.
    pub fn url(&self, path: &str) -> Url {
        self.base
            .join(path.trim_start_matches('/'))
            .unwrap_or_else(|_| self.base.clone())
    }

    /// Whether `url` is under the API (same origin, under its path): where a token may go.
    pub fn is_own(&self, url: &Url) -> bool {
        url.origin() == self.base.origin() && url.path().starts_with(self.base.path())
    }

    /// `method path` with `body`: the answer's JSON (`null` for an empty body).
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        auth: Auth<'_>,
        body: Option<&Value>,
    ) -> Result<Value, GithubError> {
        let (_, _, json) = self.send(method, self.url(path), auth, body).await?;
        Ok(json)
    }

    /// One page of a list at `url` (a path's URL, or a `next` link).
    pub async fn page(&self, url: Url, auth: Auth<'_>) -> Result<Page, GithubError> {
        let (_, headers, json) = self.send(Method::GET, url.clone(), auth, None).await?;
        let items = match json {
            Value::Array(items) => items,
            // Search and check-run lists: `{"total_count": n, "<things>": [...]}`.
            Value::Object(mut fields) if fields.contains_key("total_count") => {
                let key = fields
                    .iter()
                    .find(|(_, v)| v.is_array())
                    .map(|(k, _)| k.clone());
                match key.and_then(|k| fields.remove(&k)) {
                    Some(Value::Array(items)) => items,
                    _ => Vec::new(),
                }
            }
            other => {
                return Err(GithubError::Decode {
                    method: Method::GET,
                    path: url.path().to_string(),
                    reason: format!("a list was expected, not {}", kind(&other)),
                });
            }
        };
        let next = match next_link(&headers) {
            None => None,
            Some(link) => {
                let next = Url::parse(&link).map_err(|e| GithubError::Decode {
                    method: Method::GET,
                    path: url.path().to_string(),
                    reason: format!("its Link header's next URL {link:?} is not a URL: {e}"),
                })?;
                if !self.is_own(&next) {
                    return Err(GithubError::Foreign {
                        url: link,
                        base: self.base.to_string(),
                    });
                }
                Some(next)
            }
        };
        Ok(Page { items, next })
    }

    /// Every item of the list at `path`, following `Link: rel="next"` (at most 100 pages).
    pub async fn get_all(&self, path: &str, auth: Auth<'_>) -> Result<Vec<Value>, GithubError> {
        let mut items = Vec::new();
        let mut next = Some(self.url(path));
        let mut pages = 0;
        while let Some(url) = next.take() {
            let page = self.page(url, auth).await?;
            items.extend(page.items);
            pages += 1;
            if pages < MAX_PAGES {
                next = page.next;
            }
        }
        Ok(items)
    }

    /// `GET path` as text in the media type `accept` (`application/vnd.github.diff` for a
    /// pull request's diff, `application/vnd.github.raw+json` for a file's contents).
    pub async fn raw(
        &self,
        path: &str,
        accept: &str,
        auth: Auth<'_>,
    ) -> Result<String, GithubError> {
        let (_, _, text) = self
            .send_text(Method::GET, self.url(path), auth, None, accept)
            .await?;
        Ok(text)
    }

    /// Sends one request, waiting out rate limits; an error status is an error carrying
    /// GitHub's message.
    pub async fn send(
        &self,
        method: Method,
        url: Url,
        auth: Auth<'_>,
        body: Option<&Value>,
    ) -> Result<(StatusCode, HeaderMap, Value), GithubError> {
        let path = url.path().to_string();
        let (status, headers, text) = self
            .send_text(method.clone(), url, auth, body, MEDIA_TYPE)
            .await?;
        let json = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).map_err(|e| GithubError::Decode {
                method,
                path,
                reason: e.to_string(),
            })?
        };
        Ok((status, headers, json))
    }

    /// [`Self::send`] with the answer as text in the media type `accept`.
    async fn send_text(
        &self,
        method: Method,
        url: Url,
        auth: Auth<'_>,
        body: Option<&Value>,
        accept: &str,
    ) -> Result<(StatusCode, HeaderMap, String), GithubError> {
        if !self.is_own(&url) {
            return Err(GithubError::Foreign {
                url: url.to_string(),
                base: self.base.to_string(),
            });
        }
        let path = url.path().to_string();
        let mut waited = Duration::ZERO;
        let mut retries = 0;
        let mut read_retries = 0;
        loop {
            let mut req = self
                .http
                .request(method.clone(), url.clone())
                .header(ACCEPT, accept)
                .header("X-GitHub-Api-Version", API_VERSION)
                .header(USER_AGENT, "nightshift");
            if let Auth::Bearer(secret) = auth {
                req = req.header(AUTHORIZATION, format!("Bearer {}", secret.expose()));
            }
            if let Some(body) = body {
                req = req.json(body);
            }
            let answer = match req.send().await {
                Ok(resp) => {
                    let status = resp.status();
                    let headers = resp.headers().clone();
                    resp.text()
                        .await
                        .map(|text| (status, headers, text))
                        .map_err(|e| self.unanswered(&method, &path, &e, true))
                }
                Err(e) => Err(self.unanswered(&method, &path, &e, false)),
            };
            let (status, headers, text) = match answer {
                Ok(answer) => answer,
                Err(e @ GithubError::Transport { .. })
                    if !is_write(&method) && read_retries < READ_RETRIES =>
                {
                    read_retries += 1;
                    self.wait_to_read_again(&method, &path, read_retries, e.to_string())
                        .await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if !status.is_success() {
                if let Some(wait) = rate_limit_wait(status, &headers, &text, epoch_secs()) {
                    retries += 1;
                    if waited + wait.0 > self.max_wait || retries > MAX_RATE_LIMIT_RETRIES {
                        return Err(GithubError::RateLimited {
                            method,
                            path,
                            waited_secs: waited.as_secs(),
                        });
                    }
                    tracing::info!(%method, %path, wait_s = wait.0.as_secs(),
                        "GitHub rate-limited the request; waiting as it asks");
                    tokio::time::sleep(wait.0).await;
                    waited += wait.0;
                    continue;
                }
                let json: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                let message = json["message"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| first_chars(&text));
                // GitHub failed on its side: a read may be asked again; a write may have been done.
                if status.is_server_error() {
                    if is_write(&method) {
                        return Err(GithubError::Ambiguous {
                            method,
                            path,
                            reason: format!("GitHub answered {status}: {message}"),
                        });
                    }
                    if read_retries < READ_RETRIES {
                        read_retries += 1;
                        let e = format!("GitHub answered {status}: {message}");
                        self.wait_to_read_again(&method, &path, read_retries, e)
                            .await;
                        continue;
                    }
                }
                return Err(GithubError::Status {
                    status: status.as_u16(),
                    method,
                    path,
                    message,
                    documentation_url: json["documentation_url"].as_str().map(str::to_string),
                });
            }
            return Ok((status, headers, text));
        }
    }

    /// What a try that got no usable answer means: a write that may have left (it was sent,
    /// or its answer began) is ambiguous; anything else did nothing.
    fn unanswered(
        &self,
        method: &Method,
        path: &str,
        e: &reqwest::Error,
        answered: bool,
    ) -> GithubError {
        let reason = without_url(e);
        let never_left = !answered && (e.is_connect() || e.is_builder());
        if is_write(method) && !never_left {
            GithubError::Ambiguous {
                method: method.clone(),
                path: path.to_string(),
                reason,
            }
        } else {
            GithubError::Transport {
                origin: self.base.origin().ascii_serialization(),
                reason,
            }
        }
    }

    /// Waits before read `retry` (1-based) is asked again, logging why.
    async fn wait_to_read_again(&self, method: &Method, path: &str, retry: u32, why: String) {
        let wait = self.read_backoff.saturating_mul(1 << (retry - 1).min(8));
        tracing::info!(%method, %path, retry, wait_ms = wait.as_millis() as u64, error = %why,
            "a read from GitHub got no answer; asking again");
        tokio::time::sleep(wait).await;
    }
}

/// `base_url` as the API's base (ending in `/`), or why it cannot be one (the message starts
/// `base_url`, for the config key it comes from).
pub fn check_base_url(base_url: &str) -> Result<Url, String> {
    let mut base = Url::parse(base_url).map_err(|e| {
        format!("base_url {base_url:?} is not a URL ({e}); write it like https://api.github.com")
    })?;
    if !matches!(base.scheme(), "https" | "http") || base.host().is_none() {
        return Err(format!(
            "base_url {base_url:?} is not an http(s) URL with a host; write it like \
             https://api.github.com"
        ));
    }
    if !base.path().ends_with('/') {
        let path = format!("{}/", base.path());
        base.set_path(&path);
    }
    Ok(base)
}

fn epoch_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A transport error's text without the URL (which may carry a query worth keeping out).
fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(url) = e.url() {
        text = text.replace(url.as_str(), "…");
    }
    text
}

fn first_chars(text: &str) -> String {
    let t: String = text.chars().take(200).collect();
    if t.is_empty() {
        "(no message)".into()
    } else {
        t
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http() -> reqwest::Client {
        nightshift_llm::http::build_client(nightshift_llm::HttpTimeouts::default()).unwrap()
    }

    fn api(base: &str) -> Api {
        Api::new(http(), base).unwrap()
    }

    #[test]
    fn paths_join_the_base_and_only_its_urls_are_its_own() {
        let ghes = api("https://ghe.example.com/api/v3");
        let url = ghes.url("/repos/o/r/pulls/1");
        assert_eq!(
            url.as_str(),
            "https://ghe.example.com/api/v3/repos/o/r/pulls/1"
        );
        assert!(ghes.is_own(&url));
        for other in [
            "https://ghe.example.com/other/repos",
            "http://ghe.example.com/api/v3/repos",
            "https://ghe.example.com:8443/api/v3/repos",
            "https://evil.example.com/api/v3/repos",
        ] {
            assert!(!ghes.is_own(&Url::parse(other).unwrap()), "{other}");
        }
        let dotcom = api(crate::GITHUB_API);
        assert_eq!(dotcom.url("user").as_str(), "https://api.github.com/user");
        for bad in ["api.github.com", "ftp://x/y", "not a url"] {
            assert!(Api::new(http(), bad).is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_write_that_never_left_is_not_ambiguous_and_one_cut_off_is() {
        // Nothing listens on port 1: the request never left.
        let closed = api("http://127.0.0.1:1").with_read_backoff(Duration::from_millis(1));
        let body = serde_json::json!({"body": "hi"});
        let e = closed
            .request(Method::POST, "/x", Auth::None, Some(&body))
            .await
            .unwrap_err();
        assert!(matches!(e, GithubError::Transport { .. }), "{e}");
        let e = closed
            .request(Method::GET, "/x", Auth::None, None)
            .await
            .unwrap_err();
        assert!(matches!(e, GithubError::Transport { .. }), "{e}");

        // A server that reads the request and closes the connection without answering.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            loop {
                let (mut conn, _) = listener.accept().await.unwrap();
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                drop(conn);
            }
        });
        let cut = api(&base).with_read_backoff(Duration::from_millis(1));
        let e = cut
            .request(Method::POST, "/x", Auth::None, Some(&body))
            .await
            .unwrap_err();
        assert!(e.is_ambiguous(), "a write that was sent: {e}");
        assert!(e.to_string().contains("must be looked up"), "{e}");
        let e = cut
            .request(Method::GET, "/x", Auth::None, None)
            .await
            .unwrap_err();
        assert!(matches!(e, GithubError::Transport { .. }), "a read: {e}");
    }
}
