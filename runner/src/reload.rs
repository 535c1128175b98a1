//! # Reloading the config without a restart (SIGHUP)
//!
//! `systemctl reload` (SIGHUP) makes a running daemon read its config file again. What it
//! guarantees:
//!
//! - **Checked first, all or nothing.** The new file is loaded and everything it builds is
//!   built exactly as `serve` builds it at start — agents with their models, tools and
//!   sandbox, schedules, webhooks with their secrets, notify targets with theirs, the set of
//!   secrets to redact — before anything changes. A file with any error changes nothing: the
//!   daemon keeps running on the config it had and logs the error, which names the key.
//! - **What is applied.** Agents (new ones take runs, removed ones are refused for new runs,
//!   changed ones are used by the next job of each run — a job already running finishes on
//!   the definition it started with), command tools and tool settings, webhooks (a hook kept
//!   by name keeps its counts), schedules from the file (applied to the store as at start),
//!   notify targets, `runtime.secrets` and the log redaction set, model prices, and
//!   `[retention]` (the purger and the sweep read it at their next round).
//! - **What needs a restart**, because it is what the daemon is built on: `[database]`,
//!   `[worker]`, `[server]`, `[log]`, `runtime.data_dir` and `runtime.background`. A reload
//!   that changes one of them applies the rest and logs, naming each, that it takes effect at
//!   the next start.
//! - **Never a silent death.** SIGHUP never stops the daemon, whatever the file holds.
//!
//! `Reloader::prepare` decides (builds and checks, no effect); `Reloader::apply` swaps.

use std::sync::{Arc, Mutex, RwLock};

use anyhow::Context;
use nightshift_agent::AgentRuntime;
use nightshift_notify::Notifier;
use nightshift_scheduler::Intake;
use nightshift_scheduler::cron::{self as schedules, Schedule};
use nightshift_scheduler::hooks::HookSet;
use nightshift_store::Store;
use nightshift_tools::TaskSupervisor;
use nightshift_worker::{Handler, JobContext, JobOutcome};

use crate::config::{Config, Overrides};
use crate::service::{NotifierSlot, Spawned};
use crate::{build_notifier, build_runtime, redaction};

/// The agent runtime the worker pool runs jobs with, replaceable while it runs: each job
/// takes the runtime current when it starts and keeps it to its end.
#[derive(Clone)]
pub(crate) struct LiveRuntime {
    current: Arc<RwLock<Arc<AgentRuntime>>>,
}

impl std::fmt::Debug for LiveRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveRuntime")
            .field("agents", &self.get().agent_names())
            .finish()
    }
}

impl LiveRuntime {
    pub(crate) fn new(runtime: AgentRuntime) -> Self {
        Self {
            current: Arc::new(RwLock::new(Arc::new(runtime))),
        }
    }

    /// The runtime new jobs start on.
    pub(crate) fn get(&self) -> Arc<AgentRuntime> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set(&self, runtime: AgentRuntime) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(runtime);
    }
}

impl Handler for LiveRuntime {
    fn handle(&self, ctx: JobContext) -> impl Future<Output = JobOutcome> + Send {
        let runtime = self.get();
        async move { runtime.handle(ctx).await }
    }
}

/// The settings only a restart changes, by key: `(key, old, new)` compared as text.
fn restart_only(old: &Config, new: &Config) -> Vec<&'static str> {
    let differs =
        |a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| format!("{a:?}") != format!("{b:?}");
    let mut keys = Vec::new();
    for (key, changed) in [
        ("database", differs(&old.database, &new.database)),
        ("worker", differs(&old.worker, &new.worker)),
        ("server", differs(&old.server, &new.server)),
        ("log", differs(&old.log, &new.log)),
        ("telemetry", differs(&old.telemetry, &new.telemetry)),
        (
            "runtime.data_dir",
            differs(&old.runtime.data_dir, &new.runtime.data_dir),
        ),
        (
            "runtime.background",
            differs(&old.runtime.background, &new.runtime.background),
        ),
    ] {
        if changed {
            keys.push(key);
        }
    }
    keys
}

/// A new config, built and checked, ready to [`Reloader::apply`].
pub(crate) struct Prepared {
    config: Config,
    runtime: AgentRuntime,
    schedules: Vec<Schedule>,
    hooks: HookSet,
    notifier: Notifier,
    secrets: nightshift_tools::SecretResolver,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("agents", &self.runtime.agent_names())
            .finish_non_exhaustive()
    }
}

/// What a reload changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reloaded {
    /// The agents runs are taken for now.
    pub agents: Vec<String>,
    /// The hooks now served.
    pub hooks: Vec<String>,
    /// How many schedules the file has.
    pub schedules: usize,
    /// Keys that changed but apply only at the next start.
    pub needs_restart: Vec<&'static str>,
}

/// What a running daemon reloads: every holder of a reloadable part.
#[derive(Clone)]
pub struct Reloader {
    pub(crate) store: Store,
    pub(crate) intake: Intake,
    pub(crate) hooks: Arc<HookSet>,
    pub(crate) runtime: LiveRuntime,
    pub(crate) supervisor: TaskSupervisor,
    /// Where each runtime tells the sweep of the runs that end.
    pub(crate) run_ends: crate::retention::RunEnds,
    /// The daemon's MCP sessions, kept across reloads.
    pub(crate) mcp: Arc<crate::mcp_hub::McpHub>,
    /// The running notifier (a reload starts a new one, then stops the old one).
    pub(crate) notifier: NotifierSlot,
    /// The `[retention]` the purger and the sweep read at each round.
    pub(crate) retention: crate::retention::LiveRetention,
    /// The config applied last.
    pub(crate) config: Arc<Mutex<Config>>,
    /// One reload at a time.
    pub(crate) busy: Arc<tokio::sync::Mutex<()>>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader").finish_non_exhaustive()
    }
}

