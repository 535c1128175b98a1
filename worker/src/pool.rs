//! The pool: a fixed number of slots, claiming only when a slot is free, one task per job,
//! and a graceful drain on shutdown (stop claiming; let running jobs finish until the grace
//! period ends; then release their leases so another worker takes them at once).
//!
//! Expired leases (of workers that died) go back to the queue from a task of their own,
//! every `RESCUE_INTERVAL`, so that claims need not stop to do it.
//!
//! Group commit: the ends of all jobs that finished by the time the pool looks are written
//! together with the claims that refill their slots, in one transaction (`Store::settle`);
//! nothing waits for a batch to fill. Each job's end is still fenced by its own lease token
//! and counted on its own; its slot is reused only once that end is durable.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use nightshift_store::{ClaimRequest, LeasedJob, RunEnd, Store};
use tokio::task::{Id, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::config::PoolConfig;
use crate::handler::{Handler, JobOutcome, Written};
use crate::job::{Exit, Finished, JobTimings, run_job};
use crate::plan::{self, Drain, Next, WaitFor};
use crate::slots::{Slot, Slots};
use tracing::Instrument;

/// How many times the pool yields to the scheduler after a job ends, to let jobs about to end
/// join the same batch of ends.
const LINGER_TURNS: usize = 4;

/// Counts of what happened to the jobs a pool ran, returned when it stops.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolReport {
    /// Jobs whose handler's outcome was written.
    pub recorded: usize,
    /// Jobs released at shutdown.
    pub released: usize,
    /// Jobs whose lease was lost.
    pub lease_lost: usize,
    /// Jobs whose outcome could not be written, or whose handler panicked.
    pub failed_writes: usize,
}

/// A worker pool over one store.
#[derive(Debug)]
pub struct Pool<H> {
    store: Store,
    handler: Arc<H>,
    config: PoolConfig,
    worker_id: String,
}

impl<H: Handler> Pool<H> {
    /// A pool running `handler` with `config` (validated by the caller).
    pub fn new(store: Store, handler: H, config: PoolConfig) -> Self {
        let host = hostname();
        let worker_id = format!("{host}:{}:{}", std::process::id(), &unique_suffix());
        Self {
            store,
            handler: Arc::new(handler),
            config,
            worker_id,
        }
    }

    /// The id this pool claims under (recorded as each job's `lease_owner`).
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// Runs until `shutdown` fires, then drains. Returns what happened to its jobs.
    pub async fn run(self, shutdown: CancellationToken) -> nightshift_store::Result<PoolReport> {
        let host = hostname();
        self.store
            .register_worker(&self.worker_id, &host, std::process::id())
            .await?;
        // The settle connection is readied meanwhile (see `Store::warm_up`); settles that
        // come first take the transactional path, so no claim waits for it.
        let warming = tokio::spawn({
            let store = self.store.clone();
            async move { store.warm_up().await }
        });
        tracing::info!(worker = %self.worker_id, slots = self.config.slots, "worker pool started");
        nightshift_telemetry::worker_slots(self.config.slots);
        nightshift_telemetry::labels::know_lanes(self.config.lanes.keys().cloned());
        let mut jobs = Jobs {
            book: Book {
                slots: Slots::new(self.config.slots, &self.config.lanes),
                running: HashMap::new(),
                acks: Vec::new(),
                report: PoolReport::default(),
            },
            tasks: JoinSet::new(),
            hard_stop: CancellationToken::new(),
        };
        let rescuer = tokio::spawn(rescue_expired_leases(self.store.clone()));
        self.claim_until(&shutdown, &host, &mut jobs).await;
        rescuer.abort();
        warming.abort();
        self.drain(&mut jobs).await;
        if let Err(e) = self.store.remove_worker(&self.worker_id).await {
            tracing::warn!(error = %e, "could not deregister worker");
        }
        let report = jobs.book.report;
        tracing::info!(?report, "worker pool stopped");
        Ok(report)
    }

