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
//! errors) are apart from the ones that run git.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::tokens::Secret;

mod record;

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

/// The git host of a GitHub REST API base: `https://api.github.com/` → `https://github.com/`;
/// an Enterprise Server's `https://HOST/api/v3/` → `https://HOST/`; anything else (a fake on
/// loopback) unchanged. Always ends in `/`, without credentials, query or fragment.
pub fn git_base(api_base: &Url) -> Url {
    let mut base = api_base.clone();
    let _ = base.set_username("");
    let _ = base.set_password(None);
    base.set_query(None);
    base.set_fragment(None);
    if base.host_str() == Some("api.github.com") {
        let _ = base.set_host(Some("github.com"));
        base.set_path("/");
        return base;
    }
    let path = base.path().trim_end_matches('/').to_string();
    let path = match path.strip_suffix("/api/v3") {
        Some(prefix) => format!("{prefix}/"),
        None => format!("{path}/"),
    };
    base.set_path(&path);
    base
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

// ---- Deciding ------------------------------------------------------------------------------

/// What one checkout does.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Plan {
    repo: String,
    /// Where the repository is fetched from: `<git base><owner>/<name>.git`.
    remote: Url,
    git_base: Url,
    /// What `git fetch` asks for: the pinned SHA, else the spec's ref.
    want: String,
    /// The commit the checkout must end on, when known before fetching.
    expect: Option<String>,
    /// Whether `expect` is a commit an earlier checkout of the run logged (a workspace that
    /// holds it is kept).
    pinned: bool,
    depth: Option<u32>,
}

fn plan(git_base: &Url, spec: &CheckoutSpec, pinned: Option<&str>) -> Result<Plan, CheckoutError> {
    let invalid = |reason: String| CheckoutError::Invalid {
        repo: spec.repo.clone(),
        reason,
    };
    check_repo(&spec.repo).map_err(invalid)?;
    check_ref(&spec.git_ref).map_err(invalid)?;
    if git_base.scheme() != "https" && !(git_base.scheme() == "http" && is_loopback(git_base)) {
        return Err(invalid(format!(
            "the git host {git_base} is not https (plain http is only for loopback tests)"
        )));
    }
    if spec.depth == Some(0) {
        return Err(invalid(
            "depth 0 fetches nothing; leave it out or give 1 or more".into(),
        ));
    }
    let pinned = match pinned {
        Some(sha) if crate::is_commit_sha(sha) => Some(sha.to_ascii_lowercase()),
        Some(sha) => {
            return Err(invalid(format!(
                "the pinned commit {sha:?} is not a full hexadecimal SHA"
            )));
        }
        None => None,
    };
    let is_pinned = pinned.is_some();
    let expect = pinned
        .or_else(|| crate::is_commit_sha(&spec.git_ref).then(|| spec.git_ref.to_ascii_lowercase()));
    let remote = git_base
        .join(&format!("{}.git", spec.repo))
        .map_err(|e| invalid(format!("no URL for the repository under {git_base}: {e}")))?;
    Ok(Plan {
        repo: spec.repo.clone(),
        remote,
        git_base: git_base.clone(),
        want: expect.clone().unwrap_or_else(|| spec.git_ref.clone()),
        expect,
        pinned: is_pinned,
        depth: spec.depth,
    })
}

/// `owner/name` as GitHub allows them: letters, digits, `-`, `_`, `.`; not `.` or `..`.
fn check_repo(repo: &str) -> Result<(), String> {
    if crate::is_repo_name(repo) {
        Ok(())
    } else {
        Err(format!(
            "the repository {repo:?} is not of the form owner/name"
        ))
    }
}

/// A ref git accepts as a ref name or a SHA, and that `git fetch` cannot take for an option
/// or a refspec (no leading `-` or `+`, no `:`).
fn check_ref(git_ref: &str) -> Result<(), String> {
    let bad = git_ref.is_empty()
        || git_ref.starts_with(['-', '+', '/'])
        || git_ref.ends_with(['/', '.'])
        || git_ref.ends_with(".lock")
        || git_ref.contains("..")
        || git_ref.contains("//")
        || git_ref.contains("@{")
        || git_ref
            .chars()
            .any(|c| c.is_ascii_control() || c.is_whitespace() || ":?*[\\^~".contains(c));
    if bad {
        Err(format!("{git_ref:?} is not a branch, tag or commit SHA"))
    } else {
        Ok(())
    }
}

