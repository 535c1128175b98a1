//! [`Store`]: the one handle to the durable store, whichever backend is behind it.
//!
//! Enqueues and reads go through the `Store`; changes to a claimed job go only through the
//! [`LeasedJob`] that `claim` returns, each guarded by the job's lease token.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::backend::Backend as _;
use crate::backoff::Backoff;
use crate::batch::ClaimRequest;
use crate::clock::{Clock, Millis, duration_millis};
use crate::config::{BackendKind, StoreConfig};
use crate::error::LeaseLostReason;
use crate::group::{Group, Takes, Via};
use crate::migrate::{self, MigrationReport};
use crate::model::{
    CancelOutcome, Checkpoint, Enqueued, Event, Heartbeat, Job, JobCount, JobOptions, NewResume,
    NewRun, RetryOutcome, Run, RunEnd, RunProgress, StopRequest, WorkerRow,
};
use crate::postgres::PgBackend;
use crate::queue::lease::{self, Parking};
use crate::queue::{self, CheckpointRow, EventRow, LeaseProbe, RetryRow};
use crate::sqlite::SqliteBackend;
use crate::states::{JobState, RunStatus};
use crate::writes::{WritePath, WriteSeam};
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

    /// Creates a run and its start job. With a dedupe key already used, returns the existing
    /// run and job with `duplicate: true` and enqueues nothing. The run is marked `notify`
    /// when its agent is one of the notifying agents.
    ///
    /// Enqueues made at the same time share one transaction and its commit (`group.rs`);
    /// each still answers only once its run is durable.
    pub async fn enqueue(&self, new: &NewRun) -> Result<Enqueued> {
        check_new_run(new)?;
        let run_id = uuid::Uuid::now_v7().to_string();
        let now = self.now();
        let notify = self.notifies(&new.agent);
        let group = self.group();
        let enqueued = match group.writer(group.takes_run(new)) {
            Via::Group => group.enqueue(run_id, new, notify, now).await,
            Via::Caller(_lone) => {
                self.inner.writes.took(if queue::decides_nothing(new) {
                    WritePath::RunStatement
                } else {
                    WritePath::RunTransaction
                });
                let row = queue::RunRow {
                    id: &run_id,
                    new,
                    notify,
                    now,
                };
                dispatch!(self, b => queue::enqueue_run(b, row))
            }
        }?;
        if !enqueued.duplicate && !enqueued.skipped {
            self.wake();
        }
        self.tell_ended(&enqueued.superseded_idle).await;
        Ok(enqueued)
    }

    /// [`Store::enqueue`] in a transaction of its own that also stores the operator's audit
    /// row (see [`AsOperator::enqueue`](crate::AsOperator::enqueue)).
    pub(crate) async fn enqueue_recorded(
        &self,
        new: &NewRun,
        actor: &str,
        action: &str,
        target: &str,
    ) -> Result<Enqueued> {
        check_new_run(new)?;
        let run_id = uuid::Uuid::now_v7().to_string();
        let row = queue::RunRow {
            id: &run_id,
            new,
            notify: self.notifies(&new.agent),
            now: self.now(),
        };
        self.inner.writes.took(WritePath::RunTransaction);
        let enqueued =
            dispatch!(self, b => queue::enqueue_recorded(b, row, actor, action, target))?;
        if !enqueued.duplicate && !enqueued.skipped {
            self.wake();
        }
        self.tell_ended(&enqueued.superseded_idle).await;
        Ok(enqueued)
    }

    /// Enqueues many runs in one transaction (one statement when none has a concurrency key
    /// whose policy reads other runs), answering per run in the order given: each exactly as
    /// [`Store::enqueue`] would alone, in that order (a later run sees the earlier ones, so
    /// the same idempotency key twice makes the second a duplicate, and concurrency-key
    /// policies apply between runs of the batch). A run that is not valid is refused alone
    /// ([`Error::Invalid`] in its place) and the others are still enqueued. An error of the
    /// database fails the call, and then nothing of it was enqueued.
    pub async fn enqueue_many(&self, runs: &[NewRun]) -> Result<Vec<Result<Enqueued>>> {
        let now = self.now();
        let checked: Vec<Result<String>> = runs
            .iter()
            .map(|new| check_new_run(new).map(|()| uuid::Uuid::now_v7().to_string()))
            .collect();
        let rows: Vec<queue::RunRow<'_>> = runs
            .iter()
            .zip(&checked)
            .filter_map(|(new, id)| {
                let id = id.as_ref().ok()?;
                Some(queue::RunRow {
                    id,
                    new,
                    notify: self.notifies(&new.agent),
                    now,
                })
            })
            .collect();
        self.inner.writes.took(WritePath::ManyRuns);
        let written = dispatch!(self, b => queue::enqueue_runs(b, &rows))?;
        if written.iter().any(|e| !e.duplicate && !e.skipped) {
            self.wake();
        }
        for e in &written {
            self.tell_ended(&e.superseded_idle).await;
        }
        let mut written = written.into_iter();
        Ok(checked
            .into_iter()
            .map(|id| match id {
                Ok(_) => written
                    .next()
                    .ok_or_else(|| Error::Corrupt("a batch enqueue lost an answer".into())),
                Err(e) => Err(e),
            })
            .collect())
    }

    /// Adds a resume job to an unfinished run (a wakeup, an approval).
    pub async fn enqueue_resume(&self, new: &NewResume) -> Result<Enqueued> {
        validate_job_options(&new.job)?;
        let now = self.now();
        let enqueued = dispatch!(self, b => queue::enqueue_resume(b, new, now))?;
        if !enqueued.duplicate {
            self.wake();
        }
        Ok(enqueued)
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

/// A job this worker holds a lease on. Its methods are the only writers of the job row, and
/// each succeeds only while the lease token is current; otherwise it returns
/// [`Error::LeaseLost`] and writes nothing.
#[derive(Debug, Clone)]
pub struct LeasedJob {
    pub(crate) store: Store,
    pub(crate) token: i64,
    pub(crate) job: Job,
}

impl LeasedJob {
    /// The job as it was claimed.
    pub fn job(&self) -> &Job {
        &self.job
    }

    /// The job's id.
    pub fn id(&self) -> i64 {
        self.job.id
    }

    /// The fencing token this lease was issued.
    pub fn token(&self) -> i64 {
        self.token
    }

    /// The store this lease belongs to.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Extends the lease by `lease` from now, unless cancellation was requested.
    pub async fn heartbeat(&self, lease: Duration) -> Result<Heartbeat> {
        let s = &self.store;
        let now = s.now();
        let ms = duration_millis(lease).max(1);
        dispatch!(s, b => lease::heartbeat(b, self.job.id, self.token, ms, now))
    }

    /// Appends the run's next event; returns its sequence number.
    pub async fn append_event(&self, event_type: &str, payload: &str) -> Result<i64> {
        let s = &self.store;
        let now = s.now();
        dispatch!(s, b => lease::append_event(b, self.event(event_type, payload, now)))
    }

    /// Appends an event like [`append_event`](Self::append_event), unless cancellation or
    /// supersession of the run was requested: then nothing is written and `Ok(None)` comes
    /// back. The check and the write are one statement, so this is the fence in front of a
    /// side-effect tool: once a run is superseded, no new side effect starts.
    pub async fn append_event_unless_cancelled(
        &self,
        event_type: &str,
        payload: &str,
    ) -> Result<Option<i64>> {
        Ok(self
            .append_event_unless_stopped(event_type, payload)
            .await?
            .ok())
    }

    /// As [`append_event_unless_cancelled`](Self::append_event_unless_cancelled), saying
    /// which stop refused the event: the run's cancellation or its supersession.
    pub async fn append_event_unless_stopped(
        &self,
        event_type: &str,
        payload: &str,
    ) -> Result<std::result::Result<i64, StopRequest>> {
        let s = &self.store;
        let now = s.now();
        dispatch!(s, b => lease::append_event_live(b, self.event(event_type, payload, now)))
    }

    /// Writes a checkpoint covering events up to `through_seq` (replacing one at the same
    /// sequence number).
    pub async fn write_checkpoint(
        &self,
        through_seq: i64,
        format_version: i64,
        body: &[u8],
    ) -> Result<()> {
        if through_seq < 0 || format_version < 1 {
            return Err(Error::Invalid(format!(
                "checkpoint through_seq must be >= 0 and format_version >= 1 (got {through_seq}, \
                 {format_version})"
            )));
        }
        let s = &self.store;
        let now = s.now();
        let checkpoint = CheckpointRow {
            job_id: self.job.id,
            token: self.token,
            through_seq,
            format_version,
            body,
            now,
        };
        dispatch!(s, b => lease::write_checkpoint(b, checkpoint))
    }

    /// Marks this attempt as having made progress (one fenced statement), without touching
    /// the run's totals: the agent loop calls it when it logs a tool result. Like
    /// [`LeasedJob::record_progress`], it keeps a later lease expiry from counting the attempt.
    pub async fn mark_progress(&self) -> Result<()> {
        let s = &self.store;
        dispatch!(s, b => lease::mark_progress(b, self.job.id, self.token))
    }

    /// Copies the run's usage totals onto the run row (for the API and budgets), and marks
    /// this attempt as having made progress: if its lease later expires (the worker died),
    /// the attempt is given back instead of counting towards `max_attempts`.
    pub async fn record_progress(&self, progress: &RunProgress) -> Result<()> {
        let s = &self.store;
        let now = s.now();
        dispatch!(s, b => lease::record_progress(b, self.job.id, self.token, progress, now))
    }

    /// Finishes the job and ends the run as `end` says.
    pub async fn complete(&self, end: RunEnd) -> Result<()> {
        let mut ended = self.store.complete_many(&[(self, end)]).await?;
        ended.pop().unwrap_or(Ok(()))
    }

    /// Finishes the job and the run with its result.
    pub async fn ack(&self, result: Option<String>) -> Result<()> {
        self.complete(RunEnd::Succeeded { result }).await
    }

    /// Fails the job for good (dead-letter) and the run with it; no retry.
    pub async fn fail(&self, error: &str) -> Result<()> {
        self.complete(RunEnd::Failed {
            error: error.to_string(),
        })
        .await
    }

    /// Re-queues the job after `delay`, keeping `error`; on its last attempt dead-letters it
    /// and fails the run instead.
    pub async fn retry_after(&self, delay: Duration, error: &str) -> Result<RetryOutcome> {
        let s = &self.store;
        let now = s.now();
        let run_at = now.saturating_add(duration_millis(delay));
        let outcome = dispatch!(s, b => lease::retry(b, self.retry_row(run_at, error, true, now)))?;
        // Pools sleeping until a later due time wake to time this one.
        s.wake();
        self.retried(outcome).await
    }

    /// Re-queues the job at `until` without counting this attempt (it is given back, as at a
    /// release), keeping `error` as the job's last error; never dead-letters, however often
    /// the job is deferred. The run goes back to `queued` as for a retry. When cancellation
    /// was requested the job and run are cancelled instead
    /// ([`RetryOutcome::DeadLettered`], as [`retry_after`](Self::retry_after) reports it).
    /// For waits that are not the job's fault, such as a model provider's outage: the job
    /// holds no worker slot meanwhile.
    pub async fn defer_until(&self, until: Millis, error: &str) -> Result<RetryOutcome> {
        let s = &self.store;
        let now = s.now();
        let outcome = dispatch!(s, b => lease::retry(b, self.retry_row(until, error, false, now)))?;
        s.wake();
        self.retried(outcome).await
    }

    /// After a retry or deferral: when it dead-lettered the job (the run ended: failed, or
    /// cancelled), tells of that end ([`Store::on_run_ended_by_store`]).
    async fn retried(&self, outcome: RetryOutcome) -> Result<RetryOutcome> {
        if outcome == RetryOutcome::DeadLettered {
            let run_id = std::slice::from_ref(&self.job.run_id);
            self.store.tell_ended(run_id).await;
        }
        Ok(outcome)
    }

    /// Re-queues the job after the backoff for this attempt (see [`Backoff`]).
    pub async fn retry(&self, backoff: &Backoff, error: &str) -> Result<RetryOutcome> {
        self.retry_after(backoff.delay(self.job.attempts), error)
            .await
    }

    /// Parks the run until `until`: this job ends as `parked`, the run waits holding no
    /// worker, and a `resume` job carrying `payload` is armed for `until`. Returns the resume
    /// job's id, or `None` when cancellation had been requested (the run is then cancelled).
    pub async fn park_until(&self, until: Millis, payload: &str) -> Result<Option<i64>> {
        let resume = self.resume_options(until);
        let s = &self.store;
        let now = s.now();
        let parking = Parking {
            resume: &resume,
            payload,
            waiting: RunStatus::Waiting,
            approval_call: None,
        };
        let parked = dispatch!(s, b => lease::park(b, self.job.id, self.token, parking, now))?;
        self.parked(parked).await
    }

    /// Parks the run as `awaiting_approval` for call `call_id`: like
    /// [`park_until`](Self::park_until) with the approval's expiry as the time, except that
    /// the resume job is due at once when the call was decided already.
    pub async fn park_for_approval(
        &self,
        call_id: &str,
        expires_at: Millis,
        payload: &str,
    ) -> Result<Option<i64>> {
        let resume = self.resume_options(expires_at);
        let s = &self.store;
        let now = s.now();
        let parking = Parking {
            resume: &resume,
            payload,
            waiting: RunStatus::AwaitingApproval,
            approval_call: Some(call_id),
        };
        let parked = dispatch!(s, b => lease::park(b, self.job.id, self.token, parking, now))?;
        self.parked(parked).await
    }

    /// After a park: wakes pools (for the resume job, or the jobs waiting for this job's
    /// concurrency key), and when a pending cancel ended the run instead (`None`), tells of
    /// that end (the worker parked, so it does not tell of one).
    async fn parked(&self, parked: Option<i64>) -> Result<Option<i64>> {
        let s = &self.store;
        s.wake();
        if parked.is_none() {
            s.tell_ended(std::slice::from_ref(&self.job.run_id)).await;
        }
        Ok(parked)
    }

    pub(crate) fn event<'a>(
        &self,
        event_type: &'a str,
        payload: &'a str,
        now: Millis,
    ) -> EventRow<'a> {
        EventRow {
            job_id: self.job.id,
            token: self.token,
            event_type,
            payload,
            now,
        }
    }

    fn retry_row<'a>(
        &self,
        run_at: Millis,
        error: &'a str,
        counted: bool,
        now: Millis,
    ) -> RetryRow<'a> {
        RetryRow {
            job_id: self.job.id,
            token: self.token,
            run_at,
            error,
            counted,
            now,
        }
    }

    /// The options of the resume job a park arms: this job's lane, priority and attempt
    /// limit, due at `run_at`.
    fn resume_options(&self, run_at: Millis) -> JobOptions {
        JobOptions {
            lane: self.job.lane.clone(),
            priority: self.job.priority,
            run_at: Some(run_at),
            max_attempts: self.job.max_attempts,
        }
    }

    /// Gives the job back to the queue at once without counting the attempt (used when a
    /// worker shuts down before the job finished).
    pub async fn release(&self, reason: &str) -> Result<()> {
        let s = &self.store;
        let now = s.now();
        dispatch!(s, b => lease::release(b, self.job.id, self.token, reason, now))?;
        s.wake();
        Ok(())
    }
}

/// Refuses a run that could never be enqueued, saying what is wrong.
pub(crate) fn check_new_run(new: &NewRun) -> Result<()> {
    validate_job_options(&new.job)?;
    if new.agent.trim().is_empty() {
        return Err(Error::Invalid("agent must not be empty".into()));
    }
    Ok(())
}

pub(crate) fn validate_job_options(job: &JobOptions) -> Result<()> {
    if job.max_attempts < 1 {
        return Err(Error::Invalid(format!(
            "max_attempts must be at least 1 (got {})",
            job.max_attempts
        )));
    }
    if job.lane.trim().is_empty() || job.lane.len() > 64 {
        return Err(Error::Invalid(format!(
            "lane '{}' is not allowed; use 1-64 characters",
            job.lane
        )));
    }
    Ok(())
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