    /// The select loop: settle (write ends, claim for free slots, start the claimed jobs),
    /// then do what [`plan::next`] says, until `shutdown` fires.
    async fn claim_until(&self, shutdown: &CancellationToken, host: &str, jobs: &mut Jobs) {
        let timings = JobTimings {
            lease: self.config.lease(),
            heartbeat: self.config.heartbeat(),
            backoff: self.config.backoff(),
        };
        let mut signal = self.store.subscribe();
        let mut beat = tokio::time::interval(self.config.heartbeat());
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !shutdown.is_cancelled() {
            let claimed_all = self.settle_and_start(jobs, &timings).await;
            let (listen, until) =
                match plan::next(claimed_all, jobs.book.slots.busy(), self.config.slots) {
                    Next::ClaimAgain => continue, // there may be more due work right now
                    Next::Wait { listen, until } => (listen, until),
                };
            let wait = match until {
                WaitFor::NextDue => self.idle_wait().await,
                WaitFor::Poll => self.config.poll_interval(),
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                Some(joined) = jobs.tasks.join_next_with_id(), if !jobs.tasks.is_empty() => {
                    jobs.reap_lingering(joined).await;
                }
                () = signal.wait(wait), if listen => {}
                _ = beat.tick() => {
                    if let Err(e) = self.store.register_worker(&self.worker_id, host, std::process::id()).await {
                        tracing::warn!(error = %e, "worker heartbeat failed");
                    }
                }
            }
        }
    }

    /// One settle with claims; starts a task for every job claimed. Returns whether some
    /// claim filled up, or `None` when the settle failed.
    async fn settle_and_start(&self, jobs: &mut Jobs, timings: &JobTimings) -> Option<bool> {
        match self.settle(&mut jobs.book, true).await {
            Ok((leases, claimed_all)) => {
                let now = self.store.now();
                for (lease, slot) in leases {
                    record_claim(lease.job(), now);
                    let span = job_span(lease.job());
                    let handle = jobs.tasks.spawn(
                        run_job(
                            self.handler.clone(),
                            lease,
                            timings.clone(),
                            jobs.hard_stop.clone(),
                        )
                        .instrument(span),
                    );
                    jobs.book.running.insert(handle.id(), slot);
                }
                Some(claimed_all)
            }
            Err(e) => {
                tracing::warn!(error = %e, "claiming failed; trying again after the poll interval");
                None
            }
        }
    }

    /// After shutdown: no more claims; running jobs finish until the grace period ends, then
    /// their leases are released (the hard stop); every end is written before it returns.
    async fn drain(&self, jobs: &mut Jobs) {
        tracing::info!(
            running = jobs.tasks.len(),
            grace_ms = self.config.shutdown_grace_ms,
            "draining"
        );
        let deadline = tokio::time::sleep(self.config.shutdown_grace());
        tokio::pin!(deadline);
        loop {
            match plan::drain(!jobs.book.acks.is_empty(), jobs.tasks.len()) {
                Drain::Done => return,
                Drain::WriteEnds => {
                    // Ends only; claiming stopped. A failure is counted in the report.
                    let _ = self.settle(&mut jobs.book, false).await;
                }
                Drain::AwaitJobs => tokio::select! {
                    Some(joined) = jobs.tasks.join_next_with_id() => {
                        jobs.book.reap(joined, &mut jobs.tasks);
                    }
                    () = &mut deadline, if !jobs.hard_stop.is_cancelled() => {
                        tracing::warn!(running = jobs.tasks.len(), "grace period over; releasing leases");
                        jobs.hard_stop.cancel();
                    }
                },
            }
        }
    }

    /// Writes the ends waiting in `book` and, when `claim` is set, claims jobs for every free
    /// slot ([`plan::claim_requests`]: reserved lanes first, then shared slots from any lane),
    /// all in one transaction. The slots of the ended jobs count as free for that claim: a
    /// new job can only take one once the end that freed it is durable, as both commit
    /// together. Returns the leases with the slot each takes, and whether some claim filled
    /// up (so more work may wait).
    ///
    /// When the transaction fails, the ends are tried once more on their own (a failing
    /// claim should not cost finished jobs their results); ends that still fail count as
    /// failed writes, and those jobs' leases expire, so they run again elsewhere.
    async fn settle(
        &self,
        book: &mut Book,
        claim: bool,
    ) -> nightshift_store::Result<(Vec<(LeasedJob, Slot)>, bool)> {
        let acks = std::mem::take(&mut book.acks);
        for ack in &acks {
            if let Some(slot) = book.running.remove(&ack.task) {
                book.slots.free(&slot);
            }
        }
        let requests = if claim {
            plan::claim_requests(book.slots.wanted())
        } else {
            Vec::new()
        };
        if acks.is_empty() && requests.is_empty() {
            return Ok((Vec::new(), false));
        }
        let claimed = self.write_settle(book, &acks, &requests).await?;
        let got: Vec<usize> = claimed.iter().map(Vec::len).collect();
        let claimed_all = plan::claimed_all(&requests, &got);
        let placed = place(book, claimed.into_iter().flatten().collect()).await;
        nightshift_telemetry::busy_slots(book.slots.busy());
        Ok((placed, claimed_all))
    }

