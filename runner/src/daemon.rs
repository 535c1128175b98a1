//! # The daemon
//!
//! `nightshift serve` as library functions: [`start`] composes every subsystem over one store
//! and returns the [`Running`] daemon, whose [`Running::wait`] returns once all of them have
//! stopped. In two steps, so a caller (the binary, the test suite) learns the bound address
//! first — with `server.address` on port 0 that is the only way to reach the API. Each
//! long-running subsystem is a [`Service`](crate::service::Service) (`run(self, stop)`);
//! this module only decides their order.
//!
//! ## Start order
//!
//! Everything that can fail happens before anything is spawned, so a daemon that cannot start
//! returns the error and leaves nothing running:
//!
//! 1. **identity**: the daemon id (host, pid, a random suffix) and the background task
//!    supervisor that owns tasks under it;
//! 2. **token**: the API token is resolved (and, when no variable holds one, made and kept in
//!    `<data_dir>/api-token`) first, because it is one of the secrets;
//! 3. **secrets**: the set of every secret the daemon holds is built once, installed for the
//!    log writer, and handed to the runtime, which redacts with it;
//! 4. **config**: the agent runtime (agents, models, tools, the sandbox probe), schedules,
//!    webhooks and the notifier are built — the whole config is checked before the database
//!    is touched;
//! 5. **listener**: `server.address` is bound (a taken port fails here, before migrating),
//!    and `telemetry.metrics_address` when set;
//! 6. **store**: migrations, the data directory and database made private, tool processes a
//!    crashed predecessor left are killed, and the config's schedules applied.
//!
//! [`Running::reloader`] reloads a changed config into the running subsystems (SIGHUP; see
//! [`crate::reload`]): the agent runtime the pool takes for each job, the intake's agents,
//! the webhooks, the notifier and the schedules.
//!
//! Then the subsystems are spawned: the schedule timer, retention (the purger, which acts
//! only while it holds its lease, and the sweep of this daemon's data directory), the
//! metrics listener, the HTTP server, the notifier, the task keeper, and last the worker
//! pool, so no run starts before the rest is up.
//!
//! ## Stop order
//!
//! The caller's `shutdown` token (in the binary: the first SIGTERM or SIGINT) stops the
//! daemon; so does the HTTP server failing, or the pool returning on its own. At that moment
//! the pool stops claiming, the HTTP server (and the metrics listener) stops accepting
//! (requests in flight are answered), the timer stops firing and no background task starts any more. Then, in this order:
//!
//! 1. **the pool drains**: running jobs finish within `worker.shutdown_grace_ms`, then their
//!    leases are released. First, because the runs ending now still need the rest;
//! 2. **background tasks are stopped** by the keeper and recorded as `lost`: after the pool,
//!    since a run finishing in the drain may still hear of its task;
//! 3. **the notifier** gets `NOTIFIER_GRACE` to send the notices of runs that ended in the
//!    drain; a notice still in flight then is sent again by the next daemon;
//! 4. **the HTTP server** and 5. **the timer** and **retention** are joined (all stopped at
//!    the first moment; the purger gives up its lease).
//!
//! Every subsystem is joined before [`Running::wait`] returns; the first failure is its error
//! (in the order keeper, HTTP server, metrics listener, timer, pool).
//!
//! Process-wide settings are the binary's, not this module's: signals, the umask and making
//! the process non-dumpable. The globals this module sets are the log writer's redactor
//! ([`redaction::install_for_logs`]) and the metrics recorder (`nightshift_telemetry::install`,
//! once per process).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use nightshift_agent::AgentRuntime;
use nightshift_agent::task_keeper::{self, TaskKeeper};
use nightshift_notify::Notifier;
use nightshift_scheduler::Intake;
use nightshift_scheduler::cron::{self as schedules, Schedule, Timer, TimerConfig};
use nightshift_scheduler::hooks::HookSet;
use nightshift_store::Store;
use nightshift_tools::{SecretResolver, TaskSupervisor};
use nightshift_worker::{Pool, PoolReport};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::reload::{LiveRuntime, Reloader};
use crate::service::{ApiServer, MetricsServer, NotifierSlot, Spawned};
use crate::{api, build_notifier, build_runtime, private, redaction};

