//! `[agents.github]`: what an agent does on GitHub besides the tools it calls — the check run
//! it keeps on the pull request it was started for, and the review verdicts it may post.
//!
//! This module only says what a valid table is; the daemon makes the check runs (created
//! `in_progress` when a run with a pull request starts, completed from the run's end in the
//! outbox) and the tools enforce the verdicts.

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;

/// The review verdicts GitHub knows.
pub const REVIEW_EVENTS: [&str; 3] = ["COMMENT", "REQUEST_CHANGES", "APPROVE"];

/// The most characters GitHub allows in a check run's name.
const MAX_CHECK_NAME: usize = 100;

/// `[agents.github]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentGithub {
    /// The name of a check run kept on the head commit of the pull request a run was started
    /// for (`in_progress` while the run works, completed with its outcome when it ends — also
    /// when it fails, is cancelled or is superseded). Needs a GitHub App with `checks: write`.
    /// Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_run: Option<String>,
    /// The verdicts `github_review` may post for this agent (`COMMENT`, `REQUEST_CHANGES`,
    /// `APPROVE`). Default: `[github] review_events` (itself `["COMMENT"]` by default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review_events: Option<Vec<String>>,
}

impl AgentGithub {
    pub fn is_default(&self) -> bool {
        *self == AgentGithub::default()
    }

    /// Checks the table of agent `agent`; the error names the key.
    pub fn validate(&self, agent: &str) -> Result<(), ConfigError> {
        if let Some(name) = &self.check_run {
            let name_ok = !name.trim().is_empty()
                && name.chars().count() <= MAX_CHECK_NAME
                && !name.chars().any(char::is_control);
            if !name_ok {
                return Err(ConfigError::value(
                    format!("agents.{agent}.github.check_run"),
                    format!(
                        "is {name:?}; name the check run as it should appear on the pull \
                         request, 1-{MAX_CHECK_NAME} characters, like \"Nightshift review\""
                    ),
                ));
            }
        }
        if let Some(events) = &self.review_events {
            check_review_events(&format!("agents.{agent}.github.review_events"), events)?;
        }
        Ok(())
    }
}

/// Checks a list of review verdicts at key `at`.
pub fn check_review_events(at: &str, events: &[String]) -> Result<(), ConfigError> {
    for event in events {
        if !REVIEW_EVENTS.contains(&event.as_str()) {
            return Err(ConfigError::value(
                at,
                format!(
                    "lists {event:?}, which is not a review verdict; use COMMENT, \
                     REQUEST_CHANGES or APPROVE"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_verdicts_are_checked_naming_the_key() {
        let ok = AgentGithub {
            check_run: Some("Nightshift review".into()),
            review_events: Some(vec!["COMMENT".into(), "REQUEST_CHANGES".into()]),
        };
        assert!(ok.validate("bot").is_ok());
        for (bad, says) in [
            (
                AgentGithub {
                    check_run: Some(" ".into()),
                    ..AgentGithub::default()
                },
                "agents.bot.github.check_run is \" \"",
            ),
            (
                AgentGithub {
                    check_run: Some("x".repeat(101)),
                    ..AgentGithub::default()
                },
                "1-100 characters",
            ),
            (
                AgentGithub {
                    review_events: Some(vec!["LGTM".into()]),
                    ..AgentGithub::default()
                },
                "agents.bot.github.review_events lists \"LGTM\"",
            ),
        ] {
            let e = bad.validate("bot").unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }
}
