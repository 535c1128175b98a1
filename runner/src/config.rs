//! `nightshift.toml`: every setting optional, layered file → environment → flags. Unknown keys
//! and invalid values are errors that name the key and say what is allowed.

use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use nightshift_agent::{AgentConfig, PriceTable, Pricing};
use nightshift_llm::ProviderConfig;
use nightshift_scheduler::cron::{Schedule, ScheduleSpec};
use nightshift_scheduler::hooks::HookConfig;
use nightshift_store::StoreConfig;
use nightshift_tools::{CommandToolConfig, SecretSpec};
use nightshift_worker::PoolConfig;
use serde::Deserialize;

/// The default config path, read only if it exists.
pub const DEFAULT_PATH: &str = "nightshift.toml";
/// Overrides `database.url`.
pub const DATABASE_URL_ENV: &str = "NIGHTSHIFT_DATABASE_URL";

/// The whole configuration.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `[database]`: where the store lives.
    pub database: StoreConfig,
    /// `[worker]`: the worker pool.
    pub worker: PoolConfig,
    /// `[server]`: the HTTP API.
    pub server: ServerConfig,
    /// `[runtime]`: where runs work and what their tools may reach.
    pub runtime: RuntimeConfig,
    /// `[log]`: how log lines are written (see [`crate::logging`]).
    pub log: crate::logging::LogConfig,
    /// `[sandbox]`: how the commands tools start are confined.
    pub sandbox: crate::sandbox::SandboxConfig,
    /// `[providers.NAME]`: model providers agents refer to by name.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// `[[agents]]`: the agents runs are started for.
    pub agents: Vec<AgentConfig>,
    /// `[[command_tools]]`: tools that run a program (enable them per agent in `tools`).
    pub command_tools: Vec<CommandToolConfig>,
    /// `[[schedules]]`: cron schedules that start runs of an agent. Re-applied at every
    /// start; read-only through the API.
    pub schedules: Vec<ScheduleSpec>,
    /// `[[hooks]]`: webhook endpoints `POST /hooks/{name}` and the runs they start.
    pub hooks: Vec<HookConfig>,
    /// `[prices."MODEL"]`: USD per million tokens for models the built-in table does not
    /// know, or other prices for ones it does (see `nightshift_agent::pricing`).
    pub prices: BTreeMap<String, Pricing>,
    /// `[telemetry]`: where the Prometheus metrics are served besides `GET /metrics`.
    pub telemetry: TelemetryConfig,
    /// `[github]`: the GitHub App(s) and token the GitHub tools use.
    pub github: crate::github::GithubConfig,
    /// The directory relative paths in the file are resolved against (the file's own).
    #[serde(skip)]
    pub base_dir: PathBuf,
}

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

/// Token names are 1-64 letters, digits, `-`, `_` or `.`, unique, and never `admin` (the
/// main token's name).
fn validate_tokens(tokens: &[NamedToken]) -> Result<(), String> {
    let mut seen = std::collections::HashSet::new();
    for t in tokens {
        let fine = (1..=64).contains(&t.name.len())
            && t.name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        if !fine {
            return Err(format!(
                "server.tokens: name '{}' is not allowed; use 1-64 letters, digits, '-', '_' or '.'",
                t.name
            ));
        }
        if t.name == "admin" {
            return Err(
                "server.tokens: 'admin' is the name of the main token (server.token_env); \
                 give this one another name"
                    .into(),
            );
        }
        if !seen.insert(t.name.as_str()) {
            return Err(format!(
                "server.tokens: two tokens are named '{}'; names must be unique",
                t.name
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

/// The `[telemetry]` settings. `GET /metrics` (behind the API token) is always served.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// An address (`127.0.0.1:9464`) that serves the same metrics at `GET /metrics` without
    /// the token, for a Prometheus that holds none. Default none. Bind it to loopback or a
    /// private network: the metrics name agents, tools, hooks and schedules.
    pub metrics_address: Option<std::net::SocketAddr>,
    /// An OpenTelemetry collector's OTLP/HTTP address (`http://127.0.0.1:4318`): `serve`
    /// exports a trace per run to `<endpoint>/v1/traces`. Default none (no traces).
    pub otlp_endpoint: Option<String>,
    /// The traces' `service.name`. Default `nightshift`.
    pub service_name: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            metrics_address: None,
            otlp_endpoint: None,
            service_name: "nightshift".into(),
        }
    }
}

impl TelemetryConfig {
    fn validate(&self) -> Result<(), String> {
        if let Some(endpoint) = &self.otlp_endpoint {
            nightshift_telemetry::traces::traces_url(endpoint).map_err(|e| e.to_string())?;
        }
        if self.service_name.trim().is_empty() {
            return Err("telemetry.service_name is empty; leave it out for \"nightshift\"".into());
        }
        Ok(())
    }
}

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
    pub background: crate::tasks::BackgroundConfig,
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
            background: crate::tasks::BackgroundConfig::default(),
        }
    }
}

