//! Which tool calls need a human's approval, and how a call is bound to its decision.
//!
//! A call needs approval when its tool is marked `approval = "required"` in the agent's
//! `tool_overrides`, or when an `[[agents.approvals.rules]]` entry matches it (tool name, and
//! optionally a substring of its JSON input, e.g. `git push`). Such a call never starts before
//! a decision: the run parks as `awaiting_approval` holding no worker. The decision is bound
//! to the exact call by its id and a hash of its input, applied once (an `approval_decided`
//! event in the run's log), and a timeout denies.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::ConfigError;

/// `[agents.approvals]`: the timeout and the rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalPolicy {
    /// How long a call waits for a decision before it is denied. Default 24 hours.
    pub timeout_seconds: u64,
    /// Calls matched by any rule need approval.
    pub rules: Vec<ApprovalRule>,
}

impl Default for ApprovalPolicy {
    fn default() -> Self {
        Self {
            timeout_seconds: 24 * 3600,
            rules: Vec::new(),
        }
    }
}

/// One rule: calls of `tool` (whose input contains `input_contains`, when given).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRule {
    pub tool: String,
    #[serde(default)]
    pub input_contains: Option<String>,
}

impl ApprovalPolicy {
    pub(crate) fn validate(&self, agent: &str) -> Result<(), ConfigError> {
        if !(1..=30 * 24 * 3600).contains(&self.timeout_seconds) {
            return Err(ConfigError::value(
                format!("agents.{agent}.approvals.timeout_seconds"),
                "must be 1 to 2592000 (30 days)",
            ));
        }
        if self.rules.iter().any(|rule| rule.tool.trim().is_empty()) {
            return Err(ConfigError::table(
                format!("agents.{agent}.approvals.rules"),
                "every rule needs a tool name",
            ));
        }
        Ok(())
    }

    /// True when a rule matches the call.
    pub fn matches(&self, name: &str, input: &serde_json::Value) -> bool {
        self.rules.iter().any(|r| {
            r.tool == name
                && r.input_contains
                    .as_deref()
                    .is_none_or(|needle| input.to_string().contains(needle))
        })
    }
}

/// The hash an approval is bound to: SHA-256 of the call's input as JSON.
pub fn input_hash(input: &serde_json::Value) -> String {
    let digest = Sha256::digest(input.to_string().as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the model reads when its call was denied.
pub fn denied_notice(reason: Option<&str>) -> String {
    match reason {
        Some(r) if !r.trim().is_empty() => {
            format!("denied: this tool call was not approved, so it was not made. Reason: {r}")
        }
        _ => "denied: this tool call was not approved, so it was not made.".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rules_match_by_tool_and_input() {
        let policy = ApprovalPolicy {
            rules: vec![
                ApprovalRule {
                    tool: "post_review".into(),
                    input_contains: None,
                },
                ApprovalRule {
                    tool: "run_command".into(),
                    input_contains: Some("git push".into()),
                },
            ],
            ..ApprovalPolicy::default()
        };
        assert!(policy.matches("post_review", &json!({"body": "x"})));
        assert!(policy.matches("run_command", &json!({"command": "git push origin main"})));
        assert!(!policy.matches("run_command", &json!({"command": "git status"})));
        assert!(!policy.matches("read_file", &json!({})));
    }

    #[test]
    fn the_hash_binds_the_exact_input() {
        let a = input_hash(&json!({"command": "git push"}));
        assert_eq!(a, input_hash(&json!({"command": "git push"})));
        assert_ne!(a, input_hash(&json!({"command": "git push --force"})));
        assert_eq!(a.len(), 64);
    }
}