/// How long the daemon waits, on its way out, for notices being sent.
const NOTIFIER_GRACE: Duration = Duration::from_secs(5);

/// Starts the daemon (see the start order); the returned [`Running`] has the bound address
/// and stops, in order, once `shutdown` fires. Nothing is left running on an error.
pub async fn start(
    config: &Config,
    store: Store,
    shutdown: CancellationToken,
) -> anyhow::Result<Running> {
    // Every variable the config names, all reported at once, before anything starts.
    crate::env_check::require_all(config)?;
    let daemon_id = daemon_id();
    nightshift_telemetry::install();
    nightshift_telemetry::build_info();
    let data_dir = config.resolve_path(&config.runtime.data_dir);
    let supervisor = task_keeper::supervisor(
        &store,
        &daemon_id,
        data_dir.join("tasks"),
        &config.runtime.background,
    );
    let (token, token_source) = api::resolve_token(&config.server.token_env, &data_dir)?;
    let tokens = crate::api_tokens::ApiTokens::from_config(token, &config.server.tokens)?;
    let secrets = secrets(config);
    redaction::require_runtime_secrets(config)?;
    let (run_ends, ended) = crate::retention::RunEnds::channel();
    // One hub of MCP sessions for the daemon's life: a reload's runtime takes it over, so a
    // run never has two of one server.
    let mcp = Arc::new(crate::mcp_hub::McpHub::default());
    let parts = Parts::build(config, &store, &supervisor, secrets, &run_ends, &mcp)?;
    let listener = bind(&config.server.address).await?;
    let address = listener.local_addr()?;
    let metrics_listener = bind_metrics(config).await?;
    let metrics_address = match &metrics_listener {
        Some(l) => Some(l.local_addr()?),
        None => None,
    };
    prepare_store(config, &store, &parts).await?;
    // From here on nothing fails: the subsystems are spawned, stopped by `stop`.
    let stop = shutdown.child_token();
    let intake = Intake::new(store.clone(), parts.runtime.agent_names());
    intake.set_batch_limit(config.server.max_batch_runs);
    let timer = spawn_timer(&intake, &daemon_id, &stop);
    let live_retention = crate::retention::LiveRetention::new(config.retention.clone());
    let retention = Spawned::spawn(
        crate::retention::Retention::new(&store, &daemon_id, &live_retention, &data_dir, ended),
        stop.clone(),
    );
    let state = api::ApiState {
        store: store.clone(),
        intake: intake.clone(),
        tokens,
        hooks: parts.hooks.clone(),
    };
    tracing::info!(%address, token = %token_source, "HTTP API listening");
    let metrics = metrics_listener.map(|l| spawn_metrics(l, state.clone(), &stop));
    // The config applied last: the reloader replaces it, the export reads it.
    let live_config = Arc::new(Mutex::new(config.clone()));
    let live = api::LiveConfig(live_config.clone());
    let server = spawn_server(listener, state, data_dir.clone(), live, &stop);
    let notifier = Spawned::spawn(parts.notifier, CancellationToken::new());
    let notifier: NotifierSlot = Arc::new(Mutex::new(Some(notifier)));
    let keeper = spawn_keeper(config, &store, daemon_id, &supervisor);
    refuse_tasks_on_stop(&supervisor, &stop);
    let runtime = LiveRuntime::new(parts.runtime);
    let reloader = Reloader {
        store: store.clone(),
        intake,
        hooks: parts.hooks,
        runtime: runtime.clone(),
        supervisor: supervisor.clone(),
        run_ends,
        mcp,
        notifier: notifier.clone(),
        retention: live_retention,
        config: live_config,
        busy: Arc::default(),
    };
    let pool = Pool::new(store.clone(), runtime, config.worker.clone());
    let pool = Spawned::spawn(pool, stop.clone());
    Ok(Running {
        reloader,
        address,
        metrics_address,
        stop,
        pool,
        keeper,
        notifier,
        server,
        metrics,
        timer,
        retention,
    })
}

