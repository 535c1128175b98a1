//! [`Store`]: the one handle to the durable store, whichever backend is behind it.
//!
//! Enqueues (`enqueue.rs`) and reads go through the `Store`; changes to a claimed job go only
//! through the [`LeasedJob`] that `claim` returns (`leased.rs`), each guarded by the job's
//! lease token. This file holds the handle itself (connecting, the clock, the wake-up
//! signals, the hook told of runs the store ends), claims, cancels and reads, and the small
//! rules of a run's row the statements share.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::backend::Backend as _;
use crate::batch::ClaimRequest;
use crate::clock::{Clock, Millis};
use crate::config::{BackendKind, StoreConfig};
use crate::error::LeaseLostReason;
use crate::group::{Group, Takes};
use crate::leased::LeasedJob;
use crate::migrate::{self, MigrationReport};
use crate::model::{CancelOutcome, Checkpoint, Event, Job, JobCount, RetryOutcome, Run, WorkerRow};
use crate::postgres::PgBackend;
use crate::queue::{self, LeaseProbe};
use crate::sqlite::SqliteBackend;
use crate::states::{JobState, RunStatus};
use crate::writes::WriteSeam;
use crate::{Error, Result};

/// The store's one backend, whichever it is (the trait every backend implements is
/// [`crate::backend::Backend`]).
#[derive(Debug)]
pub(crate) enum AnyBackend {
    Sqlite(SqliteBackend),
    Postgres(PgBackend),
}

/// Calls the same operation on whichever backend is configured. Other modules of the crate
/// add their own `impl Store` blocks with it (`use crate::store::dispatch;`).
macro_rules! dispatch {
    ($self:ident, $b:ident => $call:expr) => {
        match &$self.inner.backend {
            $crate::store::AnyBackend::Sqlite($b) => $call.await,
            $crate::store::AnyBackend::Postgres($b) => $call.await,
        }
    };
}
pub(crate) use dispatch;

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) backend: AnyBackend,
    clock: Arc<dyn Clock>,
    wake: watch::Sender<u64>,
    /// Bumped when a schedule was created, changed or deleted (here, or on PostgreSQL by any
    /// daemon): the schedule timer's wake-up.
    schedules_changed: watch::Sender<u64>,
    listener: Option<tokio::task::JoinHandle<()>>,
    /// When (by the clock) this store last returned expired leases to the queue.
    pub(crate) last_rescue: std::sync::atomic::AtomicI64,
    /// The agents whose runs notify (see [`Store::set_notifying_agents`]).
    notifying: std::sync::RwLock<BTreeSet<String>>,
    /// The group commit of single enqueues, and of webhook deliveries where `deliveries` is
    /// `None` (`group.rs`).
    group: Group,
    /// SQLite's group commit of webhook deliveries, on a thread of its own
    /// (`Group::start_on_own_thread`).
    deliveries: Option<Group>,
    /// Told of each run whose end this store decides (see
    /// [`Store::on_run_ended_by_store`]).
    ended_by_store: EndedHook,
    /// Which writer takes each enqueue and delivery, and the paths taken (`writes.rs`).
    pub(crate) writes: Arc<WriteSeam>,
}

/// What [`Store::on_run_ended_by_store`] calls with a run the store just ended.
pub type RunEndedHook = Arc<dyn Fn(&Run) + Send + Sync>;

/// The hook of [`Store::on_run_ended_by_store`], if one was given.
#[derive(Default)]
struct EndedHook(std::sync::RwLock<Option<RunEndedHook>>);

impl std::fmt::Debug for EndedHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EndedHook")
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(listener) = &self.listener {
            listener.abort();
        }
    }
}

/// The durable store: runs, jobs, events, checkpoints, workers. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

/// Waits for "there may be new work" signals from this store (see [`Store::subscribe`]).
#[derive(Debug)]
pub struct WorkSignal {
    rx: watch::Receiver<u64>,
}

