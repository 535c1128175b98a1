//! The configuration of one model provider, as it appears in the daemon's config file:
//!
//! ```toml
//! kind = "anthropic"                 # anthropic | openai | scripted
//! base_url = "https://api.anthropic.com"   # optional
//! api_key_env = "ANTHROPIC_API_KEY"  # the NAME of the variable holding the key
//! stream = true
//! retry = { max_attempts = 5, base_delay_ms = 500, max_delay_ms = 30000 }
//! breaker = { failure_threshold = 5, cooldown_ms = 30000 }
//! timeouts = { connect_ms = 10000, read_idle_ms = 300000, total_ms = 900000 }
//! ```
//!
//! Guarantees:
//! - Unknown keys are rejected (`deny_unknown_fields`), at every level.
//! - [`ProviderConfig::validate`] names the offending key in every message, and never echoes
//!   the value of `api_key_env` (someone may have pasted the key itself there).
//! - Keys are only ever read from the environment, by the name given; the value is kept in an
//!   [`ApiKey`], which never prints.
//! - Defaults: `api_key_env` = `ANTHROPIC_API_KEY` for `anthropic`, none for `openai` (no
//!   `Authorization` header, for local servers); base URL from config, else
//!   `ANTHROPIC_BASE_URL` / `OPENAI_BASE_URL`, else the public endpoint.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::anthropic::{AnthropicOptions, AnthropicProvider};
use crate::client::ClientConfig;
use crate::http::{ApiKey, HttpTimeouts, SetupError};
use crate::openai::{OpenAiOptions, OpenAiProvider};
use crate::provider::Provider;
use crate::scripted::ScriptedProvider;

/// Which API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ProviderKind {
    #[serde(rename = "anthropic")]
    Anthropic,
    #[serde(rename = "openai")]
    OpenAi,
    #[serde(rename = "scripted")]
    Scripted,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::OpenAi => "openai",
            ProviderKind::Scripted => "scripted",
        }
    }
}

/// One provider entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The name of the environment variable that holds the API key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// The script file (kind `scripted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<PathBuf>,
    #[serde(default = "default_stream")]
    pub stream: bool,
    #[serde(default)]
    pub retry: RetryConfig,
    #[serde(default)]
    pub breaker: BreakerConfig,
    #[serde(default)]
    pub timeouts: TimeoutConfig,
}

fn default_stream() -> bool {
    true
}

/// Retry knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    pub max_attempts: u32,
    pub base_delay_ms: u64,
    pub max_delay_ms: u64,
    pub max_retry_after_ms: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base_delay_ms: 500,
            max_delay_ms: 30_000,
            max_retry_after_ms: 300_000,
        }
    }
}

/// Circuit-breaker knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerConfig {
    pub failure_threshold: u32,
    pub cooldown_ms: u64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failure_threshold: 5,
            cooldown_ms: 30_000,
        }
    }
}

/// Network timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimeoutConfig {
    pub connect_ms: u64,
    pub read_idle_ms: u64,
    pub total_ms: u64,
}

impl Default for TimeoutConfig {
    fn default() -> Self {
        let d = HttpTimeouts::default();
        Self {
            connect_ms: d.connect.as_millis() as u64,
            read_idle_ms: d.read_idle.as_millis() as u64,
            total_ms: d.total.as_millis() as u64,
        }
    }
}

/// A configuration problem, naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// The config error for a provider that could not be set up, naming the key to fix.
fn build_error(e: SetupError) -> ConfigError {
    let key = match e {
        SetupError::KeyNotAHeader => "api_key_env",
        SetupError::Client(_) => "kind",
    };
    ConfigError::new(key, e.to_string())
}

