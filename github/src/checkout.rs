//! Checking out a repository into a run's workspace before the model's first turn, with the
//! `git` CLI, so that:
//!
//! - **The token reaches nothing on disk and no argv.** It goes to the one `git fetch`
//!   process through its environment (`GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/
//!   `GIT_CONFIG_VALUE_n`, readable only by the daemon's user) as an `Authorization: Basic`
//!   header scoped to the git host (`http.<base>.extraHeader`), as GitHub App installation
//!   tokens authenticate git over HTTPS. The remote URL carries no credentials; redirects are
//!   not followed, so the header goes to that host only.
//! - **git runs hardened:** a cleared environment (no `GIT_*`, askpass, `~/.netrc` or user
//!   and system config), no prompts, hooks pointing nowhere, only the git host's scheme
//!   allowed, no background maintenance, and `LC_ALL=C` so its messages can be read.
//! - **A resumed run gets the same commit.** Given the commit a previous job recorded
//!   (`pinned`), exactly that commit is fetched (by SHA) and checked, and a workspace already
//!   on it is kept as it is (`reused`), without a fetch.
//! - **git never runs in a workspace.** Everything beneath a workspace, `.git` included, is
//!   the run's commands' to write, and a planted `.git/config` would make any git there run
//!   code of the model's choosing as the daemon (askpass, a promisor remote's lazy fetch,
//!   fsmonitor, hooks, filters). git runs only in the daemon's staging directory; whether a
//!   workspace holds the pinned commit is answered from the daemon's own record of what it
//!   moved there ([`record`]), never by asking git or reading `.git`.
//! - **A failure says what to do** ([`CheckoutError`]), never shows the token, and leaves
//!   the workspace without a checkout (emptied, best effort).
//!
//! The workspace directory belongs to the run: a previous checkout in it is deleted before a
//! new one; files that are not a checkout are never deleted (an error instead).
//!
//! The functions that decide (the plan, git's environment and arguments, reading git's
//! errors: [`decide`]) are apart from the ones that run git ([`run`]).

mod decide;
mod record;
mod run;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use url::Url;

use crate::tokens::Secret;
use decide::plan;
use run::{empty, run};

pub use decide::git_base;

/// What to check out: a repository at a ref.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckoutSpec {
    /// `owner/name`.
    pub repo: String,
    /// A branch, a tag, a full ref (`refs/pull/7/head`) or a full commit SHA.
    pub git_ref: String,
    /// Fetch only this many commits of history (`1` for a review of the head); `None`: all.
    pub depth: Option<u32>,
}

/// A checkout done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkout {
    /// The full SHA of the commit checked out (`HEAD`, detached).
    pub commit: String,
    /// The workspace already held that commit: nothing was fetched or changed.
    pub reused: bool,
}