impl WorkSignal {
    /// Returns when work may have arrived since the last call, or after `timeout` (the poll
    /// fallback). Never misses a signal sent between two calls.
    pub async fn wait(&mut self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.rx.changed()).await;
    }
}

impl Store {
    /// Connects to the database named by `config` (without migrating it).
    pub async fn connect(config: &StoreConfig, clock: Arc<dyn Clock>) -> Result<Store> {
        config
            .validate()
            .map_err(|e| Error::Config(e.to_string()))?;
        let (wake, _) = watch::channel(0u64);
        let (schedules_changed, _) = watch::channel(0u64);
        let writes = Arc::new(WriteSeam::default());
        let (backend, listener, group, deliveries) = match config
            .backend()
            .map_err(|e| Error::Config(e.to_string()))?
        {
            BackendKind::Sqlite => {
                let sqlite = SqliteBackend::connect(config).await?;
                let group = Group::start(sqlite.clone(), 1, Takes::Everything, writes.clone());
                let deliveries =
                    Group::start_on_own_thread(sqlite.clone(), Takes::Everything, writes.clone())
                        .map_err(|e| Error::Connect {
                        target: config.url.clone(),
                        detail: format!("cannot start the store's writer thread: {e}"),
                    })?;
                (AnyBackend::Sqlite(sqlite), None, group, Some(deliveries))
            }
            BackendKind::Postgres => {
                let pg = PgBackend::connect(config).await?;
                let writers = crate::group::postgres_writers(config.max_connections);
                let group = Group::start(pg.clone(), writers, Takes::PlainRuns, writes.clone());
                let tx = wake.clone();
                let schedules = schedules_changed.clone();
                let listener = pg.spawn_listener(move |payload| {
                    let bump = |n: &mut u64| *n = n.wrapping_add(1);
                    if payload != Some(crate::postgres::SCHEDULES_CHANGED) {
                        tx.send_modify(bump);
                    }
                    if payload.is_none_or(|p| p == crate::postgres::SCHEDULES_CHANGED) {
                        schedules.send_modify(bump);
                    }
                });
                (AnyBackend::Postgres(pg), Some(listener), group, None)
            }
        };
        Ok(Store {
            inner: Arc::new(Inner {
                backend,
                clock,
                wake,
                schedules_changed,
                listener,
                last_rescue: std::sync::atomic::AtomicI64::new(i64::MIN),
                notifying: std::sync::RwLock::default(),
                ended_by_store: EndedHook::default(),
                writes,
                group,
                deliveries,
            }),
        })
    }

    /// Applies any migrations this binary has and the database lacks.
    pub async fn migrate(&self) -> Result<MigrationReport> {
        match &self.inner.backend {
            AnyBackend::Sqlite(b) => migrate::apply_sqlite(&mut *b.writer().await?).await,
            AnyBackend::Postgres(b) => migrate::apply_postgres(b.pool(), b.schema()).await,
        }
    }

    /// Which backend this store uses.
    pub fn backend_kind(&self) -> BackendKind {
        match &self.inner.backend {
            AnyBackend::Sqlite(_) => BackendKind::Sqlite,
            AnyBackend::Postgres(_) => BackendKind::Postgres,
        }
    }

    /// The store's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The current time by the store's clock.
    pub fn now(&self) -> Millis {
        self.inner.clock.now()
    }

    /// A signal that fires when work may be available (an enqueue in this process, or a
    /// `NOTIFY` from any process on PostgreSQL).
    pub fn subscribe(&self) -> WorkSignal {
        WorkSignal {
            rx: self.inner.wake.subscribe(),
        }
    }

    /// A signal that fires when a schedule was created, changed or deleted: through this
    /// store, or on PostgreSQL through any daemon's. The schedule timer waits on it, so an
    /// edit that moves a fire earlier is seen at once.
    pub fn subscribe_schedules(&self) -> WorkSignal {
        WorkSignal {
            rx: self.inner.schedules_changed.subscribe(),
        }
    }

