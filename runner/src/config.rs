//! `nightshift.toml`: every setting optional, layered file → environment → flags. Unknown keys
//! and invalid values are errors that name the key and say what is allowed.
//!
//! [`Config`] is the whole file; its own tables are typed in a module each (`server`,
//! `runtime`, `telemetry`), the agents' checks across tables (providers, prices, thinking) in
//! `agents`; the other tables' types are their crates' (`StoreConfig`, `PoolConfig`,
//! `AgentConfig`, …). [`Config::load`] layers and anchors the paths, [`Config::validate`]
//! checks every table in a fixed order and stops at the first problem.

mod agents;
mod invalid;
mod runtime;
mod server;
mod telemetry;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use nightshift_agent::{AgentConfig, PriceTable, Pricing};
use nightshift_llm::ProviderConfig;
use nightshift_scheduler::cron::{Schedule, ScheduleSpec};
use nightshift_scheduler::hooks::HookConfig;
use nightshift_store::StoreConfig;
use nightshift_tools::CommandToolConfig;
use nightshift_worker::PoolConfig;
use serde::Deserialize;

pub(crate) use invalid::Invalid;
pub use runtime::RuntimeConfig;
pub use server::{NamedToken, ServerConfig, TokenRole};
pub use telemetry::TelemetryConfig;

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
    /// `[retention]`: how long finished runs are kept, and what of them (see
    /// [`crate::retention`]).
    pub retention: crate::retention::RetentionConfig,
    /// The directory relative paths in the file are resolved against (the file's own).
    #[serde(skip)]
    pub base_dir: PathBuf,
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
        self.database.validate().map_err(invalid)?;
        self.worker.validate().map_err(invalid)?;
        self.server.validate().map_err(invalid)?;
        self.runtime.background.validate().map_err(invalid)?;
        self.runtime.validate_secrets().map_err(invalid)?;
        self.telemetry.validate().map_err(invalid)?;
        self.github.validate().map_err(invalid)?;
        crate::sandbox::validate(self).map_err(invalid)?;
        self.validate_models()?;
        for tool in &self.command_tools {
            tool.validate().map_err(invalid)?;
        }
        self.compiled_schedules()?;
        let agents: Vec<&str> = self.agents.iter().map(|a| a.name.as_str()).collect();
        self.retention.validate(&agents).map_err(invalid)?;
        self.validate_hooks()
    }

    /// Each hook valid for the configured agents, and its name unique.
    fn validate_hooks(&self) -> anyhow::Result<()> {
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
    pub(crate) fn price_table(&self) -> anyhow::Result<PriceTable> {
        PriceTable::with_overrides(&self.prices).map_err(|e| anyhow::anyhow!("invalid config: {e}"))
    }

    /// The `[[schedules]]`, checked: names unique, expressions, zones, agents and prompt
    /// templates valid.
    pub(crate) fn compiled_schedules(&self) -> anyhow::Result<Vec<Schedule>> {
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
    pub(crate) fn anchor_paths(&mut self, dir: &Path) -> anyhow::Result<()> {
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
        let mcp_programs = self
            .agents
            .iter_mut()
            .flat_map(|a| a.mcp.iter_mut())
            .filter_map(|s| s.command.as_mut());
        for program in mcp_programs {
            if program.contains('/') && Path::new(program.as_str()).is_relative() {
                *program = dir.join(program.as_str()).display().to_string();
            }
        }
        self.base_dir = dir;
        Ok(())
    }

    /// A path from the file, resolved against the file's directory.
    pub(crate) fn resolve_path(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.join(p)
        }
    }
}

/// A problem found by [`Config::validate`], as every one is reported: `invalid config: …`.
fn invalid(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("invalid config: {e}")
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