fn is_env_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl ProviderConfig {
    /// A config of `kind` with every other field at its default.
    pub fn new(kind: ProviderKind) -> Self {
        Self {
            kind,
            base_url: None,
            api_key_env: None,
            script: None,
            stream: true,
            retry: RetryConfig::default(),
            breaker: BreakerConfig::default(),
            timeouts: TimeoutConfig::default(),
        }
    }

    /// Checks everything that can be checked without the network or the environment.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let kind = self.kind.as_str();
        if self.kind == ProviderKind::Scripted {
            if self.script.is_none() {
                return Err(ConfigError::new(
                    "script",
                    "required when kind = \"scripted\"",
                ));
            }
            for (key, set) in [
                ("base_url", self.base_url.is_some()),
                ("api_key_env", self.api_key_env.is_some()),
            ] {
                if set {
                    return Err(ConfigError::new(key, "not used when kind = \"scripted\""));
                }
            }
        } else if self.script.is_some() {
            return Err(ConfigError::new(
                "script",
                format!("only used when kind = \"scripted\", not \"{kind}\""),
            ));
        }
        if let Some(url) = &self.base_url
            && (!(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 10)
        {
            return Err(ConfigError::new(
                "base_url",
                format!("must be an http:// or https:// URL, got {url:?}"),
            ));
        }
        if let Some(var) = &self.api_key_env
            && !is_env_name(var)
        {
            return Err(ConfigError::new(
                "api_key_env",
                "must be the NAME of an environment variable (letters, digits and _, \
                 e.g. ANTHROPIC_API_KEY), not the key itself",
            ));
        }
        let r = &self.retry;
        if r.max_attempts == 0 {
            return Err(ConfigError::new("retry.max_attempts", "must be at least 1"));
        }
        if r.base_delay_ms > r.max_delay_ms {
            return Err(ConfigError::new(
                "retry.base_delay_ms",
                format!(
                    "must not exceed retry.max_delay_ms ({} > {})",
                    r.base_delay_ms, r.max_delay_ms
                ),
            ));
        }
        if self.breaker.failure_threshold == 0 {
            return Err(ConfigError::new(
                "breaker.failure_threshold",
                "must be at least 1",
            ));
        }
        let t = &self.timeouts;
        for (key, v) in [
            ("timeouts.connect_ms", t.connect_ms),
            ("timeouts.read_idle_ms", t.read_idle_ms),
            ("timeouts.total_ms", t.total_ms),
        ] {
            if v == 0 {
                return Err(ConfigError::new(key, "must be more than 0"));
            }
        }
        Ok(())
    }

    /// The variable the key is read from (with the per-kind default).
    pub fn key_env(&self) -> Option<&str> {
        match (&self.api_key_env, self.kind) {
            (Some(v), _) => Some(v),
            (None, ProviderKind::Anthropic) => Some("ANTHROPIC_API_KEY"),
            (None, _) => None,
        }
    }

    /// The base URL after the environment fallback (none for `scripted`).
    pub fn resolved_base_url(&self) -> Option<String> {
        let configured = self.base_url.as_deref();
        match self.kind {
            ProviderKind::Anthropic => Some(AnthropicProvider::resolve_base_url(configured)),
            ProviderKind::OpenAi => Some(OpenAiProvider::resolve_base_url(configured)),
            ProviderKind::Scripted => None,
        }
    }

    pub fn http_timeouts(&self) -> HttpTimeouts {
        HttpTimeouts {
            connect: Duration::from_millis(self.timeouts.connect_ms),
            read_idle: Duration::from_millis(self.timeouts.read_idle_ms),
            total: Duration::from_millis(self.timeouts.total_ms),
        }
    }

    /// The retry and breaker knobs for a [`crate::ModelClient`].
    pub fn client_config(&self) -> ClientConfig {
        ClientConfig {
            max_attempts: self.retry.max_attempts,
            base_delay: Duration::from_millis(self.retry.base_delay_ms),
            max_delay: Duration::from_millis(self.retry.max_delay_ms),
            max_retry_after: Duration::from_millis(self.retry.max_retry_after_ms),
            jitter: true,
            failure_threshold: self.breaker.failure_threshold,
            cooldown: Duration::from_millis(self.breaker.cooldown_ms),
        }
    }

    fn api_key(&self) -> Result<Option<ApiKey>, ConfigError> {
        let Some(var) = self.key_env() else {
            return Ok(None);
        };
        ApiKey::from_env(var).map(Some).ok_or_else(|| {
            ConfigError::new(
                "api_key_env",
                format!("environment variable {var} is not set (or is empty)"),
            )
        })
    }

    /// Validates, reads the key from the environment and builds the provider.
    pub fn build_provider(&self) -> Result<Arc<dyn Provider>, ConfigError> {
        self.validate()?;
        let base_url = self.resolved_base_url().unwrap_or_default();
        let timeouts = self.http_timeouts();
        let provider: Arc<dyn Provider> = match self.kind {
            ProviderKind::Anthropic => Arc::new(
                AnthropicProvider::new(AnthropicOptions {
                    base_url,
                    api_key: self
                        .api_key()?
                        .expect("anthropic always has a key variable"),
                    stream: self.stream,
                    timeouts,
                })
                .map_err(build_error)?,
            ),
            ProviderKind::OpenAi => Arc::new(
                OpenAiProvider::new(OpenAiOptions {
                    base_url,
                    api_key: self.api_key()?,
                    stream: self.stream,
                    timeouts,
                })
                .map_err(build_error)?,
            ),
            ProviderKind::Scripted => {
                let path = self.script.as_ref().expect("validated");
                Arc::new(
                    ScriptedProvider::from_file(path)
                        .map_err(|e| ConfigError::new("script", e.to_string()))?,
                )
            }
        };
        Ok(provider)
    }
}
