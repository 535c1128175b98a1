//! `[server]`: where the HTTP API listens, its main token's variable, the batch limit, and
//! `[[server.tokens]]`.
//!
//! What it guarantees: [`ServerConfig::validate`] refuses a batch limit outside 1 to 10000
//! and token names that are not 1-64 letters, digits, `-`, `_` or `.`, repeat, or take the
//! main token's name (`admin`), each with a sentence saying what to write instead.

use serde::Deserialize;

use super::Invalid;

/// The `[server]` settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Where the HTTP API listens. Default `127.0.0.1:8686`.
    pub address: String,
    /// The environment variable holding the API token. Default `NIGHTSHIFT_API_TOKEN`; when
    /// it is unset, `serve` makes a token and keeps it in `<runtime.data_dir>/api-token`.
    pub token_env: String,
    /// The most runs one `POST /v1/runs:batch` may hold, 1 to 10000. Default 1000.
    pub max_batch_runs: usize,
    /// `[[server.tokens]]`: more API tokens, each with a name (what the audit trail records
    /// as who acted) and a role. The token above is `admin`, an operator.
    pub tokens: Vec<NamedToken>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            address: "127.0.0.1:8686".into(),
            token_env: "NIGHTSHIFT_API_TOKEN".into(),
            max_batch_runs: nightshift_scheduler::DEFAULT_BATCH_LIMIT,
            tokens: Vec::new(),
        }
    }
}

/// One `[[server.tokens]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedToken {
    /// 1-64 letters, digits, `-`, `_` or `.`; unique, and not `admin`.
    pub name: String,
    /// The environment variable holding the token (checked at start).
    pub token_env: String,
    /// `operator` (everything the API does) or `read_only` (only `GET`s).
    pub role: TokenRole,
}

impl ServerConfig {
    /// Checks the batch limit and the named tokens.
    pub(crate) fn validate(&self) -> Result<(), Invalid> {
        if !(1..=10_000).contains(&self.max_batch_runs) {
            return Err(Invalid::value(
                "server.max_batch_runs",
                format!("is {}; use 1 to 10000", self.max_batch_runs),
            ));
        }
        validate_tokens(&self.tokens)
    }
}

/// Token names are 1-64 letters, digits, `-`, `_` or `.`, unique, and never `admin` (the
/// main token's name).
fn validate_tokens(tokens: &[NamedToken]) -> Result<(), Invalid> {
    let at = "server.tokens";
    let mut seen = std::collections::HashSet::new();
    for t in tokens {
        let fine = (1..=64).contains(&t.name.len())
            && t.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !fine {
            return Err(Invalid::table(
                at,
                format!(
                    "name '{}' is not allowed; use 1-64 letters, digits, '-', '_' or '.'",
                    t.name
                ),
            ));
        }
        if t.name == "admin" {
            return Err(Invalid::table(
                at,
                "'admin' is the name of the main token (server.token_env); give this one \
                 another name",
            ));
        }
        if !seen.insert(t.name.as_str()) {
            return Err(Invalid::table(
                at,
                format!("two tokens are named '{}'; names must be unique", t.name),
            ));
        }
    }
    Ok(())
}

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenRole {
    /// Every request: reads, runs, approvals, cancels, schedules.
    Operator,
    /// Only reads (`GET`): dashboards, monitoring, reporting.
    ReadOnly,
}