/// A running daemon: its address, and [`Running::wait`] to see it stop.
#[derive(Debug)]
pub struct Running {
    address: SocketAddr,
    /// Reloads the config into the running daemon (SIGHUP).
    reloader: Reloader,
    metrics_address: Option<SocketAddr>,
    /// Stops every subsystem that stops at once (a child of the caller's `shutdown`): the
    /// pool, the HTTP server, the metrics listener and the timer run until it.
    stop: CancellationToken,
    pool: Spawned<PoolReport>,
    /// The keeper and the notifier have tokens of their own: they stop later.
    keeper: Spawned<()>,
    notifier: NotifierSlot,
    server: Spawned<()>,
    /// `GET /metrics` without the token on `telemetry.metrics_address`, when set.
    metrics: Option<Spawned<()>>,
    timer: Spawned<()>,
    /// The purger and this daemon's sweep, stopped at once like the timer.
    retention: Spawned<()>,
}

/// How a daemon stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped {
    /// What happened to the jobs the pool ran, the drained ones included.
    pub pool: PoolReport,
    /// Whether notices were still being sent when `NOTIFIER_GRACE` ran out (they are sent
    /// again by the next daemon).
    pub notices_cut_short: bool,
}

impl Running {
    /// The address the HTTP API listens on (the port the system chose, for port 0).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// What reloads a new config into this daemon (see [`crate::reload`]).
    pub fn reloader(&self) -> Reloader {
        self.reloader.clone()
    }

    /// The address of `GET /metrics` without the token (`telemetry.metrics_address`), if set.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics_address
    }

    /// Waits for the shutdown, then stops the subsystems in the documented order. Every one
    /// is joined; the first that failed is the error.
    pub async fn wait(self) -> anyhow::Result<Stopped> {
        // 1. The pool drains; then everything that stops at once stops (in case the pool
        // returned on its own).
        let pooled = self.pool.join().await;
        self.stop.cancel();
        // 2. The background tasks are stopped (recorded as lost).
        let kept = self.keeper.stop().await;
        // 3. The notifier running now (a reload may have replaced the first) gets its grace.
        let notifier = self
            .notifier
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let notices_cut_short = match notifier {
            Some(notifier) => stop_notifier(notifier).await,
            None => false,
        };
        // 4. The HTTP server (and the metrics listener) and 5. the timer, stopped since the
        // first moment.
        let served = self.server.join().await;
        let metrics_served = match self.metrics {
            Some(metrics) => metrics.join().await,
            None => Ok(()),
        };
        let timed = self.timer.join().await;
        let retained = self.retention.join().await;
        kept?;
        served?;
        metrics_served?;
        timed?;
        retained?;
        Ok(Stopped {
            pool: pooled?,
            notices_cut_short,
        })
    }
}

/// What the config builds before the database is touched.
struct Parts {
    runtime: AgentRuntime,
    schedules: Vec<Schedule>,
    hooks: Arc<HookSet>,
    notifier: Notifier,
}

impl Parts {
    /// The runtime (with background tasks under `supervisor`, redacting with `secrets`), the
    /// compiled schedules, the webhooks and the notifier. Any config problem is an error.
    fn build(
        config: &Config,
        store: &Store,
        supervisor: &TaskSupervisor,
        secrets: SecretResolver,
        run_ends: &crate::retention::RunEnds,
        mcp: &Arc<crate::mcp_hub::McpHub>,
    ) -> anyhow::Result<Parts> {
        let redactor = secrets.redactor().clone();
        let runtime = build_runtime(
            config,
            Some(supervisor.clone()),
            secrets,
            Some(run_ends.clone()),
            Some(mcp.clone()),
        )?;
        let schedules = config.compiled_schedules()?;
        let hooks = Arc::new(crate::hooks::build(config)?);
        for hook in hooks.iter() {
            tracing::info!(hook = %hook.name, path = %format!("/hooks/{}", hook.name),
                           signature = hook.scheme.name(), routes = ?hook.route_names(), "webhook ready");
        }
        let notifier = build_notifier(store.clone(), config, redactor)?;
        Ok(Parts {
            runtime,
            schedules,
            hooks,
            notifier,
        })
    }
}

