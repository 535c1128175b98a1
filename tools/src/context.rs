//! Everything a tool call may use from its surroundings: [`ToolContext`].
//!
//! Guarantees: the workspace path in a context is canonical (symlinks resolved) and is an
//! existing directory, so path confinement can compare prefixes; the idempotency key is a
//! pure function of run id and tool call id, so a re-run after a crash sends the same key;
//! `Debug` never prints secret values; an empty [`HttpAllowlist`] allows no host at all.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nightshift_sandbox::Sandbox;

use tokio_util::sync::CancellationToken;

use crate::secret_hosts::SecretBindings;
use crate::secrets::SecretResolver;

/// Caps and timeouts applied to tool calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Outputs longer than this many bytes are cut (head + tail kept) and saved as artifacts.
    pub output_cap_bytes: usize,
    /// An artifact holds at most this many bytes of the full output.
    pub max_artifact_bytes: u64,
    /// Timeout of `run_command` and command tools when neither the call nor an override sets one.
    pub command_timeout: Duration,
    /// Upper bound for a `timeout_seconds` the model asks for.
    pub max_command_timeout: Duration,
    /// A foreground `sleep` longer than this is refused (the agent should set a wakeup).
    pub max_foreground_sleep: Duration,
    /// Whole-request timeout of `http_request`.
    pub http_timeout: Duration,
    /// Time between SIGTERM and SIGKILL when a process group is stopped.
    pub kill_grace: Duration,
    /// Deadline of a background command when the call sets none.
    pub background_timeout: Duration,
    /// Upper bound for the `timeout_seconds` of a background command.
    pub max_background_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            output_cap_bytes: 32 * 1024,
            max_artifact_bytes: 64 * 1024 * 1024,
            command_timeout: Duration::from_secs(120),
            max_command_timeout: Duration::from_secs(30 * 60),
            max_foreground_sleep: Duration::from_secs(60),
            http_timeout: Duration::from_secs(60),
            kill_grace: Duration::from_millis(500),
            background_timeout: Duration::from_secs(60 * 60),
            max_background_timeout: Duration::from_secs(24 * 60 * 60),
        }
    }
}

/// Hosts `http_request` may reach.
///
/// An entry is a host name (`api.github.com`), a wildcard for its subdomains
/// (`*.example.com`, which does not match `example.com` itself), an IP address (`127.0.0.1`,
/// `[::1]`), optionally followed by `:port` to allow only that port. An entry without a port
/// allows only the URL scheme's default port (443 for https, 80 for http), never every port.
/// Matching ignores case.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpAllowlist {
    entries: Vec<String>,
}

impl HttpAllowlist {
    pub fn new<I, S>(entries: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        HttpAllowlist {
            entries: entries
                .into_iter()
                .map(|e| e.into().trim().to_ascii_lowercase())
                .filter(|e| !e.is_empty())
                .collect(),
        }
    }

    pub fn entries(&self) -> &[String] {
        &self.entries
    }

    /// Whether `url` (http or https) may be requested: its host and its port (explicit or
    /// the scheme's default) match an entry.
    pub fn allows(&self, url: &reqwest::Url) -> bool {
        match (
            url.host_str(),
            url.port_or_known_default(),
            default_port(url.scheme()),
        ) {
            (Some(host), Some(port), Some(default)) => self.matches(host, port, default),
            _ => false,
        }
    }

    /// Whether `host` (as in a URL, IPv6 in brackets) on `port` matches an entry, where
    /// `default_port` is the URL scheme's: a port-less entry matches only that port.
    pub fn matches(&self, host: &str, port: u16, default_port: u16) -> bool {
        let host = host.to_ascii_lowercase();
        self.entries.iter().any(|entry| {
            let (pattern, entry_port) = split_port(entry);
            if entry_port.unwrap_or(default_port) != port {
                return false;
            }
            match pattern.strip_prefix("*.") {
                Some(suffix) => {
                    host.len() > suffix.len() + 1 && host.ends_with(&format!(".{suffix}"))
                }
                None => host == pattern,
            }
        })
    }
}

