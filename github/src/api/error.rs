//! What a request to GitHub ended in, when not in its answer: [`GithubError`].
//!
//! Guarantees: a message carries GitHub's own words (its `message`) and the request's
//! method and path, never a token; a write that may have been done is told apart
//! ([`GithubError::Ambiguous`]) from one that certainly was not, so that a caller looks
//! before sending it again.

use reqwest::Method;

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