    /// Tells the schedule timers of every daemon that a schedule changed (see
    /// [`Store::subscribe_schedules`]). Called only after the change committed.
    pub(crate) async fn schedules_changed(&self) {
        self.inner
            .schedules_changed
            .send_modify(|n| *n = n.wrapping_add(1));
        if let AnyBackend::Postgres(pg) = &self.inner.backend {
            pg.announce_schedules().await;
        }
    }

    /// Wakes idle workers after a committed write made work due (or moved a due time
    /// earlier): this process's pools at once, and on PostgreSQL other daemons' through a
    /// coalesced `NOTIFY` (`announce.rs`). Called only after the commit, so whoever wakes finds
    /// the work.
    pub(crate) fn wake(&self) {
        self.inner.wake.send_modify(|n| *n = n.wrapping_add(1));
        if let AnyBackend::Postgres(pg) = &self.inner.backend {
            pg.announce();
        }
    }

    /// The group commit of single enqueues (`group.rs`).
    pub(crate) fn group(&self) -> &Group {
        &self.inner.group
    }

    /// The group commit of webhook deliveries (`group.rs`).
    pub(crate) fn delivery_group(&self) -> &Group {
        self.inner.deliveries.as_ref().unwrap_or(&self.inner.group)
    }

    /// Tells the store which agents notify: a run of one of them enqueued from now on is
    /// marked `notify`, and its end leaves an outbox row for the notifier to deliver to the
    /// agent's notify URLs (`notifications.rs`). Runs of other agents leave none: nobody would
    /// be told, and the row and its expansion would be written for nothing. Replaces the set
    /// given before; a new store has none. The daemon and the CLI call this with the agents
    /// that have notify URLs in their config.
    pub fn set_notifying_agents<I, S>(&self, agents: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let agents: BTreeSet<String> = agents.into_iter().map(Into::into).collect();
        *self
            .inner
            .notifying
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = agents;
    }

    /// Whether runs of `agent` notify (see [`Store::set_notifying_agents`]).
    pub fn notifies(&self, agent: &str) -> bool {
        self.inner
            .notifying
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(agent)
    }

    /// Calls `hook` with every run whose end this store decides, once the end is committed,
    /// with the run as it was ended: a cancellation or supersession of a run no job of which
    /// runs (queued or asleep), a retry or deferral that dead-letters its job (`failed` after
    /// the last attempt, `cancelled` when a cancel was pending), a park that finds a cancel
    /// pending, a rescue of a lost worker's job. The one end it does not tell of is a job's
    /// own (`LeasedJob::complete`, a settle's ends), which the worker that ran the job tells
    /// of; so each end is told of once, by the process that made it. Replaces the hook given
    /// before; a new store has none. The daemon counts these ends in its metrics and writes
    /// their run spans.
    pub fn on_run_ended_by_store(&self, hook: RunEndedHook) {
        *self
            .inner
            .ended_by_store
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(hook);
    }