impl RuntimeConfig {
    /// The names in `secrets` (the environment variables read), in order.
    pub fn secret_names(&self) -> Vec<String> {
        self.secrets.iter().map(|s| s.name.clone()).collect()
    }

    /// Checks `secrets`: usable names, each once, and well-formed hosts.
    pub fn validate_secrets(&self) -> Result<(), String> {
        let mut seen = std::collections::BTreeSet::new();
        for spec in &self.secrets {
            spec.validate()
                .map_err(|e| format!("runtime.secrets: {e}"))?;
            if !seen.insert(spec.name.as_str()) {
                return Err(format!(
                    "runtime.secrets: `{}` is listed twice; list each secret once",
                    spec.name
                ));
            }
        }
        Ok(())
    }
}

/// Overrides from the command line.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub database_url: Option<String>,
    pub slots: Option<usize>,
}

impl Config {
    /// Parses TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> anyhow::Result<Config> {
        let parsed: Result<Config, _> =
            serde_path_to_error::deserialize(toml::Deserializer::new(text));
        parsed.map_err(|e| {
            // The key the value was meant for (`worker.slots`, `agents[0].budgets`), when
            // serde got as far as one.
            let key = e.path().to_string();
            let e = e.into_inner();
            let message = match key.as_str() {
                "" | "." => e.message().to_string(),
                key => format!("{key}: {}", e.message()),
            };
            let location = e
                .span()
                .map(|span| {
                    let line = text[..span.start].matches('\n').count() + 1;
                    format!(" (line {line})")
                })
                .unwrap_or_default();
            anyhow::anyhow!("{origin}{location}: {message}")
        })
    }

    /// Loads the config: the file at `path` (or `./nightshift.toml` when it exists), then
    /// `NIGHTSHIFT_DATABASE_URL`, then `overrides`; then validates the result.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> anyhow::Result<Config> {
        let mut config = match path {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("cannot read the config file {}", p.display()))?;
                let mut config = Config::parse(&text, &p.display().to_string())?;
                config.anchor_paths(p.parent().unwrap_or(Path::new("")))?;
                config
            }
            None => {
                let p = PathBuf::from(DEFAULT_PATH);
                let mut config = match std::fs::read_to_string(&p) {
                    Ok(text) => Config::parse(&text, DEFAULT_PATH)?,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Config::default(),
                    Err(e) => bail!("cannot read {DEFAULT_PATH}: {e}"),
                };
                config.anchor_paths(Path::new(""))?;
                config
            }
        };
        if let Ok(url) = std::env::var(DATABASE_URL_ENV)
            && !url.trim().is_empty()
        {
            config.database.url = url;
        }
        if let Some(url) = &overrides.database_url {
            config.database.url = url.clone();
        }
        if let Some(slots) = overrides.slots {
            config.worker.slots = slots;
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks every section.
    pub fn validate(&self) -> anyhow::Result<()> {
        fn invalid(e: impl std::fmt::Display) -> anyhow::Error {
            anyhow::anyhow!("invalid config: {e}")
        }
        self.database.validate().map_err(invalid)?;
        self.worker.validate().map_err(invalid)?;
        if !(1..=10_000).contains(&self.server.max_batch_runs) {
            return Err(invalid(format!(
                "server.max_batch_runs is {}; use 1 to 10000",
                self.server.max_batch_runs
            )));
        }
        validate_tokens(&self.server.tokens).map_err(invalid)?;
        self.runtime.background.validate().map_err(invalid)?;
        self.runtime.validate_secrets().map_err(invalid)?;
        self.telemetry.validate().map_err(invalid)?;
        self.github.validate().map_err(invalid)?;
        crate::sandbox::validate(self).map_err(invalid)?;
        for (name, provider) in &self.providers {
            provider
                .validate()
                .map_err(|e| invalid(format!("providers.{name}.{}: {}", e.key, e.message)))?;
        }
        let prices = self.price_table()?;
        let mut seen = std::collections::BTreeSet::new();
        for agent in &self.agents {
            agent.validate().map_err(invalid)?;
            if agent.github.check_run.is_some() && self.github.apps.is_empty() {
                return Err(invalid(format!(
                    "agents.{}.github.check_run needs a GitHub App: only Apps can create check \
                     runs; add a [[github.apps]] entry (with the checks: write permission) or \
                     remove check_run",
                    agent.name
                )));
            }
            nightshift_agent::ModelPrices::for_agent(agent, &prices).map_err(invalid)?;
            if !seen.insert(agent.name.as_str()) {
                return Err(invalid(format!(
                    "agents: '{}' is defined twice; agent names must be unique",
                    agent.name
                )));
            }
            for model in std::iter::once(agent.provider.as_str()).chain(
                agent
                    .fallback
                    .iter()
                    .filter_map(|f| f.split_once('/').map(|(p, _)| p)),
            ) {
                if !self.providers.contains_key(model) {
                    let known: Vec<&str> = self.providers.keys().map(String::as_str).collect();
                    return Err(invalid(format!(
                        "agents.{}: provider '{model}' is not configured; add a \
                         [providers.{model}] table (configured: {})",
                        agent.name,
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    )));
                }
            }
        }
        for agent in &self.agents {
            self.check_thinking(agent).map_err(invalid)?;
        }
        for tool in &self.command_tools {
            tool.validate().map_err(invalid)?;
        }
        self.compiled_schedules()?;
        let agents: Vec<&str> = self.agents.iter().map(|a| a.name.as_str()).collect();
        let mut hooks = std::collections::BTreeSet::new();
        for hook in &self.hooks {
            hook.validate(&agents).map_err(invalid)?;
            if !hooks.insert(hook.name.as_str()) {
                return Err(invalid(format!(
                    "hooks: '{}' is defined twice; hook names must be unique",
                    hook.name
                )));
            }
        }
        Ok(())
    }

    /// The built-in model prices with the file's `[prices]` laid over them.
    pub fn price_table(&self) -> anyhow::Result<PriceTable> {
        PriceTable::with_overrides(&self.prices).map_err(|e| anyhow::anyhow!("invalid config: {e}"))
    }

    /// `thinking = { type = "enabled" }` needs `budget_tokens` on an Anthropic model (the
    /// Messages API refuses it without one), the agent's own or a fallback's.
    fn check_thinking(&self, agent: &AgentConfig) -> Result<(), String> {
        let Some(t) = agent.thinking else {
            return Ok(());
        };
        if t.kind != nightshift_llm::ThinkingKind::Enabled || t.budget_tokens.is_some() {
            return Ok(());
        }
        let providers =
            std::iter::once(agent.provider.as_str()).chain(agent.fallback.iter().map(|f| {
                f.split_once('/')
                    .map_or(agent.provider.as_str(), |(p, _)| p)
            }));
        for name in providers {
            if self.providers.get(name).map(|p| p.kind)
                == Some(nightshift_llm::ProviderKind::Anthropic)
            {
                return Err(format!(
                    "agents.{}.thinking: type = \"enabled\" needs budget_tokens on an Anthropic \
                     model (provider '{name}'); add budget_tokens = 1024 or more, below \
                     max_tokens",
                    agent.name
                ));
            }
        }
        Ok(())
    }

    /// The `[[schedules]]`, checked: names unique, expressions, zones, agents and prompt
    /// templates valid.
    pub fn compiled_schedules(&self) -> anyhow::Result<Vec<Schedule>> {
        let agents: Vec<String> = self.agents.iter().map(|a| a.name.clone()).collect();
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        for spec in &self.schedules {
            if !seen.insert(spec.name.as_str()) {
                bail!(
                    "invalid config: schedules: '{}' is defined twice; schedule names must be \
                     unique",
                    spec.name
                );
            }
            out.push(
                Schedule::compile(spec.clone(), Some(&agents))
                    .map_err(|e| anyhow::anyhow!("invalid config: {e}"))?,
            );
        }
        Ok(out)
    }

    /// Makes every relative path the file holds relative to `dir`, the file's directory (made
    /// absolute against the working directory once, here): the SQLite file of
    /// `database.url`, `runtime.data_dir`, and command tools' programs given as a relative
    /// path with a `/` (a bare name is still looked up on PATH). System prompt files, scripts
    /// and the sandbox launcher are resolved against [`Config::base_dir`] where they are
    /// read. A database URL from the environment or a flag is taken as given, relative to the
    /// working directory like any command-line path.
    pub fn anchor_paths(&mut self, dir: &Path) -> anyhow::Result<()> {
        // A file named without a directory (`nightshift.toml`) is in the working directory.
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let dir = std::path::absolute(dir)
            .with_context(|| format!("cannot make {} absolute", dir.display()))?;
        self.database.url = anchor_sqlite_url(&self.database.url, &dir);
        if self.runtime.data_dir.is_relative() {
            self.runtime.data_dir = dir.join(&self.runtime.data_dir);
        }
        for tool in &mut self.command_tools {
            if let Some(program) = tool.command.first_mut()
                && program.contains('/')
                && Path::new(program.as_str()).is_relative()
            {
                *program = dir.join(program.as_str()).display().to_string();
            }
        }
        self.base_dir = dir;
        Ok(())
    }

    /// A path from the file, resolved against the file's directory.
    pub fn resolve_path(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.join(p)
        }
    }
}