/// The default port of an http(s) scheme.
pub(crate) fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "https" => Some(443),
        "http" => Some(80),
        _ => None,
    }
}

/// Split `host:port` (or `[v6]:port`) into host pattern and port; no port → `None`.
fn split_port(entry: &str) -> (&str, Option<u16>) {
    if entry.starts_with('[') {
        if let Some(end) = entry.find(']') {
            let port = entry[end + 1..]
                .strip_prefix(':')
                .and_then(|p| p.parse().ok());
            return (&entry[..=end], port);
        }
        return (entry, None);
    }
    match entry.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => match port.parse() {
            Ok(p) => (host, Some(p)),
            Err(_) => (entry, None),
        },
        _ => (entry, None),
    }
}

/// The surroundings of one tool call.
#[derive(Debug, Clone)]
pub struct ToolContext {
    run_id: String,
    tool_call_id: String,
    workspace: PathBuf,
    artifacts_dir: PathBuf,
    cancel: CancellationToken,
    secrets: SecretResolver,
    secret_bindings: SecretBindings,
    http_allowlist: HttpAllowlist,
    limits: Limits,
    env_allow: Vec<String>,
    idempotency_key: Option<String>,
    processes: Option<crate::orphans::ProcessRegistry>,
    tasks: Option<crate::background::TaskSupervisor>,
    sandbox: Option<Arc<Sandbox>>,
    /// PATH of sandboxed commands (`None`: [`crate::SANDBOXED_PATH`]).
    sandboxed_path: Option<String>,
    github: Option<Arc<nightshift_github::GithubAccess>>,
    github_agent: GithubAgent,
    check_run_claims: Option<Arc<dyn nightshift_github::check_claims::CheckRunClaims>>,
    run_context: Option<serde_json::Value>,
}

/// What the calling agent's `[agents.github]` says, as the GitHub tools need it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GithubAgent {
    /// The name of the check run the agent keeps on its pull request, if any.
    pub check_run: Option<String>,
    /// The review verdicts the agent may post, when it narrows or widens the daemon's.
    pub review_events: Option<Vec<String>>,
}