/// Why a checkout failed. No message holds the token.
#[derive(Debug, thiserror::Error)]
pub enum CheckoutError {
    /// The spec or the host cannot be used; nothing was run.
    #[error("cannot check out {repo}: {reason}")]
    Invalid { repo: String, reason: String },
    /// The host says there is no such repository (also what GitHub says to credentials that
    /// cannot see a private one).
    #[error(
        "repository {repo} was not found at {host}, or the credentials cannot see it; check \
         the name, and that the GitHub App is installed on it with read access to contents"
    )]
    RepoNotFound { repo: String, host: String },
    /// The repository has no such branch, tag or commit.
    #[error("the ref {git_ref} does not exist in {repo}; was the branch deleted or force-pushed?")]
    RefMissing { repo: String, git_ref: String },
    /// The host refused the credentials (401/403), or wants some and none were given.
    #[error(
        "{host} refused {} for {repo} ({detail}); {}",
        if *had_token { "the token" } else { "to serve without credentials" },
        if *had_token {
            "the installation token may have expired or been revoked, or the App lacks read \
             access to contents: fetch a fresh token and try again"
        } else {
            "install the GitHub App on the repository or configure a token"
        }
    )]
    AuthRefused {
        repo: String,
        host: String,
        detail: String,
        had_token: bool,
    },
    /// The host did not answer, or answered with a server error.
    #[error("cannot fetch {repo} from {host}: {detail}; try again later")]
    Unreachable {
        repo: String,
        host: String,
        detail: String,
    },
    /// `git` could not be started.
    #[error("cannot run git ({reason}); install git on the daemon's machine and put it on PATH")]
    GitMissing { reason: String },
    #[error(
        "checking out {repo} took longer than {secs} s; the host is slow or the repository \
             large: set a depth, or allow more time"
    )]
    TimedOut { repo: String, secs: u64 },
    #[error("checking out {repo} was cancelled")]
    Cancelled { repo: String },
    /// The fetched commit is not the one the run is pinned to.
    #[error("{repo} at {git_ref} is {got}, not the commit {expected} the run is pinned to")]
    CommitMismatch {
        repo: String,
        git_ref: String,
        expected: String,
        got: String,
    },
    /// The workspace directory cannot be used.
    #[error("workspace {}: {reason}", path.display())]
    Workspace { path: PathBuf, reason: String },
    /// git failed otherwise; `stderr` is git's own (trimmed, token redacted).
    #[error("git {step} failed for {repo} ({status}): {stderr}")]
    Git {
        repo: String,
        step: &'static str,
        status: String,
        stderr: String,
    },
}

impl CheckoutError {
    /// Whether trying again later, unchanged, may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            CheckoutError::Unreachable { .. } | CheckoutError::TimedOut { .. }
        )
    }
}

/// Checks out `spec` (or, when given, the `pinned` commit) into `dest`, fetching from the git
/// host `git_base` (see [`git_base`]) with `token` (an installation token) if any. Gives up
/// after `timeout` or when `cancel` fires; dropping the future kills git too.
///
/// A `dest` the daemon's record says holds the pinned commit (see [`holds_commit`]) is kept as
/// it is (with whatever was done in it since). Otherwise the repository is fetched and
/// checked out in `staging` — a directory of the daemon's that nothing else may write
/// (sandboxed commands of the run can write `dest` at any time, and a `.git/config` or
/// `.git/info/attributes` they planted there must never steer the daemon's git) — and only
/// the finished tree is moved into `dest`; then the record (`<staging>.record`) says so.
#[allow(clippy::too_many_arguments)]
pub async fn checkout(
    git_base: &Url,
    spec: &CheckoutSpec,
    token: Option<&Secret>,
    dest: &Path,
    staging: &Path,
    pinned: Option<&str>,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<Checkout, CheckoutError> {
    let plan = plan(git_base, spec, pinned)?;
    let touched = AtomicBool::new(false);
    let done = tokio::select! {
        biased;
        () = cancel.cancelled() => Err(CheckoutError::Cancelled { repo: spec.repo.clone() }),
        done = tokio::time::timeout(timeout, run(&plan, token, dest, staging, &touched)) => done.unwrap_or_else(|_| {
            Err(CheckoutError::TimedOut { repo: spec.repo.clone(), secs: timeout.as_secs() })
        }),
    };
    let _ = tokio::fs::remove_dir_all(staging).await;
    if done.is_err() && touched.load(Ordering::SeqCst) {
        // Whatever this call left half-moved is not a checkout. A workspace it had not
        // started to change (a kept checkout) is left alone.
        let _ = empty(dest).await;
    }
    done
}

/// Whether `dest` holds the checkout of `commit` that [`checkout`] made with the same
/// `staging` — what [`checkout`] keeps when that commit is pinned. Answered from the daemon's
/// record beside `staging` alone: no git runs and nothing beneath `dest` is read, since the
/// run's commands could have written it. `dest` made again since (another directory at the
/// same path) does not hold it.
pub fn holds_commit(dest: &Path, staging: &Path, commit: &str) -> bool {
    crate::is_commit_sha(commit) && record::holds(staging, dest, commit)
}
