//! # GitHub for Nightshift
//!
//! What a review bot needs to talk to GitHub the way a GitHub App does:
//!
//! - [`AppKey`]: an App's private key (PEM, read from an environment variable or a file the
//!   config names; never inline) and the RS256 JWTs it signs — `iss` the App id, issued 60 s
//!   in the past and valid 9 minutes, inside GitHub's 10-minute limit.
//! - [`InstallationTokens`]: exchanges the JWT for an installation access token
//!   (`POST /app/installations/{id}/access_tokens`), caches it per installation until five
//!   minutes before it expires, and refreshes it then; concurrent callers share one exchange.
//! - [`Api`]: the REST client. Every request carries GitHub's media type and API version;
//!   secondary and primary rate limits (403/429 with `retry-after` or
//!   `x-ratelimit-remaining: 0` and `x-ratelimit-reset`) are waited out within a bound;
//!   `Link` pagination is followed; and a token is only ever sent to the configured API
//!   origin (GitHub Enterprise Server: its `base_url`) — a `Link` elsewhere is refused.
//!
//! - [`GithubAccess`]: the token for a repository — the installation token of the first
//!   configured App installed on it (`GET /repos/{owner}/{repo}/installation`, cached), else
//!   a personal token.
//! - [`checkout()`]: a repository at a ref (or a pinned commit) cloned into a run's workspace
//!   with the `git` CLI, the token passed to git through its environment only — never in
//!   argv, the remote URL or any file — and a workspace already on the pinned commit kept.
//!
//! - [`once`]: the rule every write follows when GitHub's answer is lost — look for what it
//!   would have made (its marker, its `external_id`) before sending it again.
//! - [`checks`]: the check run of a run (`external_id` = the run's id), found or created,
//!   updated and completed without storage of its own.
//! - [`check_claims`]: who may create a run's check run, asked of the daemon's durable record
//!   before any create, so that racing makers never make two.
//!
//! Tokens are [`Secret`]s: their `Debug` never shows them. Errors carry GitHub's own message
//! and never a token.

mod access;
mod api;
mod app;
pub mod check_claims;
mod checkout;
pub mod checks;
mod keyed;
mod limits;
mod names;
pub mod once;
mod tokens;

pub use access::{App, GithubAccess};
pub use api::{Api, Auth, BaseUrlError, GithubError, Page, check_base_url};
pub use app::{AppKey, JwtError, KeyError};
pub use checkout::{Checkout, CheckoutError, CheckoutSpec, checkout, git_base, holds_commit};
pub use limits::{RateLimitWait, next_link, rate_limit_wait};
pub use names::{is_commit_sha, is_repo_name};
pub use tokens::{InstallationTokens, Secret};

/// GitHub.com's REST API.
pub const GITHUB_API: &str = "https://api.github.com";
