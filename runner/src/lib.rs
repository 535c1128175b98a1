//! # nightshift (library)
//!
//! The wiring of the `nightshift` binary, as a library so the test suite can build exactly
//! what the daemon runs: the layered [`config`], the `gateway` to the model providers, the
//! [`toolbox`] of real tools, `build_runtime`, which turns a config into the agent
//! runtime the worker pool drives, and the [`daemon`] itself (`nightshift serve`): every
//! subsystem started and stopped in a documented order, so a test can run a whole daemon in
//! process.

pub mod api;
pub(crate) mod api_errors;
pub mod api_tokens;
pub(crate) mod audit_api;
pub(crate) mod batch_api;
pub mod config;
pub mod daemon;
pub mod demo;
pub(crate) mod env_check;
pub mod fork_guard;
pub(crate) mod gateway;
pub mod github;
pub mod hooks;
pub(crate) mod http_server;
pub mod logging;
pub(crate) mod mcp_hub;
pub(crate) mod metrics;
pub mod openapi;
pub mod private;
pub(crate) mod programs;
pub(crate) mod queue_api;
pub mod redaction;
pub mod reload;
pub mod replay;
pub mod retention;
pub(crate) mod retention_api;
pub(crate) mod sandbox;
pub(crate) mod sandbox_path;
pub(crate) mod schedules_api;
pub(crate) mod service;
pub(crate) mod tasks_api;
pub mod toolbox;
pub mod transcript;
pub(crate) mod workspace;

use std::sync::Arc;

use nightshift_agent::AgentRuntime;
use nightshift_notify::Notifier;
use nightshift_store::{Store, SystemClock};

use crate::config::Config;
use crate::gateway::Gateway;
use crate::toolbox::Tools;

/// The agent runtime for `config`: every agent resolved (system prompts read, hashes
/// taken), its model chain and its tools built. Any problem is an error naming the agent and
/// the key. With `tasks`, `run_command` can start background commands under that supervisor;
/// without, a background call is refused. `secrets` (see [`redaction::secrets`]) is what the
/// tools substitute and what the runtime redacts with. With `run_ends`, each run that ends
/// in the loop is told to the daemon's sweep, which removes its workspace once the end is
/// written.
pub(crate) fn build_runtime(
    config: &Config,
    tasks: Option<nightshift_tools::TaskSupervisor>,
    secrets: nightshift_tools::SecretResolver,
    run_ends: Option<retention::RunEnds>,
    mcp: Option<Arc<mcp_hub::McpHub>>,
) -> anyhow::Result<AgentRuntime> {
    let prices = config.price_table()?;
    let defs = config
        .agents
        .iter()
        .map(|a| a.resolve_with(&config.base_dir, &prices))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("invalid config: {e}"))?;
    let gateway = Gateway::build(config)?;
    let mut tools = Tools::build_with(config, secrets)?;
    if let Some(tasks) = tasks {
        tools = tools.with_tasks(tasks);
    }
    if let Some(ends) = run_ends {
        tools = tools.with_run_ends(ends);
    }
    if let Some(hub) = mcp {
        tools = tools.with_mcp_hub(hub);
    }
    let redactor = tools.secrets().redactor().clone();
    Ok(AgentRuntime::new(defs, Arc::new(gateway), Arc::new(tools)).with_redactor(redactor))
}

/// The notifier `serve` runs for `config`: its agents' notify URLs (signing secrets from the
/// environment), and their check runs completed through `[github]`; a failed attempt's error
/// is redacted with `redactor` (every secret the daemon holds).
pub fn build_notifier(
    store: Store,
    config: &Config,
    redactor: nightshift_tools::Redactor,
) -> anyhow::Result<Notifier> {
    let notifier = Notifier::new(store, &config.agents)?.with_redactor(redactor);
    Ok(notifier.with_github(crate::github::access(config)?))
}

/// Connects to the store `config` names and tells it which agents notify (those with
/// `[[agents.notify]]` entries or a check run), so that a run this process enqueues leaves an outbox row
/// when it ends exactly when its agent has somewhere to send the notice. Every command that
/// opens the store opens it here.
pub async fn open_store(config: &Config) -> nightshift_store::Result<Store> {
    let store = Store::connect(&config.database, Arc::new(SystemClock)).await?;
    store.set_notifying_agents(notifying_agents(&config.agents));
    tell_run_ends(&store, &config.agents);
    Ok(store)
}

/// Has `store` tell the metrics and traces of each run whose end it decides (a cancel or
/// supersession while the run is queued or asleep, a retry on the last attempt, a rescue of
/// a lost worker's job: `Store::on_run_ended_by_store`), as the runtime tells of the runs
/// their jobs end: under the run's agent when `agents` configures it, else `unknown`.
/// [`open_store`] and a config reload call it.
pub(crate) fn tell_run_ends(store: &Store, agents: &[nightshift_agent::AgentConfig]) {
    let configured: std::collections::BTreeSet<String> =
        agents.iter().map(|a| a.name.clone()).collect();
    store.on_run_ended_by_store(Arc::new(move |run| {
        nightshift_agent::run_ended_by_store(run, configured.contains(&run.agent));
    }));
}

/// The names of the agents whose runs' ends are written to the outbox: those with notify
/// URLs, and those keeping a check run (completed from the outbox, see
/// `nightshift_notify::checks`).
pub fn notifying_agents(agents: &[nightshift_agent::AgentConfig]) -> Vec<String> {
    agents
        .iter()
        .filter(|a| !a.notify.is_empty() || a.github.check_run.is_some())
        .map(|a| a.name.clone())
        .collect()
}

/// Kills tool process groups that a daemon on the same data directory left running when it
/// crashed (see `nightshift_tools::ProcessRegistry`). `serve` calls it before resuming runs.
pub(crate) fn reap_orphaned_tools(config: &Config) -> std::io::Result<usize> {
    nightshift_tools::ProcessRegistry::new(
        config.resolve_path(&config.runtime.data_dir).join("procs"),
    )
    .reap()
}
