//! [`Invalid`]: why a table of the config is refused, as a type.
//!
//! What it guarantees: every refusal names the key (`server.max_batch_runs`,
//! `github.apps[ci]`, `sandbox.path`, …) and says what to write instead, in the same words
//! whether it was found here or by the crate that owns the rule; [`super::Config::validate`]
//! reports each as `invalid config: …`. Nothing is checked here: this is only the shape of
//! the answer.

use nightshift_agent::ConfigError;
use nightshift_github::BaseUrlError;
use nightshift_sandbox::policy::Exposure;
use nightshift_telemetry::traces::TracesError;
use nightshift_tools::SecretSpecError;

/// A refused value or table of the config; `Display` is the sentence a user reads.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Invalid {
    /// The value at `at` (`server.max_batch_runs`) is refused; `rule` follows the key
    /// (`is 0; use 1 to 10000`).
    #[error("{at} {rule}")]
    Value { at: String, rule: String },
    /// The table or list at `at` (`server.tokens`) is refused; `problem` says how and what
    /// to do.
    #[error("{at}: {problem}")]
    Table { at: String, problem: String },
    /// `github.base_url`, as the GitHub client checks it.
    #[error("github.{0}")]
    BaseUrl(#[from] BaseUrlError),
    /// A `runtime.secrets` entry, as the tools check it.
    #[error("runtime.secrets: {0}")]
    Secret(#[from] SecretSpecError),
    /// A rule the agent crate keeps (`github.review_events`).
    #[error(transparent)]
    Agent(#[from] ConfigError),
    /// `telemetry.otlp_endpoint`, as the trace exporter checks it.
    #[error(transparent)]
    Traces(#[from] TracesError),
    /// A `[sandbox]` grant that would expose the data directory or the database.
    #[error(transparent)]
    Exposure(#[from] Exposure),
}

impl Invalid {
    /// The value at `at` is refused because of `rule`.
    pub(crate) fn value(at: impl Into<String>, rule: impl Into<String>) -> Invalid {
        Invalid::Value {
            at: at.into(),
            rule: rule.into(),
        }
    }

    /// The table at `at` is refused because of `problem`.
    pub(crate) fn table(at: impl Into<String>, problem: impl Into<String>) -> Invalid {
        Invalid::Table {
            at: at.into(),
            problem: problem.into(),
        }
    }
}