    /// The store's settle of `acks` with `requests`, the ends counted in `book`; on failure
    /// with claims, the ends alone once more. Returns the jobs claimed per request.
    async fn write_settle(
        &self,
        book: &mut Book,
        acks: &[PendingAck],
        requests: &[ClaimRequest],
    ) -> nightshift_store::Result<Vec<Vec<LeasedJob>>> {
        let done: Vec<(&LeasedJob, RunEnd)> =
            acks.iter().map(|a| (&*a.lease, a.end.clone())).collect();
        let lease = self.config.lease();
        match self
            .store
            .settle(&done, &self.worker_id, requests, lease)
            .await
        {
            Ok(settled) => {
                book.record_ends(acks, Ok(settled.ended));
                Ok(settled.claimed)
            }
            Err(e) if !acks.is_empty() && !requests.is_empty() => {
                tracing::warn!(error = %e, "writing ends with claims failed; writing the ends alone");
                match self.store.settle(&done, &self.worker_id, &[], lease).await {
                    Ok(settled) => book.record_ends(acks, Ok(settled.ended)),
                    Err(again) => book.record_ends(acks, Err(&again)),
                }
                Err(e)
            }
            Err(e) => {
                book.record_ends(acks, Err(&e));
                Err(e)
            }
        }
    }

    /// How long to wait for a signal before claiming again: the poll interval, or less when a
    /// scheduled job comes due sooner.
    async fn idle_wait(&self) -> Duration {
        let poll = self.config.poll_interval();
        match self.store.next_due().await {
            Ok(due) => plan::until_due(poll, due, self.store.now()),
            Err(_) => poll,
        }
    }
}

/// Gives each claimed job a slot of its lane (reserved first, else shared).
async fn place(book: &mut Book, leases: Vec<LeasedJob>) -> Vec<(LeasedJob, Slot)> {
    let mut placed = Vec::with_capacity(leases.len());
    for lease in leases {
        match book.slots.take(&lease.job().lane) {
            Some(slot) => placed.push((lease, slot)),
            None => {
                // Cannot happen while claims ask for at most the free slots; give the job
                // back rather than run it over capacity.
                if let Err(e) = lease.release("released: no free slot").await {
                    tracing::warn!(error = %e, "could not release an over-claimed job");
                }
            }
        }
    }
    placed
}

/// The jobs a pool runs: its bookkeeping, their tasks, and the token that stops them all
/// (fired when the grace period of a drain runs out).
struct Jobs {
    book: Book,
    tasks: JoinSet<Exit>,
    hard_stop: CancellationToken,
}

impl Jobs {
    /// Takes in a finished task, then lingers: jobs started together tend to end together,
    /// so a few turns of the scheduler (no timer, microseconds) let the ones about to end
    /// join this batch instead of paying for a commit of their own right after it.
    async fn reap_lingering(&mut self, joined: Result<(Id, Exit), JoinError>) {
        self.book.reap(joined, &mut self.tasks);
        for _ in 0..LINGER_TURNS {
            if self.tasks.is_empty() {
                break;
            }
            tokio::task::yield_now().await;
            self.book.reap_ready(&mut self.tasks);
        }
    }
}

/// Returns jobs whose lease expired to the queue every `RESCUE_INTERVAL` (from one interval
/// after the start: the pool's first claim rescues), apart from the
/// pool's claims: a claim then never has a rescue to do first, and on PostgreSQL stays one
/// statement (no pickup waits for a rescue transaction). Runs until aborted; a failure is
/// logged and tried again at the next tick (claims still rescue when none ran for a second).
async fn rescue_expired_leases(store: Store) {
    // The pool's first claim rescues (none ran yet); the first tick is one interval later.
    let every = nightshift_store::RESCUE_INTERVAL;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match store.rescue_expired().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(jobs = n, "returned jobs whose lease expired to the queue"),
            Err(e) => tracing::warn!(error = %e, "returning expired leases failed"),
        }
    }
}

/// A run's end waiting to be written in the pool's next batch.
struct PendingAck {
    task: Id,
    lease: Box<LeasedJob>,
    end: RunEnd,
    /// Told whether the end was written.
    written: Written,
}

/// The pool's bookkeeping: slots, which task holds which, ends waiting to be written, and
/// the report.
struct Book {
    slots: Slots,
    running: HashMap<Id, Slot>,
    acks: Vec<PendingAck>,
    report: PoolReport,
}

