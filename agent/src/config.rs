//! Agent definitions, read from `[[agents]]` in `nightshift.toml`: the model, the system
//! prompt, the tools, budgets, the context policy and fallback models. Every field but the
//! name and model is optional; [`AgentConfig::validate`] explains any value it refuses with a
//! [`ConfigError`] naming the key (`agents.NAME.…`) and saying what is allowed.
//!
//! A run records the [`AgentDef::hash`] of the definition it started with.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::pricing::{ModelPrices, PriceTable, Pricing};
use sha2::{Digest, Sha256};

/// A value of an `[[agents]]` entry (or of its `wakeups`, `approvals` or `notify` tables) that
/// is refused. `Display` names the key and says what is allowed.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The agent's name is not a usable name.
    #[error("agents: name '{name}' is not allowed; use 1-64 letters, digits, '-', '_' or '.'")]
    BadName { name: String },
    /// The value at key `at` (like `agents.a.max_tokens`) is refused; `rule` says what is
    /// allowed, worded to follow the key ("must be at least 1").
    #[error("{at} {rule}")]
    Value { at: String, rule: String },
    /// The keys of the table at `at` do not fit together (like `system` and `system_file`
    /// both set); `problem` says how and what to do.
    #[error("{at}: {problem}")]
    Table { at: String, problem: String },
    /// `system_file` could not be read.
    #[error("agents.{agent}.system_file: cannot read {}: {source}", path.display())]
    SystemFile {
        agent: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ConfigError {
    /// The value at `at` is refused because of `rule`.
    pub(crate) fn value(at: impl Into<String>, rule: impl Into<String>) -> Self {
        ConfigError::Value {
            at: at.into(),
            rule: rule.into(),
        }
    }

    /// The table at `at` is refused because of `problem`.
    pub(crate) fn table(at: impl Into<String>, problem: impl Into<String>) -> Self {
        ConfigError::Table {
            at: at.into(),
            problem: problem.into(),
        }
    }
}

/// One `[[agents]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The name runs refer to.
    pub name: String,
    /// The name of a `[providers.NAME]` entry.
    pub provider: String,
    /// The model id sent to the provider.
    pub model: String,
    /// The system prompt, inline. Exclusive with `system_file`.
    #[serde(default)]
    pub system: Option<String>,
    /// The system prompt, from a file (relative to the config file).
    #[serde(default)]
    pub system_file: Option<PathBuf>,
    /// Built-in and command tool names this agent may call.
    #[serde(default)]
    pub tools: Vec<String>,
    /// Per-tool changes: description, timeout, durability class.
    #[serde(default)]
    pub tool_overrides: BTreeMap<String, nightshift_tools::ToolOverride>,
    /// The most tokens one reply may have. Default 4096.
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    /// Extended thinking: `{ type = "enabled", budget_tokens = N }` (Anthropic: N at least
    /// 1024 and below `max_tokens`), `{ type = "adaptive" }` or `{ type = "disabled" }`. Sent
    /// to the Messages API as `thinking`, to an OpenAI-compatible server as DeepSeek's
    /// `thinking: {"type": …}`. Default: not sent (the provider's default). Left out of the
    /// definition's hash when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<nightshift_llm::Thinking>,
    /// How much effort the model spends: `minimal`, `low`, `medium`, `high`, `xhigh` or `max`
    /// (which a model takes is the provider's call). Sent to the Messages API as
    /// `output_config.effort`, to an OpenAI-compatible server as `reasoning_effort`. Default:
    /// not sent. Left out of the definition's hash when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<nightshift_llm::Effort>,
    #[serde(default)]
    pub budgets: Budgets,
    #[serde(default)]
    pub context: ContextPolicy,
    /// Models tried in order when the main one gives up (`provider/model` or `model` for the
    /// same provider).
    #[serde(default)]
    pub fallback: Vec<String>,
    /// The main model's prices, USD per million tokens, instead of the built-in price table's
    /// (see [`crate::pricing`]). Default: the table's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pricing: Option<Pricing>,
    /// Limits on `schedule_wakeup` (enable it by listing it in `tools`).
    #[serde(default)]
    pub wakeups: crate::wakeup::WakeupPolicy,
    /// Which tool calls wait for a human's approval, and for how long.
    #[serde(default)]
    pub approvals: crate::approval::ApprovalPolicy,
    /// URLs that get a signed notice when a run of this agent ends (`[[agents.notify]]`).
    /// Left out of the definition's hash when empty, so adding the field changed no hash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notify: Vec<crate::notify::NotifyTarget>,
    /// How long the model may stay unreachable (retries used up, circuit open) before a run
    /// fails, in seconds. Until then a run waits, holding no worker slot and spending no job
    /// attempt, and tries again when the provider is expected back. Default 3600 (left out
    /// of the definition's hash at the default, so adding the field changed no hash).
    #[serde(
        default = "default_outage_limit",
        skip_serializing_if = "is_default_outage_limit"
    )]
    pub outage_limit_seconds: u64,
    /// How this agent's commands are sandboxed (`[agents.sandbox]`). Left out of the
    /// definition's hash at the default, so adding the field changed no hash.
    #[serde(default, skip_serializing_if = "AgentSandbox::is_default")]
    pub sandbox: AgentSandbox,
    /// What the agent does on GitHub besides its tools (`[agents.github]`: a check run, the
    /// review verdicts it may post). Left out of the definition's hash at the default.
    #[serde(
        default,
        skip_serializing_if = "crate::github::AgentGithub::is_default"
    )]
    pub github: crate::github::AgentGithub,
    /// How a run's workspace is prepared (`[agents.workspace]`: a checkout, setup commands).
    /// Left out of the definition's hash at the default.
    #[serde(
        default,
        skip_serializing_if = "crate::workspace::AgentWorkspace::is_default"
    )]
    pub workspace: crate::workspace::AgentWorkspace,
    /// The MCP servers whose tools this agent may call (`[[agents.mcp]]`), offered as
    /// `mcp__<server>__<tool>`. Left out of the definition's hash when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp: Vec<nightshift_mcp::McpServerConfig>,
    /// Skill directories (each with a `SKILL.md`), relative to the config file: named in the
    /// system prompt, read with `load_skill`. Left out of the definition's hash when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<PathBuf>,
}

