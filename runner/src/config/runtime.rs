//! `[runtime]`: where runs work (the data directory), what their tools may reach (the HTTP
//! allow-list, secrets, the environment of commands), output and time limits, and
//! background commands.
//!
//! What it guarantees: [`RuntimeConfig::validate_secrets`] refuses a secret listed twice or
//! one whose name or hosts are unusable, naming `runtime.secrets`.

use std::path::PathBuf;

use nightshift_tools::SecretSpec;
use serde::Deserialize;

use super::Invalid;

/// The `[runtime]` settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    /// Where runs' workspaces, artifacts and the API token live. Default `./nightshift-data`.
    pub data_dir: PathBuf,
    /// Hosts `http_request` may reach (`api.github.com`, `*.example.com`, `host:port`); an
    /// entry without a port allows only the scheme's default port (443 / 80).
    pub http_allowlist: Vec<String>,
    /// Environment variables tools may use as `{{secret:NAME}}`; their values are redacted
    /// from every tool output. Each is `"NAME"` (may go to any allow-listed host) or
    /// `{ name = "NAME", hosts = ["api.github.com"] }` (only to those hosts; recommended).
    pub secrets: Vec<SecretSpec>,
    /// Extra environment variables passed to commands (besides PATH, HOME, LANG, TERM).
    pub command_env: Vec<String>,
    /// Tool outputs longer than this are cut, the full text kept as an artifact. Default 32768.
    pub output_cap_bytes: usize,
    /// Default timeout of commands, in seconds. Default 120.
    pub command_timeout_seconds: u64,
    /// Background commands (`run_command` with `background: true`).
    pub background: nightshift_agent::task_keeper::BackgroundConfig,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("nightshift-data"),
            http_allowlist: Vec::new(),
            secrets: Vec::new(),
            command_env: Vec::new(),
            output_cap_bytes: 32 * 1024,
            command_timeout_seconds: 120,
            background: nightshift_agent::task_keeper::BackgroundConfig::default(),
        }
    }
}

impl RuntimeConfig {
    /// The names in `secrets` (the environment variables read), in order.
    pub(crate) fn secret_names(&self) -> Vec<String> {
        self.secrets.iter().map(|s| s.name.clone()).collect()
    }

    /// Checks `secrets`: usable names, each once, and well-formed hosts.
    pub(crate) fn validate_secrets(&self) -> Result<(), Invalid> {
        let mut seen = std::collections::BTreeSet::new();
        for spec in &self.secrets {
            spec.validate()?;
            if !seen.insert(spec.name.as_str()) {
                return Err(Invalid::table(
                    "runtime.secrets",
                    format!("`{}` is listed twice; list each secret once", spec.name),
                ));
            }
        }
        Ok(())
    }
}