/// A full SHA-1 (40) or SHA-256 (64) object name.
/// The environment of every git process: nothing inherited but `PATH` (and, for a host that
/// is not loopback, the proxy and CA variables, read with `inherited`), no user or system
/// config, and the config below. With `token`, the `Authorization` header for the git host.
fn git_env(
    git_base: &Url,
    token: Option<&Secret>,
    inherited: &dyn Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("LC_ALL".into(), "C".into()),
        ("HOME".into(), "/nonexistent".into()),
        ("GIT_TERMINAL_PROMPT".into(), "0".into()),
        ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
        ("GIT_CONFIG_GLOBAL".into(), "/dev/null".into()),
    ];
    let mut inherit = vec!["PATH"];
    if !is_loopback(git_base) {
        inherit.extend([
            "https_proxy",
            "HTTPS_PROXY",
            "http_proxy",
            "all_proxy",
            "ALL_PROXY",
            "no_proxy",
            "NO_PROXY",
            "SSL_CERT_FILE",
            "SSL_CERT_DIR",
            "GIT_SSL_CAINFO",
            "GIT_SSL_CAPATH",
        ]);
    }
    for name in inherit {
        if let Some(value) = inherited(name) {
            env.push((name.into(), value));
        }
    }
    let mut config: Vec<(String, String)> = [
        ("protocol.allow", "never"),
        ("http.followRedirects", "false"),
        ("credential.helper", ""),
        ("core.hooksPath", "/dev/null"),
        ("core.fsmonitor", "false"),
        ("submodule.recurse", "false"),
        ("gc.auto", "0"),
        ("maintenance.auto", "false"),
        ("advice.detachedHead", "false"),
        ("init.defaultBranch", "checkout"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    config.push((
        format!("protocol.{}.allow", git_base.scheme()),
        "always".into(),
    ));
    if let Some(token) = token {
        config.push((
            format!("http.{git_base}.extraHeader"),
            format!("Authorization: {}", basic(token)),
        ));
    }
    env.push(("GIT_CONFIG_COUNT".into(), config.len().to_string()));
    for (i, (key, value)) in config.into_iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{i}"), key));
        env.push((format!("GIT_CONFIG_VALUE_{i}"), value));
    }
    env
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// `Basic base64(x-access-token:<token>)`: how an installation token authenticates git.
fn basic(token: &Secret) -> String {
    let pair = format!("x-access-token:{}", token.expose());
    format!("Basic {}", STANDARD.encode(pair))
}

/// `git fetch`'s arguments for `plan` (no credentials: those are in the environment).
fn fetch_args(plan: &Plan) -> Vec<String> {
    let mut args: Vec<String> = ["fetch", "--quiet", "--no-tags", "--no-recurse-submodules"]
        .map(String::from)
        .into();
    if let Some(depth) = plan.depth {
        args.push(format!("--depth={depth}"));
    }
    args.extend(["origin".to_string(), plan.want.clone()]);
    args
}

/// What git's stderr (under `LC_ALL=C`) says went wrong in `step`.
fn classify(
    plan: &Plan,
    step: &'static str,
    status: String,
    stderr: &str,
    token: Option<&Secret>,
) -> CheckoutError {
    let repo = plan.repo.clone();
    let host = plan.git_base.as_str().trim_end_matches('/').to_string();
    let lower = stderr.to_ascii_lowercase();
    let http_error = lower
        .split("the requested url returned error: ")
        .nth(1)
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok());
    if lower.contains("couldn't find remote ref")
        || lower.contains("not our ref")
        || lower.contains("unadvertised object")
    {
        return CheckoutError::RefMissing {
            repo,
            git_ref: plan.want.clone(),
        };
    }
    if lower.contains("repository not found")
        || (lower.contains("repository '") && lower.contains("' not found"))
        || http_error == Some(404)
    {
        return CheckoutError::RepoNotFound { repo, host };
    }
    let prompt =
        lower.contains("could not read username") || lower.contains("could not read password");
    if prompt || lower.contains("authentication failed") || matches!(http_error, Some(401 | 403)) {
        let detail = match http_error {
            Some(code) => format!("HTTP {code}"),
            None => "HTTP 401".to_string(),
        };
        return CheckoutError::AuthRefused {
            repo,
            host,
            detail,
            had_token: token.is_some(),
        };
    }
    let unreachable = [
        "could not resolve host",
        "failed to connect",
        "connection refused",
        "connection timed out",
        "operation timed out",
        "ssl certificate problem",
        "recv failure",
        "empty reply from server",
        "rpc failed",
    ];
    if unreachable.iter().any(|s| lower.contains(s)) || http_error.is_some_and(|c| c >= 500) {
        return CheckoutError::Unreachable {
            repo,
            host,
            detail: last_line(&redact(stderr, token)),
        };
    }
    CheckoutError::Git {
        repo,
        step,
        status,
        stderr: redact(stderr, token),
    }
}