/// `[agents.sandbox]`: what this agent's commands (`run_command`, background tasks, command
/// tools) may reach besides the daemon-wide `[sandbox]` settings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSandbox {
    /// `on` (default): out through the sandbox's egress proxy only (public addresses on
    /// `[sandbox] ports`, and `[sandbox] connect`). `off`: a network namespace of their own,
    /// with nothing reachable (`http_request` still works: the daemon makes those requests).
    /// `host`: the host's network as it is, TCP connects limited to `[sandbox] ports`.
    pub network: SandboxNetwork,
}

impl AgentSandbox {
    pub fn is_default(&self) -> bool {
        *self == AgentSandbox::default()
    }
}

/// Whether an agent's commands may use the network.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxNetwork {
    #[default]
    On,
    Off,
    Host,
}

fn default_max_tokens() -> u32 {
    4096
}

/// An hour: a provider outage shorter than this never fails a run.
pub const DEFAULT_OUTAGE_LIMIT_SECONDS: u64 = 3600;

fn default_outage_limit() -> u64 {
    DEFAULT_OUTAGE_LIMIT_SECONDS
}

fn is_default_outage_limit(v: &u64) -> bool {
    *v == DEFAULT_OUTAGE_LIMIT_SECONDS
}

/// Limits that end a run. All are counted durably in the run, so they hold across resumes
/// and crashes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Budgets {
    /// The round cap: model calls per run. Reaching it ends the run as `max_rounds`, with its
    /// work kept. Default 50.
    pub max_turns: u64,
    /// Input plus output tokens over the run. Default: no limit.
    pub max_tokens: Option<u64>,
    /// Cost over the run, in USD. Default: no limit.
    pub max_cost_usd: Option<f64>,
    /// Wall-clock time since the run first started, in seconds. Default: no limit.
    pub max_wall_seconds: Option<u64>,
}

impl Default for Budgets {
    fn default() -> Self {
        Self {
            max_turns: 50,
            max_tokens: None,
            max_cost_usd: None,
            max_wall_seconds: None,
        }
    }
}

