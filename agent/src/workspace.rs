//! `[agents.workspace]`: how a run's workspace is prepared before its first model call — a
//! git checkout (`checkout = { repo, ref, depth }`, templates over the trigger's payload)
//! and `setup` commands run in the sandbox inside it.
//!
//! This module only says what a valid table is. The webhook intake renders the templates
//! over the delivery's payload when it enqueues a run (other runs render them over their
//! context); the daemon checks the repository out with the GitHub credentials, runs the
//! setup, and logs the commit, so every later job of the run — on any daemon — works on that
//! same commit.

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;

/// `[agents.workspace]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentWorkspace {
    /// The repository to check out into the run's workspace, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkout: Option<Checkout>,
    /// Shell commands run one after another in the workspace (in the sandbox, like
    /// `run_command`) after each fresh checkout; the first that fails fails the run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub setup: Vec<String>,
    /// How long each setup command may take, in seconds. Default 600.
    #[serde(
        default = "default_setup_timeout",
        skip_serializing_if = "is_default_setup_timeout"
    )]
    pub setup_timeout_seconds: u64,
}

/// `checkout = { repo = "…", ref = "…", depth = 1 }`: templates (minijinja) over the
/// trigger's payload, like a hook route's prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkout {
    /// `owner/name`, e.g. `{{ repository.full_name }}`.
    pub repo: String,
    /// A commit SHA, branch or tag, e.g. `{{ pull_request.head.sha }}`.
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// Commits of history to fetch (`git fetch --depth`); default: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
}

impl Default for AgentWorkspace {
    fn default() -> Self {
        AgentWorkspace {
            checkout: None,
            setup: Vec::new(),
            setup_timeout_seconds: default_setup_timeout(),
        }
    }
}

fn default_setup_timeout() -> u64 {
    600
}

fn is_default_setup_timeout(v: &u64) -> bool {
    *v == default_setup_timeout()
}

impl AgentWorkspace {
    pub fn is_default(&self) -> bool {
        *self == AgentWorkspace::default()
    }

    /// Checks the table of agent `agent`; the error names the key.
    pub fn validate(&self, agent: &str) -> Result<(), ConfigError> {
        let at = |key: &str| format!("agents.{agent}.workspace.{key}");
        if let Some(c) = &self.checkout {
            if c.repo.trim().is_empty() {
                return Err(ConfigError::value(
                    at("checkout.repo"),
                    "is empty; name the repository as owner/name or a template like \
                     \"{{ repository.full_name }}\"",
                ));
            }
            if c.git_ref.trim().is_empty() {
                return Err(ConfigError::value(
                    at("checkout.ref"),
                    "is empty; give a commit, branch or tag, or a template like \
                     \"{{ pull_request.head.sha }}\"",
                ));
            }
            if c.depth == Some(0) {
                return Err(ConfigError::value(
                    at("checkout.depth"),
                    "must be at least 1 (leave it out for the whole history)",
                ));
            }
        }
        if let Some(i) = self.setup.iter().position(|c| c.trim().is_empty()) {
            return Err(ConfigError::value(
                at(&format!("setup[{i}]")),
                "is empty; write a shell command, like \"cargo fetch\"",
            ));
        }
        // Setup runs as run_command does: no longer than a foreground command may.
        let longest = nightshift_tools::Limits::default()
            .max_command_timeout
            .as_secs();
        if !(1..=longest).contains(&self.setup_timeout_seconds) {
            return Err(ConfigError::value(
                at("setup_timeout_seconds"),
                format!(
                    "is {}; it must be 1 to {longest} (the longest a command may run in the \
                     foreground); leave longer work to the agent, in a background command",
                    self.setup_timeout_seconds
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_table_is_checked_naming_the_key() {
        let ok: AgentWorkspace = toml::from_str(
            "checkout = { repo = \"{{ repository.full_name }}\", ref = \"{{ pull_request.head.sha }}\", depth = 1 }\n\
             setup = [\"cargo fetch\"]\n",
        )
        .unwrap();
        assert!(ok.validate("bot").is_ok());
        assert_eq!(ok.checkout.as_ref().unwrap().depth, Some(1));
        assert_eq!(ok.setup_timeout_seconds, 600);
        for (text, says) in [
            (
                "checkout = { repo = \"\", ref = \"main\" }",
                "agents.bot.workspace.checkout.repo is empty",
            ),
            (
                "checkout = { repo = \"o/r\", ref = \"main\", depth = 0 }",
                "agents.bot.workspace.checkout.depth must be at least 1",
            ),
            (
                "setup = [\"make\", \" \"]",
                "agents.bot.workspace.setup[1] is empty",
            ),
        ] {
            let w: AgentWorkspace = toml::from_str(text).unwrap();
            let e = w.validate("bot").unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
        assert!(toml::from_str::<AgentWorkspace>("checkout = { repo = \"o/r\" }").is_err());
        assert!(
            AgentWorkspace::default().validate("bot").is_ok(),
            "an agent without the table is valid"
        );
    }
}