    /// Tells the hook of [`Store::on_run_ended_by_store`] of runs `ended` (committed). A
    /// run that cannot be read is only logged: the end stands whatever the hook sees.
    pub(crate) async fn tell_ended(&self, ended: &[String]) {
        if ended.is_empty() {
            return;
        }
        let hook = self
            .inner
            .ended_by_store
            .0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let Some(hook) = hook else {
            return;
        };
        for run_id in ended {
            match self.run(run_id).await {
                Ok(Some(run)) if run.status.is_terminal() => hook(&run),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(run_id = %run_id, error = %e, "cannot read a run just ended")
                }
            }
        }
    }

    /// The newest unfinished run (queued, running, waiting or awaiting approval) whose
    /// concurrency key is `key`.
    pub async fn active_run_by_concurrency_key(&self, key: &str) -> Result<Option<Run>> {
        dispatch!(self, b => queue::active_run_by_concurrency_key(b, key))
    }

    /// Claims up to `limit` due jobs for `worker`, in priority, `run_at` and id order,
    /// optionally only from `lanes`. First returns the jobs of workers whose lease expired to
    /// the queue (or dead-letters them when that was their last attempt), at most once a
    /// second (by the store's clock) per store, and not while [`Store::rescue_expired`] runs
    /// more often (a worker pool calls it every [`crate::RESCUE_INTERVAL`]): a busy claim
    /// then takes no statement for it (see [`Store::settle`]). Each claimed
    /// job gets a fresh lease token and a lease of `lease`.
    pub async fn claim(
        &self,
        worker: &str,
        lanes: Option<&[String]>,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<LeasedJob>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let request = ClaimRequest {
            lanes: lanes.map(<[String]>::to_vec),
            limit,
        };
        Ok(self
            .settle(&[], worker, std::slice::from_ref(&request), lease)
            .await?
            .claimed
            .pop()
            .unwrap_or_default())
    }

    /// Cancels a run: queued jobs are cancelled at once; a running job is flagged, and its
    /// worker sees the request at its next heartbeat.
    pub async fn cancel_run(&self, run_id: &str) -> Result<CancelOutcome> {
        self.cancel_run_recorded(run_id, None).await
    }

    /// [`Store::cancel_run`], writing `audit` in its transaction when it cancels.
    pub(crate) async fn cancel_run_recorded(
        &self,
        run_id: &str,
        audit: Option<&crate::NewAudit<'_>>,
    ) -> Result<CancelOutcome> {
        let now = self.now();
        let outcome = dispatch!(self, b => queue::cancel_run(b, run_id, now, audit))?;
        if outcome == CancelOutcome::Cancelled {
            self.tell_ended(&[run_id.to_string()]).await;
        }
        Ok(outcome)
    }

    /// A run by id.
    pub async fn run(&self, id: &str) -> Result<Option<Run>> {
        dispatch!(self, b => queue::run(b, id))
    }

    /// Runs, newest first, optionally only those in `status`; at most `limit` (1-1000).
    pub async fn list_runs(&self, status: Option<RunStatus>, limit: i64) -> Result<Vec<Run>> {
        let limit = limit.clamp(1, 1000);
        dispatch!(self, b => queue::list_runs(b, status, limit))
    }

    /// A job by id.
    pub async fn job(&self, id: i64) -> Result<Option<Job>> {
        dispatch!(self, b => queue::job(b, id))
    }

    /// The jobs of a run, oldest first.
    pub async fn jobs_of_run(&self, run_id: &str) -> Result<Vec<Job>> {
        dispatch!(self, b => queue::jobs_of_run(b, run_id))
    }

    /// A run's events with `seq > after_seq`, in order.
    pub async fn events(&self, run_id: &str, after_seq: i64) -> Result<Vec<Event>> {
        dispatch!(self, b => queue::events_after(b, run_id, after_seq))
    }

    /// A run's newest checkpoint.
    pub async fn latest_checkpoint(&self, run_id: &str) -> Result<Option<Checkpoint>> {
        dispatch!(self, b => queue::latest_checkpoint(b, run_id))
    }

    /// How many jobs are in each state (states with none are left out).
    pub async fn job_counts(&self) -> Result<Vec<JobCount>> {
        dispatch!(self, b => queue::job_counts(b))
    }

    /// The earliest `run_at` of any queued job, if there is one.
    pub async fn next_due(&self) -> Result<Option<Millis>> {
        dispatch!(self, b => queue::next_due(b))
    }

    /// Records (or refreshes) a worker process.
    pub async fn register_worker(&self, id: &str, host: &str, pid: u32) -> Result<()> {
        let now = self.now();
        dispatch!(self, b => queue::upsert_worker(b, id, host, i64::from(pid), now))
    }

    /// Forgets a worker process (on clean shutdown).
    pub async fn remove_worker(&self, id: &str) -> Result<()> {
        dispatch!(self, b => queue::remove_worker(b, id))
    }

    /// The registered workers.
    pub async fn workers(&self) -> Result<Vec<WorkerRow>> {
        dispatch!(self, b => queue::workers(b))
    }

    /// Answers when the database can take a write now: opens a write transaction and rolls
    /// it back (SQLite: `BEGIN IMMEDIATE`, so a file another process holds locked fails after
    /// the busy timeout; PostgreSQL: a pooled connection and a round trip). Changes nothing.
    /// For readiness checks (`GET /readyz`).
    pub async fn ping(&self) -> Result<()> {
        dispatch!(self, b => ping(b))
    }

    /// Closes the connection pools.
    pub async fn close(&self) {
        if let Some(listener) = &self.inner.listener {
            listener.abort();
        }
        match &self.inner.backend {
            AnyBackend::Sqlite(b) => b.close().await,
            AnyBackend::Postgres(b) => b.close().await,
        }
    }
}