/// When to compact the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContextPolicy {
    /// The model's context window, in tokens. Default 200000.
    pub window_tokens: u64,
    /// Compact when a request's input reaches this share of the window. Default 0.8.
    pub compact_at: f64,
    /// Messages kept verbatim after the summary. Default 6.
    pub keep_last: usize,
}

impl Default for ContextPolicy {
    fn default() -> Self {
        Self {
            window_tokens: 200_000,
            compact_at: 0.8,
            keep_last: 6,
        }
    }
}

impl AgentConfig {
    /// Each `[[agents.mcp]]` entry can work ([`nightshift_mcp::McpServerConfig::check`]) and
    /// names a server no other entry does.
    fn check_mcp(&self) -> Result<(), ConfigError> {
        let mut seen = std::collections::BTreeSet::new();
        for server in &self.mcp {
            server
                .check(&self.name)
                .map_err(|e| ConfigError::value(e.key, e.message))?;
            if !seen.insert(server.name.as_str()) {
                return Err(ConfigError::value(
                    format!("agents.{}.mcp.name", self.name),
                    format!(
                        "'{}' names two servers; each [[agents.mcp]] entry needs a name of its \
                         own (it prefixes its tools: mcp__{}__<tool>)",
                        server.name, server.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Checks every value; the error names the agent and the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let name = &self.name;
        let ok_name = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !ok_name {
            return Err(ConfigError::BadName { name: name.clone() });
        }
        let at = |key: &str| format!("agents.{name}.{key}");
        if self.model.trim().is_empty() {
            return Err(ConfigError::value(at("model"), "must not be empty"));
        }
        if self.system.is_some() && self.system_file.is_some() {
            return Err(ConfigError::table(
                format!("agents.{name}"),
                "set either system or system_file, not both",
            ));
        }
        if self.max_tokens == 0 {
            return Err(ConfigError::value(at("max_tokens"), "must be at least 1"));
        }
        if let Some(t) = &self.thinking {
            check_thinking(name, t, self.max_tokens)?;
        }
        self.wakeups.validate(name)?;
        self.approvals.validate(name)?;
        crate::notify::validate(name, &self.notify)?;
        self.github.validate(name)?;
        self.workspace.validate(name)?;
        self.check_mcp()?;
        if self.outage_limit_seconds == 0 {
            return Err(ConfigError::value(
                at("outage_limit_seconds"),
                format!(
                    "must be at least 1 (it is how long a model outage may last before runs \
                     fail; the default is {DEFAULT_OUTAGE_LIMIT_SECONDS})"
                ),
            ));
        }
        if self.budgets.max_turns == 0 {
            return Err(ConfigError::value(
                at("budgets.max_turns"),
                "must be at least 1",
            ));
        }
        if let Some(max) = self.budgets.max_cost_usd
            && !(max.is_finite() && max > 0.0)
        {
            return Err(ConfigError::value(
                at("budgets.max_cost_usd"),
                format!(
                    "is {max}; a budget is a positive number of US dollars, like 2.0 (leave it \
                     out for no cost budget)"
                ),
            ));
        }
        if let Some(pricing) = &self.pricing {
            pricing
                .check()
                .map_err(|e| ConfigError::value(at("pricing"), e.to_string()))?;
        }
        let c = &self.context;
        if !(c.compact_at > 0.0 && c.compact_at <= 1.0) {
            return Err(ConfigError::value(
                at("context.compact_at"),
                format!("is {}; use a share between 0 and 1, like 0.8", c.compact_at),
            ));
        }
        if c.window_tokens < 1000 {
            return Err(ConfigError::value(
                at("context.window_tokens"),
                "must be at least 1000",
            ));
        }
        Ok(())
    }

    /// The ids of the models this agent may call: its `model`, then each `fallback`'s model
    /// (`provider/model` or `model`), in order, each once.
    pub fn model_ids(&self) -> Vec<String> {
        let mut ids = vec![self.model.clone()];
        for f in &self.fallback {
            let model = f.split_once('/').map_or(f.as_str(), |(_, m)| m).to_string();
            if !ids.contains(&model) {
                ids.push(model);
            }
        }
        ids
    }

    /// [`AgentConfig::resolve_with`] the built-in price table.
    pub fn resolve(&self, base: &Path) -> Result<AgentDef, ConfigError> {
        self.resolve_with(base, &PriceTable::builtin())
    }

    /// Resolves the system prompt (reading `system_file` relative to `base`), the prices of
    /// the agent's models from `prices` (refusing a cost budget over an unpriced model) and
    /// computes the definition's hash.
    pub fn resolve_with(&self, base: &Path, prices: &PriceTable) -> Result<AgentDef, ConfigError> {
        self.validate()?;
        let prices = ModelPrices::for_agent(self, prices)?;
        let system = match (&self.system, &self.system_file) {
            (Some(s), _) => s.clone(),
            (None, Some(file)) => {
                let path = base.join(file);
                std::fs::read_to_string(&path).map_err(|source| ConfigError::SystemFile {
                    agent: self.name.clone(),
                    path: path.clone(),
                    source,
                })?
            }
            (None, None) => String::new(),
        };
        let skills = self
            .skills
            .iter()
            .enumerate()
            .map(|(i, dir)| crate::skills::load(&self.name, i, base, dir))
            .collect::<Result<Vec<_>, _>>()?;
        crate::skills::check_unique(&self.name, &skills)?;
        let system = system + &crate::skills::prompt_section(&skills);
        let hash = {
            let canonical = serde_json::json!({ "config": self, "system": system });
            let digest = Sha256::digest(canonical.to_string().as_bytes());
            digest
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        Ok(AgentDef {
            config: self.clone(),
            system,
            skills,
            hash,
            prices,
        })
    }
}

/// The rules of `thinking`: a budget only with `enabled`, and then at least 1024 tokens and
/// below `max_tokens` (the Messages API refuses anything else; the reply's text needs room).
fn check_thinking(
    name: &str,
    t: &nightshift_llm::Thinking,
    max_tokens: u32,
) -> Result<(), ConfigError> {
    use nightshift_llm::ThinkingKind;
    let at = format!("agents.{name}.thinking.budget_tokens");
    match (t.kind, t.budget_tokens) {
        (ThinkingKind::Enabled, Some(b)) if b < 1024 => Err(ConfigError::value(
            at,
            format!("is {b}; a thinking budget is at least 1024 tokens"),
        )),
        (ThinkingKind::Enabled, Some(b)) if b >= max_tokens => Err(ConfigError::value(
            at,
            format!(
                "is {b}, not below the agent's max_tokens ({max_tokens}); thinking counts \
                 toward max_tokens, so raise max_tokens above the budget"
            ),
        )),
        (ThinkingKind::Adaptive | ThinkingKind::Disabled, Some(_)) => Err(ConfigError::value(
            at,
            format!(
                "is only allowed with type = \"enabled\" (this is \"{}\")",
                t.kind.as_str()
            ),
        )),
        _ => Ok(()),
    }
}

/// A resolved agent: its config, its system prompt text and the hash of both.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentDef {
    pub config: AgentConfig,
    /// The system prompt, with the skills' section when it has skills.
    pub system: String,
    /// Its skills, read from their directories when the config was loaded.
    pub skills: Vec<crate::skills::Skill>,
    pub hash: String,
    /// What its models' calls cost.
    pub prices: ModelPrices,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent() -> AgentConfig {
        toml_like(r#"{"name":"a","provider":"p","model":"m","system":"be brief"}"#)
    }

    fn toml_like(json: &str) -> AgentConfig {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_hash_changes_with_the_definition_and_only_then() {
        let a = agent().resolve(Path::new(".")).unwrap();
        assert_eq!(a.hash, agent().resolve(Path::new(".")).unwrap().hash);
        let mut changed = agent();
        changed.system = Some("be verbose".into());
        assert_ne!(a.hash, changed.resolve(Path::new(".")).unwrap().hash);
        let explicit_default = toml_like(
            r#"{"name":"a","provider":"p","model":"m","system":"be brief","sandbox":{"network":"on"}}"#,
        );
        assert_eq!(
            a.hash,
            explicit_default.resolve(Path::new(".")).unwrap().hash,
            "the default sandbox is not hashed"
        );
        let mut offline = agent();
        offline.sandbox.network = SandboxNetwork::Off;
        assert_ne!(a.hash, offline.resolve(Path::new(".")).unwrap().hash);
        assert_eq!(a.config.budgets.max_turns, 50);
    }

    #[test]
    fn bad_values_name_the_key() {
        let mut a = agent();
        a.context.compact_at = 1.5;
        assert!(
            a.validate()
                .unwrap_err()
                .to_string()
                .contains("agents.a.context.compact_at")
        );
        let mut a = agent();
        a.system_file = Some("x".into());
        assert!(
            a.validate()
                .unwrap_err()
                .to_string()
                .contains("either system or system_file")
        );
        let err = serde_json::from_str::<AgentConfig>(
            r#"{"name":"a","provider":"p","model":"m","tool":[]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("unknown field `tool`"), "{err}");
        let mut a = agent();
        a.wakeups.min_delay_seconds = 600;
        a.wakeups.max_delay_seconds = 60;
        let err = a.validate().unwrap_err().to_string();
        assert!(
            err.contains("agents.a.wakeups: min_delay_seconds (600) is above"),
            "{err}"
        );
        let mut a = agent();
        a.approvals.timeout_seconds = 0;
        let err = a.validate().unwrap_err().to_string();
        assert!(err.contains("agents.a.approvals.timeout_seconds"), "{err}");
        let mut a = agent();
        a.approvals.rules = vec![crate::approval::ApprovalRule {
            tool: " ".into(),
            input_contains: None,
        }];
        assert!(
            a.validate()
                .unwrap_err()
                .to_string()
                .contains("needs a tool name")
        );
        let err = serde_json::from_str::<AgentConfig>(
            r#"{"name":"a","provider":"p","model":"m","tool_overrides":{"x":{"approval":"maybe"}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("unknown variant `maybe`"), "{err}");
    }

    #[test]
    fn thinking_and_effort_parse_and_a_bad_budget_names_the_key() {
        let a = toml_like(
            r#"{"name":"a","provider":"p","model":"m","max_tokens":16000,
                "thinking":{"type":"enabled","budget_tokens":10000},"effort":"high"}"#,
        );
        a.validate().unwrap();
        assert_eq!(
            a.thinking,
            Some(nightshift_llm::Thinking {
                kind: nightshift_llm::ThinkingKind::Enabled,
                budget_tokens: Some(10000)
            })
        );
        assert_eq!(a.effort, Some(nightshift_llm::Effort::High));
        assert_ne!(
            a.resolve(Path::new(".")).unwrap().hash,
            agent().resolve(Path::new(".")).unwrap().hash
        );
        let cases = [
            (r#"{"type":"enabled","budget_tokens":500}"#, "at least 1024"),
            (
                r#"{"type":"enabled","budget_tokens":4096}"#,
                "not below the agent's max_tokens (4096)",
            ),
            (
                r#"{"type":"adaptive","budget_tokens":2048}"#,
                "only allowed with type = \"enabled\"",
            ),
        ];
        for (thinking, says) in cases {
            let a = toml_like(&format!(
                r#"{{"name":"a","provider":"p","model":"m","thinking":{thinking}}}"#
            ));
            let err = a.validate().unwrap_err().to_string();
            assert!(
                err.starts_with("agents.a.thinking.budget_tokens ") && err.contains(says),
                "{err}"
            );
        }
        let err = serde_json::from_str::<AgentConfig>(
            r#"{"name":"a","provider":"p","model":"m","thinking":{"type":"on"}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("unknown variant `on`"), "{err}");
        let err = serde_json::from_str::<AgentConfig>(
            r#"{"name":"a","provider":"p","model":"m","thinking":{"type":"enabled","budget":1}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("unknown field `budget`"), "{err}");
    }

    #[test]
    fn an_unreadable_system_file_names_the_key_and_keeps_the_cause() {
        let mut a = agent();
        a.system = None;
        a.system_file = Some("no-such-prompt.md".into());
        let err = a.resolve(Path::new("/nonexistent-dir")).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(
                "agents.a.system_file: cannot read /nonexistent-dir/no-such-prompt.md"
            ),
            "{text}"
        );
        let source = std::error::Error::source(&err).expect("the io error is the source");
        assert!(source.downcast_ref::<std::io::Error>().is_some());
    }
}
