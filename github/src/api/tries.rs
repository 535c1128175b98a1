//! The tries of one request: sent until GitHub answers it, within bounds.
//!
//! Guarantees: a read with no answer, or a 5xx, is asked again after a doubling backoff, at
//! most [`READ_RETRIES`] times; a rate limit (403/429 that says so) is waited out as GitHub
//! asks while the waits add up to at most the client's `max_wait` and
//! [`MAX_RATE_LIMIT_RETRIES`] retries; a write is never sent twice — one that may have
//! reached GitHub and got no usable answer ends in [`GithubError::Ambiguous`], one that
//! never left in [`GithubError::Transport`]; and a URL outside the API is refused before
//! anything is sent, so the token goes nowhere else.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, USER_AGENT};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use url::Url;

use super::{API_VERSION, Api, Auth, GithubError, MAX_RATE_LIMIT_RETRIES, READ_RETRIES};
use crate::limits::rate_limit_wait;

/// Whether a request of `method` may change something at GitHub.
fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD)
}

impl Api {
    /// [`Self::send`] with the answer as text in the media type `accept`. Each try
    /// ([`Self::try_once`]) that gets no answer, for a read, is asked again (at most
    /// [`READ_RETRIES`] times); an error status goes to [`Self::after_refusal`], which says to
    /// wait out a rate limit, to read again, or to end.
    pub(super) async fn send_text(
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
        let mut tries = Tries::default();
        loop {
            let answer = self
                .try_once(&method, &url, auth, body, accept, &path)
                .await;
            let (status, headers, text) = match answer {
                Ok(answer) => answer,
                Err(e @ GithubError::Transport { .. })
                    if !is_write(&method) && tries.reads < READ_RETRIES =>
                {
                    tries.reads += 1;
                    self.wait_to_read_again(&method, &path, tries.reads, e.to_string())
                        .await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if status.is_success() {
                return Ok((status, headers, text));
            }
            match self.after_refusal(&method, &path, status, &headers, &text, &tries)? {
                Again::RateLimited(wait) => {
                    tries.rate_limits += 1;
                    tracing::info!(%method, %path, wait_s = wait.as_secs(),
                        "GitHub rate-limited the request; waiting as it asks");
                    tokio::time::sleep(wait).await;
                    tries.waited += wait;
                }
                Again::Read(why) => {
                    tries.reads += 1;
                    self.wait_to_read_again(&method, &path, tries.reads, why)
                        .await;
                }
            }
        }
    }

    /// One try of a request: sent with GitHub's headers (and the token, if any) and its answer
    /// read whole. A try that got no usable answer is [`Self::unanswered`].
    async fn try_once(
        &self,
        method: &Method,
        url: &Url,
        auth: Auth<'_>,
        body: Option<&Value>,
        accept: &str,
        path: &str,
    ) -> Result<(StatusCode, HeaderMap, String), GithubError> {
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
        match req.send().await {
            Ok(resp) => {
                let status = resp.status();
                let headers = resp.headers().clone();
                resp.text()
                    .await
                    .map(|text| (status, headers, text))
                    .map_err(|e| self.unanswered(method, path, &e, true))
            }
            Err(e) => Err(self.unanswered(method, path, &e, false)),
        }
    }

    /// What an error status means, after `tries`: a rate limit is waited out while the wait
    /// and the retries stay within their bounds; a 5xx to a read is read again (at most
    /// [`READ_RETRIES`] times) and to a write is [`GithubError::Ambiguous`] (GitHub may have
    /// done it); anything else is the error carrying GitHub's message.
    fn after_refusal(
        &self,
        method: &Method,
        path: &str,
        status: StatusCode,
        headers: &HeaderMap,
        text: &str,
        tries: &Tries,
    ) -> Result<Again, GithubError> {
        if let Some(wait) = rate_limit_wait(status, headers, text, epoch_secs()) {
            if tries.waited + wait.0 > self.max_wait
                || tries.rate_limits + 1 > MAX_RATE_LIMIT_RETRIES
            {
                return Err(GithubError::RateLimited {
                    method: method.clone(),
                    path: path.to_string(),
                    waited_secs: tries.waited.as_secs(),
                });
            }
            return Ok(Again::RateLimited(wait.0));
        }
        let json: Value = serde_json::from_str(text).unwrap_or(Value::Null);
        let message = json["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| first_chars(text));
        // GitHub failed on its side: a read may be asked again; a write may have been done.
        if status.is_server_error() {
            if is_write(method) {
                return Err(GithubError::Ambiguous {
                    method: method.clone(),
                    path: path.to_string(),
                    reason: format!("GitHub answered {status}: {message}"),
                });
            }
            if tries.reads < READ_RETRIES {
                return Ok(Again::Read(format!("GitHub answered {status}: {message}")));
            }
        }
        Err(GithubError::Status {
            status: status.as_u16(),
            method: method.clone(),
            path: path.to_string(),
            message,
            documentation_url: json["documentation_url"].as_str().map(str::to_string),
        })
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

/// What one request has been through so far.
#[derive(Debug, Default)]
struct Tries {
    /// Times a read was asked again after no answer or a 5xx.
    reads: u32,
    /// Times the request was sent again after a rate limit.
    rate_limits: u32,
    /// How long rate limits have been waited out in all.
    waited: Duration,
}

/// Why a request is sent again.
#[derive(Debug)]
enum Again {
    /// GitHub rate-limited it: wait this long first.
    RateLimited(Duration),
    /// A read GitHub failed on its side (its message): read again after a backoff.
    Read(String),
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

#[cfg(test)]
mod tests {
    use super::super::tests::api;
    use super::*;

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