async fn ping<B: crate::backend::Backend>(b: &B) -> Result<()> {
    B::rollback(b.begin().await?).await
}

/// A change to a run's row, written only while the run is not terminal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunUpdate<'a> {
    pub status: RunStatus,
    pub result: Option<&'a str>,
    pub error: Option<&'a str>,
    pub finished_at: Option<Millis>,
}

impl RunUpdate<'static> {
    /// The run moves to `status`, unfinished.
    pub(crate) fn status(status: RunStatus) -> Self {
        Self {
            status,
            result: None,
            error: None,
            finished_at: None,
        }
    }

    /// The run ends as cancelled on request at `now`.
    pub(crate) fn cancelled(now: Millis) -> Self {
        Self {
            status: RunStatus::Cancelled,
            result: None,
            error: Some("cancelled on request"),
            finished_at: Some(now),
        }
    }
}

/// A run's status read for `run_id`, or says the run does not exist.
pub(crate) fn parse_status(status: Option<RunStatus>, run_id: &str) -> Result<RunStatus> {
    status.ok_or_else(|| Error::NotFound {
        what: "run",
        id: run_id.to_string(),
    })
}

/// Builds the `LeaseLost` error from what the job row says now.
pub(crate) fn lease_lost(job_id: i64, token: i64, probe: Option<LeaseProbe>) -> Error {
    let reason = match probe {
        None => LeaseLostReason::Missing,
        Some(probe) if probe.lease_token != token => LeaseLostReason::Reclaimed {
            current_token: probe.lease_token,
        },
        Some(probe) => LeaseLostReason::NotRunning {
            status: probe.status.to_string(),
        },
    };
    Error::LeaseLost {
        job_id,
        token,
        reason,
    }
}

/// The run status after its job's lease expired and the job became `job_status`, and whether
/// (and when) the run finished.
pub(crate) fn run_after_rescue(job_status: JobState, now: Millis) -> (RunStatus, Option<Millis>) {
    match job_status {
        JobState::Dead => (RunStatus::Failed, Some(now)),
        JobState::Cancelled => (RunStatus::Cancelled, Some(now)),
        _ => (RunStatus::Queued, None),
    }
}

/// The run status after a retry made its job `job_status`.
pub(crate) fn run_after_retry(
    job_status: JobState,
    run_at: Millis,
    now: Millis,
) -> (RunStatus, Option<Millis>, RetryOutcome) {
    match job_status {
        JobState::Queued => (RunStatus::Queued, None, RetryOutcome::Scheduled { run_at }),
        JobState::Cancelled => (RunStatus::Cancelled, Some(now), RetryOutcome::DeadLettered),
        _ => (RunStatus::Failed, Some(now), RetryOutcome::DeadLettered),
    }
}
