//! Where an agent's run notices go: `[[agents.notify]]`.
//!
//! Each entry is one URL that receives an HMAC-signed JSON POST when a run of the agent
//! reaches a terminal state. The signing secret is referenced by the NAME of an environment
//! variable (`secret_env`), never written in the config. Delivery itself (the outbox, retries,
//! signing) lives with the daemon; this module only says what a valid entry is.

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;

/// One notify URL of an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyTarget {
    /// Where the notice is POSTed: an `http://` or `https://` URL.
    pub url: String,
    /// The environment variable holding the HMAC-SHA256 signing secret.
    pub secret_env: String,
    /// Tries before the delivery is given up as `dead`. Default 12.
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    /// The delay before the first retry, doubled on each further one (with jitter), in ms.
    /// Default 5000.
    #[serde(default = "default_retry_base_ms")]
    pub retry_base_ms: u64,
    /// No retry waits longer than this, in ms. Default 3600000 (one hour).
    #[serde(default = "default_retry_cap_ms")]
    pub retry_cap_ms: u64,
    /// How long one POST may take, in ms. Default 10000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_max_attempts() -> u32 {
    12
}

fn default_retry_base_ms() -> u64 {
    5_000
}

fn default_retry_cap_ms() -> u64 {
    3_600_000
}

fn default_timeout_ms() -> u64 {
    10_000
}

impl NotifyTarget {
    /// A target with the default retry policy.
    pub fn new(url: impl Into<String>, secret_env: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            secret_env: secret_env.into(),
            max_attempts: default_max_attempts(),
            retry_base_ms: default_retry_base_ms(),
            retry_cap_ms: default_retry_cap_ms(),
            timeout_ms: default_timeout_ms(),
        }
    }
}

/// Checks an agent's notify entries; the error names the agent, the entry and the key.
pub(crate) fn validate(agent: &str, targets: &[NotifyTarget]) -> Result<(), ConfigError> {
    for (i, t) in targets.iter().enumerate() {
        let key = format!("agents.{agent}.notify[{i}]");
        let at = |field: &str| format!("{key}.{field}");
        let parsed = url::Url::parse(&t.url).map_err(|e| {
            ConfigError::value(
                at("url"),
                format!("is not a valid URL ({e}); use http(s)://host/path"),
            )
        })?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(ConfigError::value(
                at("url"),
                format!(
                    "must be an http:// or https:// URL with a host (got scheme '{}')",
                    parsed.scheme()
                ),
            ));
        }
        if targets[..i].iter().any(|other| other.url == t.url) {
            return Err(ConfigError::value(
                at("url"),
                "repeats an earlier notify URL of this agent; list each URL once",
            ));
        }
        let env_ok = !t.secret_env.is_empty()
            && !t.secret_env.starts_with(|c: char| c.is_ascii_digit())
            && t.secret_env
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !env_ok {
            return Err(ConfigError::value(
                at("secret_env"),
                "must be the NAME of an environment variable (letters, digits, '_'), like \
                 NOTIFY_SECRET; the secret itself never goes in the config",
            ));
        }
        if !(1..=100).contains(&t.max_attempts) {
            return Err(ConfigError::value(
                at("max_attempts"),
                "must be between 1 and 100",
            ));
        }
        if t.retry_base_ms == 0 || t.retry_cap_ms < t.retry_base_ms {
            return Err(ConfigError::table(
                key,
                "retry_base_ms must be at least 1 and retry_cap_ms at least retry_base_ms",
            ));
        }
        if !(100..=300_000).contains(&t.timeout_ms) {
            return Err(ConfigError::value(
                at("timeout_ms"),
                "must be between 100 and 300000",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(t: NotifyTarget) -> Result<(), String> {
        validate("a", &[t]).map_err(|e| e.to_string())
    }

    #[test]
    fn good_entries_pass_and_bad_ones_name_the_key() {
        assert!(
            check(NotifyTarget::new(
                "https://hooks.example.com/x",
                "NOTIFY_SECRET"
            ))
            .is_ok()
        );
        assert!(check(NotifyTarget::new("http://127.0.0.1:9000/hook", "S1")).is_ok());
        let err = check(NotifyTarget::new("ftp://example.com/x", "S")).unwrap_err();
        assert!(
            err.contains("agents.a.notify[0].url") && err.contains("http"),
            "{err}"
        );
        let err = check(NotifyTarget::new("not a url", "S")).unwrap_err();
        assert!(err.contains("agents.a.notify[0].url"), "{err}");
        let err = check(NotifyTarget::new("https://example.com", "s3cr3t value!")).unwrap_err();
        assert!(
            err.contains("secret_env") && !err.contains("s3cr3t"),
            "{err}"
        );
        let mut t = NotifyTarget::new("https://example.com", "S");
        t.max_attempts = 0;
        assert!(check(t).unwrap_err().contains("max_attempts"));
        let mut t = NotifyTarget::new("https://example.com", "S");
        t.retry_cap_ms = 1;
        assert!(check(t).unwrap_err().contains("retry_cap_ms"));
        let twice = [
            NotifyTarget::new("https://example.com/a", "S"),
            NotifyTarget::new("https://example.com/a", "T"),
        ];
        let err = validate("a", &twice).unwrap_err().to_string();
        assert!(err.contains("notify[1].url repeats"), "{err}");
    }
}