/// `url` with a relative SQLite file path made relative to `dir` (other URLs unchanged).
fn anchor_sqlite_url(url: &str, dir: &Path) -> String {
    let trimmed = url.trim();
    let Some(file) = crate::private::sqlite_file(trimmed) else {
        return url.to_string();
    };
    if file.is_absolute() {
        return url.to_string();
    }
    let query = trimmed.split_once('?').map(|(_, q)| q);
    let anchored = dir.join(file);
    match query {
        Some(q) => format!("sqlite://{}?{q}", anchored.display()),
        None => format!("sqlite://{}", anchored.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_tokens_are_refused_with_what_to_write_instead() {
        let with = |entries: &str| Config::parse(entries, "x").and_then(|c| c.validate());
        let token = |name: &str, role: &str| {
            format!(
                "[[server.tokens]]\nname = \"{name}\"\ntoken_env = \"T_{role}\"\nrole = \"{role}\"\n"
            )
        };
        assert!(with(&(token("ci", "operator") + &token("grafana", "read_only"))).is_ok());
        let refused = |text: String, want: &[&str]| {
            let err = format!("{:#}", with(&text).unwrap_err());
            for w in want {
                assert!(err.contains(w), "{w} in: {err}");
            }
        };
        refused(token("admin", "operator"), &["'admin'", "another name"]);
        refused(
            token("has space", "operator"),
            &["'has space'", "letters, digits"],
        );
        refused(
            token("ci", "operator") + &token("ci", "read_only"),
            &["two tokens are named 'ci'"],
        );
        refused(
            token("ci", "writer"),
            &["writer", "`operator`", "`read_only`"],
        );
        refused(
            "[[server.tokens]]\nname = \"ci\"\ntoken_env = \"T\"\n".to_string(),
            &["role"],
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        let err = Config::parse("[worker]\nslot = 3\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("x.toml (line 2)") && err.contains("unknown field `slot`"),
            "{err}"
        );
        assert!(err.contains("`slots`"), "lists the allowed keys: {err}");
        let err = Config::parse("[worker]\nslots = -1\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2") && err.contains("-1"), "{err}");
        let err = Config::parse("[database]\nsynchronous = \"off\"\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("`full`") && err.contains("off"), "{err}");
        let c = Config::parse("[worker]\nslots = 0\n", "x.toml").unwrap();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("worker.slots")
        );
        for limit in [0, 10_001] {
            let c = Config::parse(&format!("[server]\nmax_batch_runs = {limit}\n"), "x").unwrap();
            let err = c.validate().unwrap_err().to_string();
            assert!(
                err.contains("server.max_batch_runs") && err.contains("1 to 10000"),
                "{err}"
            );
        }
        let c = Config::parse("[server]\nmax_batch_runs = 10000\n", "x").unwrap();
        c.validate().unwrap();
        assert_eq!(Config::parse("", "x").unwrap(), Config::default());
        for (body, key) in [
            (
                "lost_after_seconds = 1",
                "runtime.background.lost_after_seconds",
            ),
            ("max_per_run = 0", "runtime.background.max_per_run"),
            (
                "timeout_seconds = 90000",
                "runtime.background.timeout_seconds (90000)",
            ),
        ] {
            let c = Config::parse(&format!("[runtime.background]\n{body}\n"), "x").unwrap();
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains(key), "{body}: {err}");
        }
        let err = Config::parse("[runtime.background]\nlost_after = 5\n", "x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("lost_after_seconds"), "lists the keys: {err}");
    }

    #[test]
    fn secrets_are_names_or_tables_bound_to_hosts_and_a_bad_form_says_both() {
        let c = Config::parse(
            "[runtime]\nsecrets = [\"PLAIN\", { name = \"GITHUB_TOKEN\", hosts = [\"api.github.com\"] }]\n",
            "x.toml",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(
            c.runtime.secrets,
            [
                SecretSpec::unbound("PLAIN"),
                SecretSpec::bound("GITHUB_TOKEN", ["api.github.com"]),
            ]
        );
        assert_eq!(c.runtime.secret_names(), ["PLAIN", "GITHUB_TOKEN"]);

        let err = Config::parse("[runtime]\nsecrets = [42]\n", "x.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("x.toml (line 2)")
                && err.contains("the name of an environment variable")
                && err.contains("hosts = [\"api.github.com\"]"),
            "{err}"
        );
        let err = Config::parse(
            "[runtime]\nsecrets = [{ name = \"T\", host = \"api.github.com\" }]\n",
            "x.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("unknown field `host`") && err.contains("`hosts`"),
            "{err}"
        );
        for (secrets, expected) in [
            (
                "[{ name = \"T\", hosts = [] }]",
                "runtime.secrets: secret `T` has an empty `hosts` list",
            ),
            (
                "[{ name = \"T\", hosts = [\"https://api.github.com\"] }]",
                "without scheme or path",
            ),
            ("[\"T\", \"T\"]", "`T` is listed twice"),
        ] {
            let c = Config::parse(&format!("[runtime]\nsecrets = {secrets}\n"), "x").unwrap();
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains(expected), "{secrets}: {err}");
        }
    }

    #[test]
    fn the_example_config_is_the_defaults_and_its_samples_are_valid() {
        let example = include_str!("../../ops/nightshift.example.toml");
        let parsed = Config::parse(example, "example").unwrap();
        assert_eq!(parsed, Config::default(), "the example shows the defaults");
        // Uncomment the sample provider, agent and command tool: they must parse and validate.
        let start = example.find("# [providers.anthropic]").unwrap();
        let samples: String = example[start..]
            .lines()
            .map(|l| l.strip_prefix("# ").or(l.strip_prefix("#")).unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n");
        let full = format!("{}\n{samples}", &example[..start]);
        let config = Config::parse(&full, "example with samples").unwrap();
        config.validate().unwrap();
        assert_eq!(config.agents[0].budgets.max_turns, 50);
        assert_eq!(config.command_tools[0].name, "lint");
        assert_eq!(config.compiled_schedules().unwrap()[0].name(), "digest");
        assert_eq!(config.hooks[0].routes[1].name, "comment");
        assert_eq!(
            config.agents[0].notify[0].secret_env,
            "REVIEWER_NOTIFY_SECRET"
        );
        assert_eq!(config.github.apps[0].name, "review-bot");
        assert_eq!(config.github.timeout_seconds, 60);
        assert_eq!(
            config.agents[0].github.check_run.as_deref(),
            Some("Nightshift review")
        );
        assert_eq!(config.agents[0].workspace.setup, ["cargo fetch"]);
    }

    #[test]
    fn wrong_types_and_bad_enum_values_name_the_whole_key() {
        for (text, expect) in [
            (
                "[worker]\nslots = \"many\"\n",
                "x.toml (line 2): worker.slots: invalid type: string \"many\", expected usize",
            ),
            (
                "[[agents]]\nname = \"a\"\nprovider = \"p\"\nmodel = \"m\"\n\
                 budgets = { max_turns = \"x\" }\n",
                "x.toml (line 5): agents[0].budgets.max_turns: invalid type: string \"x\"",
            ),
            (
                "[log]\nformat = \"xml\"\n",
                "x.toml (line 2): log.format: unknown variant `xml`, expected `text` or `json`",
            ),
        ] {
            let err = Config::parse(text, "x.toml").unwrap_err().to_string();
            assert!(err.starts_with(expect), "{text}: {err}");
        }
    }

    #[test]
    fn a_cost_budget_that_is_not_a_positive_number_is_refused_naming_the_key() {
        let agent = |budget: &str| {
            format!(
                "[providers.p]\nkind = \"scripted\"\nscript = \"s.json\"\n\
                 [[agents]]\nname = \"a\"\nprovider = \"p\"\nmodel = \"m\"\n\
                 pricing = {{ input = 1.0, output = 2.0 }}\n\
                 budgets = {{ max_cost_usd = {budget} }}\n"
            )
        };
        for bad in ["-1.0", "0.0", "nan", "inf"] {
            let err = Config::parse(&agent(bad), "x.toml")
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("agents.a.budgets.max_cost_usd"),
                "{bad}: {err}"
            );
            assert!(
                err.contains("positive number of US dollars"),
                "{bad}: {err}"
            );
        }
        Config::parse(&agent("2.5"), "x.toml")
            .unwrap()
            .validate()
            .unwrap();
    }

    #[test]
    fn command_tool_schemas_must_be_valid_json_schema() {
        let tool = |schema: &str| {
            format!(
                "[[command_tools]]\nname = \"pay\"\ndescription = \"Pay\"\n\
                 command = [\"/bin/true\"]\ninput_schema = {schema}\n"
            )
        };
        let valid = tool(
            "{ type = \"object\", required = [\"amount\"], additionalProperties = false, \
             properties = { amount = { type = \"integer\" }, memo = { type = \"string\", \
             maxLength = 40 } } }",
        );
        let config = Config::parse(&valid, "x.toml").unwrap();
        config.validate().unwrap();
        assert_eq!(
            config.command_tools[0].input_schema["required"][0],
            "amount"
        );

        for (schema, expect) in [
            (
                "{ type = \"object\", properties = { amount = { type = \"integr\" } } }",
                "at /properties/amount/type: \"integr\" is not valid",
            ),
            (
                "{ type = \"object\", required = \"amount\" }",
                "at /required: \"amount\" is not of type \"array\"",
            ),
            (
                "{ type = \"object\", properties = { x = { \"$ref\" = \"https://example.invalid/s\" } } }",
                "is never fetched",
            ),
        ] {
            let err = Config::parse(&tool(schema), "x.toml")
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with(
                    "invalid config: command tool `pay`: input_schema is not a valid JSON Schema: "
                ),
                "{err}"
            );
            assert!(err.contains(expect), "{expect}: {err}");
            assert!(
                err.ends_with("fix `command_tools.pay.input_schema`"),
                "{err}"
            );
        }
        let err = Config::parse(&tool("{ type = \"array\" }"), "x.toml")
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("must be a JSON object schema")
                && err.contains("command_tools.pay.input_schema"),
            "{err}"
        );
    }

    #[test]
    fn bad_schedules_name_the_schedule_and_key() {
        let base = "[providers.p]\nkind = \"scripted\"\nscript = \"s.json\"\n[[agents]]\nname = \"reporter\"\n\
                    provider = \"p\"\nmodel = \"m\"\nsystem = \"s\"\n";
        let with = |schedule: &str| {
            Config::parse(&format!("{base}[[schedules]]\n{schedule}"), "x.toml")
                .and_then(|c| c.validate())
                .unwrap_err()
                .to_string()
        };
        let err = with(
            "name = \"d\"\ncron = \"0 7 * * 1-5\"\nagent = \"reporter\"\nprompt = \"p\"\ntimezone = \"Mars/Base\"\n",
        );
        assert!(err.contains("schedules.d.timezone: 'Mars/Base'"), "{err}");
        let err =
            with("name = \"d\"\ncron = \"0 7 * * 1-5\"\nagent = \"nobody\"\nprompt = \"p\"\n");
        assert!(err.contains("schedules.d.agent: agent 'nobody'"), "{err}");
        let err = with(
            "name = \"d\"\ncron = \"0 7 * * 1-5\"\nagent = \"reporter\"\nprompt = \"p\"\novrlap = \"skip\"\n",
        );
        assert!(
            err.contains("unknown field `ovrlap`") && err.contains("line"),
            "{err}"
        );
        let twice = "name = \"d\"\ncron = \"@daily\"\nagent = \"reporter\"\nprompt = \"p\"\n";
        let err = with(&format!("{twice}[[schedules]]\n{twice}"));
        assert!(err.contains("'d' is defined twice"), "{err}");
    }

    #[test]
    fn hooks_are_validated_at_load_naming_the_key() {
        let agent = "[providers.p]\nkind = \"scripted\"\nscript = \"s.json\"\n[[agents]]\nname = \"reviewer\"\n\
                     provider = \"p\"\nmodel = \"m\"\nsystem = \"s\"\n";
        let hook = |extra: &str, route: &str| {
            format!(
                "{agent}[[hooks]]\nname = \"gh\"\n{extra}\n[[hooks.routes]]\nname = \"r\"\n\
                 event = \"push\"\nprompt = \"p {{{{ ref }}}}\"\n{route}\n"
            )
        };
        let ok = hook(
            "signature = \"github\"\nsecret_env = \"S\"",
            "agent = \"reviewer\"",
        );
        Config::parse(&ok, "x").unwrap().validate().unwrap();
        let cases = [
            (
                "secret_env = \"S\"",
                "agent = \"reviewer\"",
                "missing field `signature`",
            ),
            (
                "signature = \"github\"",
                "agent = \"reviewer\"",
                "hooks.gh.secret_env is missing",
            ),
            (
                "signature = \"github\"\nsecret_env = \"S\"",
                "agent = \"nobody\"",
                "hooks.gh.routes.r.agent: agent 'nobody' is not configured",
            ),
            (
                "signature = \"github\"\nsecret_env = \"S\"",
                "agent = \"reviewer\"\nconcurrency_key = \"{{ x\"",
                "hooks.gh.routes.r.concurrency_key is not a valid template",
            ),
            (
                "signature = \"hmac\"\nsecret_env = \"S\"",
                "agent = \"reviewer\"",
                "[hooks.hmac]",
            ),
            (
                "signature = \"none\"",
                "agent = \"reviewer\"",
                "hooks.gh.delivery_id is missing",
            ),
            (
                "signature = \"github\"\nsecret_env = \"S\"\nmax_body_bytes = 0",
                "agent = \"reviewer\"",
                "max_body_bytes = 0",
            ),
            (
                "signature = \"github\"\nsecret_env = \"S\"\nsecret = \"x\"",
                "agent = \"reviewer\"",
                "unknown field `secret`",
            ),
        ];
        for (extra, route, expect) in cases {
            let err = match Config::parse(&hook(extra, route), "x") {
                Err(e) => e.to_string(),
                Ok(c) => c.validate().unwrap_err().to_string(),
            };
            assert!(err.contains(expect), "{expect}: {err}");
        }
    }

    #[test]
    fn relative_paths_in_the_file_resolve_against_its_directory_whatever_the_cwd() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("etc");
        std::fs::create_dir(&etc).unwrap();
        let file = etc.join("nightshift.toml");
        std::fs::write(
            &file,
            "[database]\nurl = \"sqlite://state/ns.db?mode=rwc\"\n\
             [runtime]\ndata_dir = \"data\"\n\
             [[command_tools]]\nname = \"lint\"\ndescription = \"d\"\n\
             command = [\"scripts/lint.sh\", \"--fix\"]\n\
             [[command_tools]]\nname = \"jq\"\ndescription = \"d\"\ncommand = [\"jq\"]\n",
        )
        .unwrap();
        let c = Config::load(Some(&file), &Overrides::default()).unwrap();
        assert_eq!(
            c.database.url,
            format!("sqlite://{}?mode=rwc", etc.join("state/ns.db").display())
        );
        assert_eq!(c.runtime.data_dir, etc.join("data"));
        assert_eq!(c.base_dir, etc);
        assert_eq!(
            c.command_tools[0].command,
            [
                etc.join("scripts/lint.sh").display().to_string(),
                "--fix".into()
            ]
        );
        assert_eq!(
            c.command_tools[1].command,
            ["jq"],
            "a bare name stays a PATH lookup"
        );
        // Absolute paths and PostgreSQL URLs are kept; a URL given as an override is not
        // moved (it is the command line's, relative to the working directory).
        assert_eq!(
            anchor_sqlite_url("sqlite:///var/lib/ns.db", &etc),
            "sqlite:///var/lib/ns.db"
        );
        assert_eq!(
            anchor_sqlite_url("postgres://u@h/db", &etc),
            "postgres://u@h/db"
        );
        assert_eq!(
            anchor_sqlite_url("sqlite::memory:", &etc),
            "sqlite::memory:"
        );
        let o = Overrides {
            database_url: Some("sqlite://here.db".into()),
            slots: None,
        };
        let c = Config::load(Some(&file), &o).unwrap();
        assert_eq!(c.database.url, "sqlite://here.db");
    }

    #[test]
    fn a_cost_budget_over_a_model_without_a_price_is_refused_at_load() {
        let agent = |model: &str| {
            format!(
                "[providers.p]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n\
                 [[agents]]\nname = \"a\"\nprovider = \"p\"\nmodel = \"{model}\"\n\
                 budgets = {{ max_cost_usd = 2.0 }}\n"
            )
        };
        Config::parse(&agent("gpt-4o-mini"), "x")
            .unwrap()
            .validate()
            .unwrap();
        let err = Config::parse(&agent("qwen2.5-coder"), "x")
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("agents.a.budgets.max_cost_usd") && err.contains("'qwen2.5-coder'"),
            "{err}"
        );
        let priced = format!(
            "{}[prices.\"qwen2.5-coder\"]\ninput = 0.2\noutput = 0.6\n",
            agent("qwen2.5-coder")
        );
        Config::parse(&priced, "x").unwrap().validate().unwrap();
        let negative = format!("{}[prices.\"m\"]\ninput = -0.2\n", agent("gpt-4o"));
        let err = Config::parse(&negative, "x")
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("prices.\"m\" has input = -0.2"), "{err}");
    }
}
