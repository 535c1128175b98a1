//! Every secret the daemon holds, as one [`SecretResolver`], and the daemon's log writer.
//!
//! [`secrets`] collects, from the config and the environment: each provider's key (the
//! variable `api_key_env` names, or its per-kind default such as `ANTHROPIC_API_KEY`), the
//! API token (`server.token_env`, or the one kept in `<data_dir>/api-token`), every hook's
//! signing secret (`hooks.*.secret_env`), every notify target's `secret_env`, the GitHub
//! token and App private keys (`[github]`), and `runtime.secrets`. Only `runtime.secrets` can be substituted into a tool call
//! (`{{secret:NAME}}`); the others are redact-only, so a model can never ask for the API
//! token or a provider key. The same set redacts tool output, the model's own text before it
//! is stored or sent again, stored errors and — through `LogWriter`, once
//! [`install_for_logs`] has been called — every log line the daemon writes.

use std::io::Write;
use std::path::Path;
use std::sync::RwLock;

use nightshift_tools::{Redactor, SecretResolver};

use crate::config::Config;

/// The (name, value) pairs of every secret the daemon holds besides `runtime.secrets`.
/// Variables that are not set are left out. Reads the environment and the token file.
pub(crate) fn daemon_held(config: &Config) -> Vec<(String, String)> {
    let mut names: Vec<String> = Vec::new();
    names.extend(
        config
            .providers
            .values()
            .filter_map(|p| p.key_env().map(str::to_string)),
    );
    names.push(config.server.token_env.clone());
    names.extend(config.server.tokens.iter().map(|t| t.token_env.clone()));
    names.extend(config.hooks.iter().filter_map(|h| h.secret_env.clone()));
    names.extend(config.github.secret_envs());
    for agent in &config.agents {
        names.extend(agent.notify.iter().map(|t| t.secret_env.clone()));
    }
    names.sort();
    names.dedup();
    let mut held: Vec<(String, String)> = names
        .into_iter()
        .filter_map(|name| std::env::var(&name).ok().map(|v| (name, v)))
        // The API answers a token with surrounding whitespace trimmed (see api::resolve_token).
        .flat_map(|(name, v)| {
            let trimmed = v.trim().to_string();
            [(name.clone(), v), (name, trimmed)]
        })
        .collect();
    if let Some(token) = token_file(&config.resolve_path(&config.runtime.data_dir)) {
        held.push((config.server.token_env.clone(), token));
    }
    held.extend(config.github.key_files(config));
    let (kept, short) = split_too_short(held);
    warn_too_short(&short);
    kept
}

/// Daemon-held values shorter than this are not redacted: replacing every `s` of a
/// one-letter hook secret would mangle every text the daemon keeps. Serve warns instead.
pub(crate) const MIN_REDACTED_LEN: usize = 8;

/// Splits off the values too short to redact; returns the rest and the names of those.
fn split_too_short(held: Vec<(String, String)>) -> (Vec<(String, String)>, Vec<String>) {
    let (kept, short): (Vec<_>, Vec<_>) = held
        .into_iter()
        .partition(|(_, v)| v.chars().count() >= MIN_REDACTED_LEN);
    let mut names: Vec<String> = short.into_iter().map(|(name, _)| name).collect();
    names.dedup();
    (kept, names)
}

/// One WARN line per variable and process, naming it (never its value).
fn warn_too_short(names: &[String]) {
    static WARNED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    for name in names {
        if !warned.contains(name) {
            tracing::warn!(
                variable = %name,
                "the secret in {name} is shorter than {MIN_REDACTED_LEN} characters, too short \
                 to redact without hiding ordinary text, so it is not redacted; use a longer one"
            );
            warned.push(name.clone());
        }
    }
}

/// The token `serve` keeps in `<data_dir>/api-token`, when there is one.
fn token_file(data_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(data_dir.join("api-token")).ok()?;
    let token = text.trim().to_string();
    (!token.is_empty()).then_some(token)
}

/// `runtime.secrets` for substitution, redacting every secret the daemon holds (and, with
/// `[github]`, every GitHub token by its form: installation tokens are minted at run time).
pub fn secrets(config: &Config) -> SecretResolver {
    let secrets = SecretResolver::from_env(config.runtime.secret_names())
        .with_redact_only(daemon_held(config));
    if config.github.is_configured() {
        // Installation tokens are minted while the daemon runs: known by their form.
        secrets.with_redacted_shapes(&nightshift_tools::GITHUB_TOKEN_SHAPES)
    } else {
        secrets
    }
}

/// `Err` naming the first `runtime.secrets` variable that is not set (or empty), as an unset
/// hook or notify secret refuses the start: a tool call using it would fail later, at the
/// worst moment.
pub(crate) fn require_runtime_secrets(config: &Config) -> anyhow::Result<()> {
    for name in config.runtime.secret_names() {
        let set = std::env::var(&name).is_ok_and(|v| !v.is_empty());
        anyhow::ensure!(
            set,
            "invalid config: runtime.secrets names ${name}, which is not set (or empty); export \
             it in the daemon's environment (with systemd: in the EnvironmentFile) or remove it \
             from runtime.secrets"
        );
    }
    Ok(())
}

static LOG_REDACTOR: RwLock<Option<Redactor>> = RwLock::new(None);

/// The redactor [`install_for_logs`] set last (the daemon's, as of its newest reload; the
/// CLI's from its config), or one that redacts nothing before that: what an operator's
/// fork is stored through.
pub fn installed() -> Redactor {
    LOG_REDACTOR
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .unwrap_or_default()
}

/// From now on, `LogWriter` redacts with `redactor` (the last one installed wins).
pub fn install_for_logs(redactor: Redactor) {
    *LOG_REDACTOR.write().unwrap_or_else(|e| e.into_inner()) = Some(redactor);
}

/// A `tracing_subscriber` writer to stderr that redacts each formatted line with the
/// redactor [`install_for_logs`] set (lines written before that are written as they are:
/// the config, and so the secrets, are not known yet).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LogWriter;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;

    fn make_writer(&'a self) -> Self::Writer {
        LogWriter
    }
}

impl Write for LogWriter {
    /// The fmt layer formats an event whole and writes it in one call, so each call is
    /// redacted whole.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let guard = LOG_REDACTOR.read().unwrap_or_else(|e| e.into_inner());
        match guard.as_ref() {
            Some(r) if !r.is_empty() => std::io::stderr().write_all(&r.redact_bytes(buf))?,
            _ => std::io::stderr().write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_too_short_to_redact_are_set_apart_by_name() {
        let held = vec![
            ("HOOK".to_string(), "s".to_string()),
            ("HOOK".to_string(), "s".to_string()),
            ("TOKEN".to_string(), "ns_tok_0123".to_string()),
            ("SEVEN".to_string(), "1234567".to_string()),
        ];
        let (kept, short) = split_too_short(held);
        assert_eq!(kept, vec![("TOKEN".to_string(), "ns_tok_0123".to_string())]);
        assert_eq!(short, vec!["HOOK".to_string(), "SEVEN".to_string()]);
    }
}