/// `stderr` trimmed to its last 2,000 characters, with the token (plain or in its header
/// form) replaced.
fn redact(stderr: &str, token: Option<&Secret>) -> String {
    let mut text = stderr.trim().to_string();
    if let Some(token) = token.filter(|t| !t.expose().is_empty()) {
        text = text.replace(&basic(token), "Basic [REDACTED]");
        text = text.replace(token.expose(), "[REDACTED]");
    }
    match text.char_indices().rev().nth(1999) {
        Some((at, _)) => format!("…{}", &text[at..]),
        None => text,
    }
}

fn last_line(text: &str) -> String {
    let line = text.lines().rev().find(|l| !l.trim().is_empty());
    line.unwrap_or("").trim().to_string()
}

// ---- Doing ---------------------------------------------------------------------------------

/// What the workspace directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dest {
    Empty,
    /// A `.git` directory (a checkout, or what a failed one left).
    Checkout,
    /// Files, and no `.git` directory.
    Other,
}

/// Checks out `plan` into `dest` by way of `staging`; sets `touched` before it changes
/// anything in `dest`.
async fn run(
    plan: &Plan,
    token: Option<&Secret>,
    dest: &Path,
    staging: &Path,
    touched: &AtomicBool,
) -> Result<Checkout, CheckoutError> {
    let workspace = |reason: String| CheckoutError::Workspace {
        path: dest.to_path_buf(),
        reason,
    };
    tokio::fs::create_dir_all(dest)
        .await
        .map_err(|e| workspace(format!("cannot create it: {e}")))?;
    // Kept when the daemon's record says it holds the run's commit: whatever the run did
    // since (commits, another branch, changed files, even `.git` removed) is its own work.
    if let Some(expect) = plan.expect.as_ref().filter(|_| plan.pinned)
        && record::holds(staging, dest, expect)
    {
        return Ok(Checkout {
            commit: expect.clone(),
            reused: true,
        });
    }
    let held = inspect(dest)
        .await
        .map_err(|e| workspace(format!("cannot read it: {e}")))?;
    match held {
        Dest::Empty | Dest::Checkout => {}
        Dest::Other => {
            return Err(workspace(
                "it holds files that are not a git checkout; they are not deleted: give the \
                 checkout an empty directory"
                    .into(),
            ));
        }
    }
    let staged = |reason: String| CheckoutError::Workspace {
        path: staging.to_path_buf(),
        reason,
    };
    let _ = tokio::fs::remove_dir_all(staging).await;
    tokio::fs::create_dir_all(staging)
        .await
        .map_err(|e| staged(format!("cannot create it: {e}")))?;
    let git = Git {
        plan,
        dest: staging,
        plain: git_env(&plan.git_base, None, &|name| std::env::var(name).ok()),
    };
    let staging_arg = staging.to_string_lossy().into_owned();
    git.run(
        "init",
        &["init", "--quiet", "--template=", &staging_arg],
        None,
        false,
    )
    .await?;
    let remote = plan.remote.as_str();
    git.run(
        "remote add",
        &["remote", "add", "origin", remote],
        None,
        true,
    )
    .await?;
    let fetch = fetch_args(plan);
    let fetch: Vec<&str> = fetch.iter().map(String::as_str).collect();
    git.run("fetch", &fetch, token, true).await?;
    let fetched = git
        .run(
            "rev-parse",
            &["rev-parse", "--verify", "FETCH_HEAD^{commit}"],
            None,
            true,
        )
        .await?;
    if let Some(expect) = &plan.expect
        && &fetched != expect
    {
        return Err(CheckoutError::CommitMismatch {
            repo: plan.repo.clone(),
            git_ref: plan.want.clone(),
            expected: expect.clone(),
            got: fetched,
        });
    }
    git.run(
        "checkout",
        &["checkout", "--quiet", "--detach", &fetched],
        None,
        true,
    )
    .await?;
    match git.head().await {
        Some(head) if head == fetched => {}
        other => {
            return Err(CheckoutError::CommitMismatch {
                repo: plan.repo.clone(),
                git_ref: plan.want.clone(),
                expected: fetched,
                got: other.unwrap_or_else(|| "no commit".into()),
            });
        }
    }
    // The finished tree replaces whatever `dest` held; the record is gone while it does.
    record::forget(staging).map_err(|e| staged(format!("cannot remove its record: {e}")))?;
    touched.store(true, Ordering::SeqCst);
    empty(dest)
        .await
        .map_err(|e| workspace(format!("cannot empty the previous checkout: {e}")))?;
    move_entries(staging, dest)
        .await
        .map_err(|e| workspace(format!("cannot move the checkout into it: {e}")))?;
    record::write(staging, dest, &fetched)
        .map_err(|e| staged(format!("cannot write its record: {e}")))?;
    Ok(Checkout {
        commit: fetched,
        reused: false,
    })
}