impl Book {
    /// Takes in a finished job task, and every other one that has finished by now, so that
    /// their ends go into one batch. A task whose end is still to be written keeps its slot.
    fn reap(&mut self, first: Result<(Id, Exit), JoinError>, tasks: &mut JoinSet<Exit>) {
        self.take(first);
        self.reap_ready(tasks);
    }

    /// Takes in every job task that has finished by now.
    fn reap_ready(&mut self, tasks: &mut JoinSet<Exit>) {
        while let Some(joined) = tasks.try_join_next_with_id() {
            self.take(joined);
        }
    }

    fn take(&mut self, joined: Result<(Id, Exit), JoinError>) {
        let id = match &joined {
            Ok((id, _)) => *id,
            Err(e) => e.id(),
        };
        let finished = match joined {
            Ok((
                task,
                Exit::Ack {
                    lease,
                    end,
                    written,
                },
            )) => {
                self.acks.push(PendingAck {
                    task,
                    lease,
                    end,
                    written,
                });
                return;
            }
            Ok((_, Exit::Finished(finished))) => finished,
            Err(e) => {
                tracing::error!(error = %e, "a job task panicked; its lease will expire and the job will be retried");
                Finished::WriteFailed(e.to_string())
            }
        };
        if let Some(slot) = self.running.remove(&id) {
            self.slots.free(&slot);
            nightshift_telemetry::busy_slots(self.slots.busy());
        }
        self.count(&finished);
    }

    /// Counts the results of a batch of ends (or its failure) in the report, and tells each
    /// job's context whether its end was written.
    fn record_ends(
        &mut self,
        acks: &[PendingAck],
        ended: Result<Vec<nightshift_store::Result<()>>, &nightshift_store::Error>,
    ) {
        match ended {
            Ok(results) => {
                for (ack, result) in acks.iter().zip(results) {
                    let job_id = ack.lease.id();
                    let finished = match result {
                        Ok(()) => {
                            if matches!(ack.end, RunEnd::Failed { .. }) {
                                nightshift_telemetry::dead_lettered(
                                    &ack.lease.job().lane,
                                    "failed",
                                );
                            }
                            Finished::Recorded(JobOutcome::Done(ack.end.clone()))
                        }
                        Err(e) if e.is_lease_lost() => {
                            tracing::warn!(job_id, error = %e, "lease lost before the outcome was written; dropped");
                            Finished::LeaseLost
                        }
                        Err(e) => {
                            tracing::error!(job_id, error = %e, "could not write the job's outcome");
                            Finished::WriteFailed(e.to_string())
                        }
                    };
                    ack.written.tell(matches!(finished, Finished::Recorded(_)));
                    self.count(&finished);
                }
            }
            Err(e) => {
                for ack in acks {
                    tracing::error!(job_id = ack.lease.id(), error = %e, "could not write the job's outcome");
                    ack.written.tell(false);
                    self.count(&Finished::WriteFailed(e.to_string()));
                }
            }
        }
    }

    fn count(&mut self, finished: &Finished) {
        let report = &mut self.report;
        match finished {
            Finished::Recorded(_) => report.recorded += 1,
            Finished::Released => report.released += 1,
            Finished::LeaseLost => report.lease_lost += 1,
            Finished::WriteFailed(_) => report.failed_writes += 1,
        }
    }
}

/// Records a claim at `now`: the job's start delay (from its due time), and for the resume job
/// of a wakeup, how late the wakeup is.
fn record_claim(job: &nightshift_store::Job, now: nightshift_store::Millis) {
    let late = std::time::Duration::from_millis(u64::try_from(now - job.run_at).unwrap_or(0));
    nightshift_telemetry::job_claimed(&job.lane, job.kind.as_str(), late);
    if job.kind == nightshift_store::JobKind::Resume
        && matches!(
            nightshift_store::ResumeReason::from_payload(&job.payload),
            Some(nightshift_store::ResumeReason::Wakeup { .. })
        )
    {
        nightshift_telemetry::wakeup_claimed(late);
    }
}

/// The span every line logged while a job runs is in: its run, job, attempt and lane, and
/// the agent (recorded by the handler once it has read the run). No secret is in it.
fn job_span(job: &nightshift_store::Job) -> tracing::Span {
    tracing::info_span!(
        "job",
        run_id = %job.run_id,
        job_id = job.id,
        attempt = job.attempts,
        kind = job.kind.as_str(),
        lane = %job.lane,
        agent = tracing::field::Empty,
    )
}

/// This machine's host name (`localhost` when it cannot be read): the first part of worker
/// and daemon ids.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_string())
}

fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{nanos:08x}")
}