/// This daemon's id: host, pid and a random suffix (two daemons never share one).
fn daemon_id() -> String {
    format!(
        "{}:{}:{}",
        nightshift_worker::hostname(),
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Every secret the daemon holds, built once (after the token is resolved, as it is one of
/// them); from now on every log line is redacted with it.
fn secrets(config: &Config) -> SecretResolver {
    let secrets = redaction::secrets(config);
    redaction::install_for_logs(secrets.redactor().clone());
    secrets
}

async fn bind(address: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address} (server.address)"))
}

/// The listener of `telemetry.metrics_address`, when set (a taken port fails the start).
async fn bind_metrics(config: &Config) -> anyhow::Result<Option<TcpListener>> {
    let Some(address) = config.telemetry.metrics_address else {
        return Ok(None);
    };
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address} (telemetry.metrics_address)"))?;
    Ok(Some(listener))
}

/// `GET /metrics` without the token on `listener` until `stop`; failing, it takes the daemon
/// down like the API server.
fn spawn_metrics(
    listener: TcpListener,
    state: api::ApiState,
    stop: &CancellationToken,
) -> Spawned<()> {
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, "metrics listening (GET /metrics, no token)");
    }
    Spawned::linked(MetricsServer { listener, state }, stop.clone())
}

/// The schedule timer, firing until `stop`.
fn spawn_timer(intake: &Intake, daemon_id: &str, stop: &CancellationToken) -> Spawned<()> {
    let timer = Timer::new(intake.clone(), daemon_id, TimerConfig::default());
    Spawned::spawn(timer, stop.clone())
}

/// The HTTP API on `listener` until `stop` (answering requests in flight). A server that
/// stops on its own (an error) takes the daemon down with it.
fn spawn_server(
    listener: TcpListener,
    state: api::ApiState,
    data_dir: std::path::PathBuf,
    live: api::LiveConfig,
    stop: &CancellationToken,
) -> Spawned<()> {
    let server = ApiServer {
        listener,
        state,
        data_dir,
        live,
    };
    Spawned::linked(server, stop.clone())
}

/// Migrates, makes the data directory and database private, kills tool processes a crashed
/// predecessor left, and applies the config's schedules.
async fn prepare_store(config: &Config, store: &Store, parts: &Parts) -> anyhow::Result<()> {
    let report = store.migrate().await?;
    let data_dir = config.resolve_path(&config.runtime.data_dir);
    private::tighten(
        &data_dir,
        private::sqlite_file(&config.database.url).as_deref(),
    )
    .context("cannot make the data directory and the database private (0700/0600)")?;
    tracing::info!(
        backend = ?store.backend_kind(),
        schema_version = report.version,
        agents = ?parts.runtime.agent_names(),
        "store ready"
    );
    let reaped = crate::reap_orphaned_tools(config)
        .context("cannot clean up tool processes left by a previous daemon")?;
    if reaped > 0 {
        tracing::warn!(
            reaped,
            "killed tool processes a crashed daemon left running"
        );
    }
    let sync = schedules::apply_config(store, &parts.schedules).await?;
    tracing::info!(
        from_config = sync.applied.len(),
        removed = sync.removed.len(),
        total = store.schedules().await?.len(),
        "schedules ready"
    );
    Ok(())
}

/// The task keeper: it outlives the pool's drain (a run finishing in it may still hear of a
/// task), then stops the remaining tasks and records them as lost.
fn spawn_keeper(
    config: &Config,
    store: &Store,
    daemon_id: String,
    supervisor: &TaskSupervisor,
) -> Spawned<()> {
    let keeper = TaskKeeper::new(
        store.clone(),
        daemon_id,
        supervisor.clone(),
        &config.runtime.background,
    );
    Spawned::spawn(keeper, CancellationToken::new())
}

/// From the first moment of the stop, no task starts and a task killed by a signal (a
/// service manager may signal the whole group) counts as lost.
fn refuse_tasks_on_stop(supervisor: &TaskSupervisor, stop: &CancellationToken) {
    let (stop, supervisor) = (stop.clone(), supervisor.clone());
    tokio::spawn(async move {
        stop.cancelled().await;
        supervisor.begin_shutdown();
    });
}

/// Step 3: the notifier's last pass, for at most [`NOTIFIER_GRACE`]. Returns whether it was
/// cut short.
async fn stop_notifier(notifier: Spawned<()>) -> bool {
    if notifier.stop_within(NOTIFIER_GRACE).await.is_some() {
        return false;
    }
    // A POST still in flight is sent again, by the next daemon, once its claim runs out.
    tracing::warn!("stopping with run notices in flight; they are sent again later");
    true
}
