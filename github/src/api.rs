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

mod error;
mod tries;

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use url::Url;

use crate::limits::next_link;
use crate::once::Patience;
use crate::tokens::Secret;

pub use error::GithubError;

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
    pub fn new(http: reqwest::Client, base_url: &str) -> Result<Api, BaseUrlError> {
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
}

/// A `base_url` that cannot be the API's base. The message starts `base_url`, for the config
/// key it comes from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BaseUrlError {
    /// It does not parse as a URL.
    #[error("base_url {base_url:?} is not a URL ({error}); write it like https://api.github.com")]
    NotAUrl {
        base_url: String,
        error: url::ParseError,
    },
    /// It is a URL, but not an http(s) one with a host.
    #[error(
        "base_url {base_url:?} is not an http(s) URL with a host; write it like \
         https://api.github.com"
    )]
    NotHttp { base_url: String },
}

/// `base_url` as the API's base (ending in `/`), or why it cannot be one.
pub fn check_base_url(base_url: &str) -> Result<Url, BaseUrlError> {
    let mut base = Url::parse(base_url).map_err(|error| BaseUrlError::NotAUrl {
        base_url: base_url.to_string(),
        error,
    })?;
    if !matches!(base.scheme(), "https" | "http") || base.host().is_none() {
        return Err(BaseUrlError::NotHttp {
            base_url: base_url.to_string(),
        });
    }
    if !base.path().ends_with('/') {
        let path = format!("{}/", base.path());
        base.set_path(&path);
    }
    Ok(base)
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

    pub(super) fn api(base: &str) -> Api {
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

    #[test]
    fn a_base_url_that_cannot_be_used_says_how_to_write_one() {
        let err = |base: &str| Api::new(http(), base).unwrap_err().to_string();
        assert_eq!(
            err("not a url"),
            "base_url \"not a url\" is not a URL (relative URL without a base); write it like \
             https://api.github.com"
        );
        assert_eq!(
            err("ftp://x/y"),
            "base_url \"ftp://x/y\" is not an http(s) URL with a host; write it like \
             https://api.github.com"
        );
    }
}