impl Reloader {
    /// Builds everything `config` describes, as `serve` would at start; changes nothing.
    pub(crate) fn prepare(&self, config: Config) -> anyhow::Result<Prepared> {
        let secrets = redaction::secrets(&config);
        redaction::require_runtime_secrets(&config)?;
        let runtime = build_runtime(
            &config,
            Some(self.supervisor.clone()),
            secrets.clone(),
            Some(self.run_ends.clone()),
            Some(self.mcp.clone()),
        )?;
        let schedules = config.compiled_schedules()?;
        let hooks = crate::hooks::build(&config)?;
        let notifier = build_notifier(self.store.clone(), &config, secrets.redactor().clone())?;
        Ok(Prepared {
            config,
            runtime,
            schedules,
            hooks,
            notifier,
            secrets,
        })
    }

    /// Applies a prepared config: the schedules to the store first (the one step that can
    /// fail, leaving everything else as it was), then every in-memory part at once.
    pub(crate) async fn apply(&self, prepared: Prepared) -> anyhow::Result<Reloaded> {
        let _one = self.busy.lock().await;
        let Prepared {
            config,
            runtime,
            schedules: compiled,
            hooks,
            notifier,
            secrets,
        } = prepared;
        schedules::apply_config(&self.store, &compiled)
            .await
            .context("cannot apply the schedules to the store")?;
        let needs_restart = {
            let old = self.config.lock().unwrap_or_else(|e| e.into_inner());
            restart_only(&old, &config)
        };
        redaction::install_for_logs(secrets.redactor().clone());
        self.store
            .set_notifying_agents(crate::notifying_agents(&config.agents));
        crate::tell_run_ends(&self.store, &config.agents);
        let agents = runtime.agent_names();
        self.intake.set_agents(agents.clone());
        self.runtime.set(runtime);
        self.hooks.replace(hooks);
        self.retention.set(config.retention.clone());
        let fresh = Spawned::spawn(notifier, tokio_util::sync::CancellationToken::new());
        let old = self
            .notifier
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(fresh);
        // The old notifier makes its last pass and returns; deliveries are claimed in the
        // store, so the two never send one notice twice.
        if let Some(old) = old {
            old.cancel();
        }
        let hooks = self.hooks.iter().map(|h| h.name.clone()).collect();
        *self.config.lock().unwrap_or_else(|e| e.into_inner()) = config;
        Ok(Reloaded {
            agents,
            hooks,
            schedules: compiled.len(),
            needs_restart,
        })
    }

    /// Loads the file at `path` (with `overrides`, as `serve` did), prepares and applies it.
    pub(crate) async fn reload(
        &self,
        path: Option<&std::path::Path>,
        overrides: &Overrides,
    ) -> anyhow::Result<Reloaded> {
        let config = Config::load(path, overrides)?;
        let prepared = self.prepare(config)?;
        self.apply(prepared).await
    }
}

/// What SIGHUP logs when the new config is applied.
pub const RELOADED: &str = "SIGHUP: the config was reloaded";
/// What SIGHUP logs when the new config is refused.
pub const REFUSED: &str = "SIGHUP: the config is invalid; still running on the config it had";

/// Takes SIGHUP over from its default action (which would kill the process at once): from
/// here on a SIGHUP waits in the returned stream for [`on_sighup`]. Call it first thing.
pub fn hangups() -> anyhow::Result<tokio::signal::unix::Signal> {
    use tokio::signal::unix::{SignalKind, signal};
    signal(SignalKind::hangup()).context("cannot install the SIGHUP handler")
}

/// Reloads the config file at `path` on every SIGHUP of `hup` (from [`hangups`]) until the
/// process ends, logging what changed or why nothing did. SIGHUP never stops the daemon.
pub fn on_sighup(
    mut hup: tokio::signal::unix::Signal,
    reloader: Reloader,
    path: Option<std::path::PathBuf>,
    overrides: Overrides,
) {
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match reloader.reload(path.as_deref(), &overrides).await {
                Ok(done) => {
                    tracing::info!(
                        agents = ?done.agents,
                        hooks = ?done.hooks,
                        schedules = done.schedules,
                        "{RELOADED}"
                    );
                    if !done.needs_restart.is_empty() {
                        tracing::warn!(
                            keys = ?done.needs_restart,
                            "SIGHUP: these settings changed but apply only at a restart: {}",
                            done.needs_restart.join(", ")
                        );
                    }
                }
                Err(e) => tracing::error!(error = %format!("{e:#}"), "{REFUSED}"),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_settings_the_daemon_is_built_on_need_a_restart() {
        let old = Config::parse("", "x").unwrap();
        let mut new = old.clone();
        new.runtime.output_cap_bytes = 1;
        new.runtime.secrets = vec![nightshift_tools::SecretSpec::unbound("T")];
        new.retention.keep_days = 7;
        new.retention.keep_workspace = true;
        assert!(restart_only(&old, &new).is_empty());
        new.worker.slots = 99;
        new.server.address = "127.0.0.1:1".into();
        new.runtime.data_dir = "/elsewhere".into();
        new.telemetry.service_name = "other".into();
        assert_eq!(
            restart_only(&old, &new),
            ["worker", "server", "telemetry", "runtime.data_dir"]
        );
    }
}
