//! The checkout's decisions, pure and apart from the running of git: the git host of an API
//! base, the plan (what to fetch and which commit it must be), git's hardened environment and
//! its `fetch` arguments, and what git's errors say went wrong.
//!
//! Guarantees: a spec, ref, pinned commit or host that cannot be used is refused here
//! ([`CheckoutError::Invalid`]) before any git runs, and nothing git is given could be read as
//! an option or a refspec; the token goes only into the `Authorization` header of the
//! environment's config, scoped to the git host, never into arguments or the remote URL;
//! git's own errors are read into the [`CheckoutError`] that says what to do, and any text of
//! git's that is kept has the token (plain or in its header form) redacted.

use url::Url;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::{CheckoutError, CheckoutSpec};
use crate::tokens::Secret;

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

/// What one checkout does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Plan {
    pub(super) repo: String,
    /// Where the repository is fetched from: `<git base><owner>/<name>.git`.
    pub(super) remote: Url,
    pub(super) git_base: Url,
    /// What `git fetch` asks for: the pinned SHA, else the spec's ref.
    pub(super) want: String,
    /// The commit the checkout must end on, when known before fetching.
    pub(super) expect: Option<String>,
    /// Whether `expect` is a commit an earlier checkout of the run logged (a workspace that
    /// holds it is kept).
    pub(super) pinned: bool,
    pub(super) depth: Option<u32>,
}

pub(super) fn plan(
    git_base: &Url,
    spec: &CheckoutSpec,
    pinned: Option<&str>,
) -> Result<Plan, CheckoutError> {
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

/// The environment of every git process: nothing inherited but `PATH` (and, for a host that
/// is not loopback, the proxy and CA variables, read with `inherited`), no user or system
/// config, and the config below. With `token`, the `Authorization` header for the git host.
pub(super) fn git_env(
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
pub(super) fn fetch_args(plan: &Plan) -> Vec<String> {
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
pub(super) fn classify(
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

#[cfg(test)]
mod tests;