impl ToolContext {
    /// A context for one call. `workspace` must be an existing directory (it is
    /// canonicalised); `artifacts_dir` is created when the first artifact is written.
    pub fn new(
        run_id: impl Into<String>,
        tool_call_id: impl Into<String>,
        workspace: impl AsRef<Path>,
        artifacts_dir: impl Into<PathBuf>,
    ) -> io::Result<Self> {
        let workspace = workspace.as_ref().canonicalize().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("workspace {}: {e}", workspace.as_ref().display()),
            )
        })?;
        if !workspace.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("workspace {} is not a directory", workspace.display()),
            ));
        }
        Ok(ToolContext {
            run_id: run_id.into(),
            tool_call_id: tool_call_id.into(),
            workspace,
            artifacts_dir: artifacts_dir.into(),
            cancel: CancellationToken::new(),
            secrets: SecretResolver::default(),
            secret_bindings: SecretBindings::default(),
            http_allowlist: HttpAllowlist::default(),
            limits: Limits::default(),
            env_allow: Vec::new(),
            idempotency_key: None,
            processes: None,
            tasks: None,
            sandbox: None,
            sandboxed_path: None,
            github: None,
            github_agent: GithubAgent::default(),
            check_run_claims: None,
            run_context: None,
        })
    }

    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    pub fn with_secrets(mut self, secrets: SecretResolver) -> Self {
        self.secrets = secrets;
        self
    }

    /// Binds secrets to the hosts `http_request` may send them to (unbound secrets may go to
    /// any allow-listed host).
    pub fn with_secret_bindings(mut self, bindings: SecretBindings) -> Self {
        self.secret_bindings = bindings;
        self
    }

    pub fn with_http_allowlist(mut self, allowlist: HttpAllowlist) -> Self {
        self.http_allowlist = allowlist;
        self
    }

    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Names of daemon environment variables passed to commands besides PATH, HOME, LANG, TERM.
    pub fn with_env_allow<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.env_allow = names.into_iter().map(Into::into).collect();
        self
    }

    /// The same run and surroundings for another tool call.
    pub fn for_call(&self, tool_call_id: impl Into<String>) -> Self {
        ToolContext {
            tool_call_id: tool_call_id.into(),
            idempotency_key: None,
            ..self.clone()
        }
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    pub fn tool_call_id(&self) -> &str {
        &self.tool_call_id
    }

    /// Records the process groups of this call's commands in `registry`, so a daemon that
    /// restarts after a crash can kill what its predecessor left running.
    pub fn with_process_registry(mut self, registry: crate::orphans::ProcessRegistry) -> Self {
        self.processes = Some(registry);
        self
    }

    /// The registry of running process groups, if any.
    pub fn process_registry(&self) -> Option<&crate::orphans::ProcessRegistry> {
        self.processes.as_ref()
    }

    /// Lets this call start, inspect and stop background commands through `supervisor`.
    pub fn with_tasks(mut self, supervisor: crate::background::TaskSupervisor) -> Self {
        self.tasks = Some(supervisor);
        self
    }

    /// Lets the GitHub tools reach GitHub with `access`'s credentials.
    pub fn with_github(mut self, access: Arc<nightshift_github::GithubAccess>) -> Self {
        self.github = Some(access);
        self
    }

    /// What the calling agent's `[agents.github]` says.
    pub fn with_github_agent(mut self, settings: GithubAgent) -> Self {
        self.github_agent = settings;
        self
    }

    /// The calling agent's GitHub settings.
    pub fn github_agent(&self) -> &GithubAgent {
        &self.github_agent
    }

    /// The daemon's record of who makes each run's check run: `github_check_run` creates
    /// one only while it holds the claim (see `nightshift_github::check_claims`).
    pub fn with_check_run_claims(
        mut self,
        claims: Arc<dyn nightshift_github::check_claims::CheckRunClaims>,
    ) -> Self {
        self.check_run_claims = Some(claims);
        self
    }

    /// The record of who makes each run's check run, when the daemon keeps one.
    pub fn check_run_claims(&self) -> Option<&dyn nightshift_github::check_claims::CheckRunClaims> {
        self.check_run_claims.as_deref()
    }

    /// What the run knows about what started it (the stored run context: trusted data, never
    /// the model's).
    pub fn with_run_context(mut self, context: Option<serde_json::Value>) -> Self {
        self.run_context = context;
        self
    }

    /// The run's context, if it has one.
    pub fn run_context(&self) -> Option<&serde_json::Value> {
        self.run_context.as_ref()
    }

    /// The daemon's GitHub credentials, if `[github]` is configured.
    pub fn github(&self) -> Option<&nightshift_github::GithubAccess> {
        self.github.as_deref()
    }

    /// The supervisor of background commands, if this daemon runs them.
    pub fn tasks(&self) -> Option<&crate::background::TaskSupervisor> {
        self.tasks.as_ref()
    }

    /// Runs this call's commands (`run_command`, background tasks, command tools) through
    /// `sandbox`'s launcher, confined to its policy (with this context's workspace). Without
    /// one they run unconfined, as the daemon's user.
    pub fn with_sandbox(mut self, sandbox: Arc<Sandbox>) -> Self {
        self.sandbox = Some(sandbox);
        self
    }

    /// The PATH commands get in the sandbox (`[sandbox] path`), instead of
    /// [`crate::SANDBOXED_PATH`]. Without a sandbox commands keep the daemon's PATH.
    pub fn with_sandboxed_path(mut self, path: impl Into<String>) -> Self {
        self.sandboxed_path = Some(path.into());
        self
    }

    /// The PATH commands get in the sandbox.
    pub fn sandboxed_path(&self) -> &str {
        self.sandboxed_path
            .as_deref()
            .unwrap_or(crate::SANDBOXED_PATH)
    }

    /// The sandbox commands run in, if any.
    pub fn sandbox(&self) -> Option<&Sandbox> {
        self.sandbox.as_deref()
    }

    /// Sets the idempotency key explicitly: the agent loop passes the key it logged in the
    /// call's `tool_started` event, so a re-run after a crash uses exactly that key.
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// The key given by [`with_idempotency_key`](Self::with_idempotency_key), else
    /// `<run id>:<tool call id>`: the same for every attempt of the same call.
    pub fn idempotency_key(&self) -> String {
        self.idempotency_key
            .clone()
            .unwrap_or_else(|| format!("{}:{}", self.run_id, self.tool_call_id))
    }

    /// The run's workspace directory (canonical).
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    pub fn artifacts_dir(&self) -> &Path {
        &self.artifacts_dir
    }

    pub fn cancel(&self) -> &CancellationToken {
        &self.cancel
    }

    pub fn secrets(&self) -> &SecretResolver {
        &self.secrets
    }

    pub fn secret_bindings(&self) -> &SecretBindings {
        &self.secret_bindings
    }

    pub fn http_allowlist(&self) -> &HttpAllowlist {
        &self.http_allowlist
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub(crate) fn limits_mut(&mut self) -> &mut Limits {
        &mut self.limits
    }

    pub fn env_allow(&self) -> &[String] {
        &self.env_allow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowlist_matches_hosts_wildcards_and_ports() {
        let list = HttpAllowlist::new(["API.example.com", "*.svc.test", "127.0.0.1:8080", "[::1]"]);
        assert!(list.matches("api.example.com", 443, 443));
        assert!(!list.matches("evil-api.example.com", 443, 443));
        assert!(list.matches("a.svc.test", 80, 80));
        assert!(!list.matches("svc.test", 80, 80));
        assert!(!list.matches("xsvc.test", 80, 80));
        assert!(list.matches("127.0.0.1", 8080, 80));
        assert!(!list.matches("127.0.0.1", 8081, 80));
        assert!(list.matches("[::1]", 443, 443));
        assert!(!HttpAllowlist::default().matches("localhost", 80, 80));
    }

    #[test]
    fn a_port_less_entry_means_the_default_port_only() {
        let list = HttpAllowlist::new(["api.example.com", "[::1]", "*.svc.test"]);
        let allows = |url: &str| list.allows(&reqwest::Url::parse(url).unwrap());
        assert!(allows("https://api.example.com/x"));
        assert!(allows("http://api.example.com/x"));
        assert!(allows("https://api.example.com:443/x"));
        assert!(!allows("https://api.example.com:8443/x"));
        assert!(
            !allows("http://api.example.com:443/x"),
            "443 is not http's default"
        );
        assert!(!allows("http://[::1]:8080/"));
        assert!(allows("http://[::1]/"));
        assert!(!allows("https://a.svc.test:444/"));
        assert!(!allows("ftp://api.example.com/"));
        let with_port = HttpAllowlist::new(["api.example.com:8443"]);
        assert!(with_port.allows(&reqwest::Url::parse("https://api.example.com:8443/").unwrap()));
        assert!(!with_port.allows(&reqwest::Url::parse("https://api.example.com/").unwrap()));
    }

    #[test]
    fn an_explicit_idempotency_key_wins_and_is_not_inherited_by_other_calls() {
        let dir = std::env::temp_dir();
        let ctx = ToolContext::new("run-1", "call-1", &dir, dir.join("artifacts")).unwrap();
        assert_eq!(ctx.idempotency_key(), "run-1:call-1");
        let logged = ctx.clone().with_idempotency_key("key-from-the-log");
        assert_eq!(logged.idempotency_key(), "key-from-the-log");
        assert_eq!(logged.for_call("call-2").idempotency_key(), "run-1:call-2");
    }
}
