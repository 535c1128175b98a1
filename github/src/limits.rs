//! GitHub's rate-limit and pagination headers, read by pure functions.
//!
//! GitHub documents: a primary limit answers 403 or 429 with `x-ratelimit-remaining: 0` and
//! `x-ratelimit-reset` (epoch seconds) — wait until then; a secondary limit answers 403 or
//! 429, with `retry-after` (seconds) when it says how long, else wait at least a minute.
//! Pagination is the `Link` header's `rel="next"` URL.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::HeaderMap;

/// How long to wait before asking again, when an answer is a rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitWait(pub Duration);

/// What GitHub asks for when it says to wait and nothing says how long.
const SECONDARY_DEFAULT: Duration = Duration::from_secs(60);

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// The wait an answer asks for, if it is a rate limit: `status` and `headers` of the answer,
/// `body` its text (a secondary limit without headers says so in its message), `now` in
/// epoch seconds. `None`: not a rate limit (a 403 for permissions, say).
pub fn rate_limit_wait(
    status: StatusCode,
    headers: &HeaderMap,
    body: &str,
    now: i64,
) -> Option<RateLimitWait> {
    if status != StatusCode::FORBIDDEN && status != StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    if let Some(secs) = header(headers, "retry-after").and_then(|v| v.parse::<u64>().ok()) {
        // Never 0: a request asked again at once, forever, is no wait.
        return Some(RateLimitWait(Duration::from_secs(secs.max(1))));
    }
    if header(headers, "x-ratelimit-remaining") == Some("0")
        && let Some(reset) =
            header(headers, "x-ratelimit-reset").and_then(|v| v.parse::<i64>().ok())
    {
        let secs = u64::try_from(reset - now).unwrap_or(0);
        return Some(RateLimitWait(Duration::from_secs(secs.max(1))));
    }
    let lower = body.to_ascii_lowercase();
    (status == StatusCode::TOO_MANY_REQUESTS || lower.contains("rate limit"))
        .then_some(RateLimitWait(SECONDARY_DEFAULT))
}

/// The `rel="next"` URL of a `Link` header, if any.
pub fn next_link(headers: &HeaderMap) -> Option<String> {
    let link = header(headers, "link")?;
    link.split(',').find_map(|part| {
        let mut pieces = part.split(';');
        let url = pieces.next()?.trim();
        let is_next = pieces.any(|p| {
            let p = p.trim();
            p == "rel=\"next\"" || p == "rel=next"
        });
        (is_next && url.starts_with('<') && url.ends_with('>'))
            .then(|| url[1..url.len() - 1].to_string())
    })
}

#[cfg(test)]
mod tests {
    use reqwest::header::{HeaderName, HeaderValue};

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn rate_limits_are_read_as_github_documents_them() {
        let forbidden = StatusCode::FORBIDDEN;
        assert_eq!(
            rate_limit_wait(forbidden, &headers(&[("retry-after", "30")]), "", 0),
            Some(RateLimitWait(Duration::from_secs(30)))
        );
        let primary = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "1000"),
        ]);
        assert_eq!(
            rate_limit_wait(forbidden, &primary, "", 990),
            Some(RateLimitWait(Duration::from_secs(10)))
        );
        assert_eq!(
            rate_limit_wait(forbidden, &primary, "", 2000),
            Some(RateLimitWait(Duration::from_secs(1))),
            "a reset in the past waits a second, not forever or never"
        );
        assert_eq!(
            rate_limit_wait(forbidden, &headers(&[("retry-after", "0")]), "", 0),
            Some(RateLimitWait(Duration::from_secs(1))),
            "a zero wait is a second, not a busy loop"
        );
        let secondary = r#"{"message": "You have exceeded a secondary rate limit."}"#;
        assert_eq!(
            rate_limit_wait(forbidden, &HeaderMap::new(), secondary, 0),
            Some(RateLimitWait(SECONDARY_DEFAULT))
        );
        assert_eq!(
            rate_limit_wait(StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new(), "", 0),
            Some(RateLimitWait(SECONDARY_DEFAULT))
        );
        let permissions = r#"{"message": "Resource not accessible by integration"}"#;
        assert_eq!(
            rate_limit_wait(forbidden, &HeaderMap::new(), permissions, 0),
            None
        );
        assert_eq!(
            rate_limit_wait(
                StatusCode::NOT_FOUND,
                &headers(&[("retry-after", "5")]),
                "",
                0
            ),
            None
        );
    }

    #[test]
    fn the_next_link_is_found_among_the_others() {
        let h = headers(&[(
            "link",
            "<https://api.github.com/repositories/1/pulls/2/files?page=1>; rel=\"prev\", \
             <https://api.github.com/repositories/1/pulls/2/files?page=3>; rel=\"next\", \
             <https://api.github.com/repositories/1/pulls/2/files?page=5>; rel=\"last\"",
        )]);
        assert_eq!(
            next_link(&h).as_deref(),
            Some("https://api.github.com/repositories/1/pulls/2/files?page=3")
        );
        let last = headers(&[("link", "<https://x/a?page=1>; rel=\"first\"")]);
        assert_eq!(next_link(&last), None);
        assert_eq!(next_link(&HeaderMap::new()), None);
    }
}