/// Moves every entry of `from` into `to` (renames: both are on the daemon's data disk).
async fn move_entries(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut entries = tokio::fs::read_dir(from).await?;
    while let Some(entry) = entries.next_entry().await? {
        tokio::fs::rename(entry.path(), to.join(entry.file_name())).await?;
    }
    Ok(())
}

/// The git processes of one checkout.
struct Git<'a> {
    plan: &'a Plan,
    dest: &'a Path,
    /// The environment without the token.
    plain: Vec<(String, String)>,
}

impl Git<'_> {
    /// Runs `git args`; `in_repo`: on the repository in `dest` (never one above it). Its
    /// stdout, trimmed.
    async fn run(
        &self,
        step: &'static str,
        args: &[&str],
        token: Option<&Secret>,
        in_repo: bool,
    ) -> Result<String, CheckoutError> {
        let env = match token {
            Some(_) => git_env(&self.plan.git_base, token, &|name| std::env::var(name).ok()),
            None => self.plain.clone(),
        };
        let mut command = tokio::process::Command::new("git");
        command
            .args(args)
            .env_clear()
            .envs(env)
            .current_dir(self.dest)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if in_repo {
            command
                .env("GIT_DIR", self.dest.join(".git"))
                .env("GIT_WORK_TREE", self.dest);
        }
        let output = command.output().await.map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => CheckoutError::GitMissing {
                reason: "no git on PATH".into(),
            },
            _ => CheckoutError::GitMissing {
                reason: e.to_string(),
            },
        })?;
        if output.status.success() {
            return Ok(String::from_utf8_lossy(&output.stdout).trim().to_string());
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        Err(classify(
            self.plan,
            step,
            output.status.to_string(),
            &stderr,
            token,
        ))
    }

    /// The commit `HEAD` of the repository in `dest` is on, if any.
    async fn head(&self) -> Option<String> {
        let args = ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"];
        self.run("rev-parse", &args, None, true).await.ok()
    }
}

async fn inspect(dest: &Path) -> std::io::Result<Dest> {
    let mut entries = tokio::fs::read_dir(dest).await?;
    let mut any = false;
    while let Some(entry) = entries.next_entry().await? {
        if entry.file_name() == ".git" && entry.file_type().await?.is_dir() {
            return Ok(Dest::Checkout);
        }
        any = true;
    }
    Ok(if any { Dest::Other } else { Dest::Empty })
}

/// Deletes everything in `dest` (not `dest` itself; symbolic links, not what they point to).
async fn empty(dest: &Path) -> std::io::Result<()> {
    let mut entries = tokio::fs::read_dir(dest).await?;
    while let Some(entry) = entries.next_entry().await? {
        if entry.file_type().await?.is_dir() {
            tokio::fs::remove_dir_all(entry.path()).await?;
        } else {
            tokio::fs::remove_file(entry.path()).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
