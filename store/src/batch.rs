//! Group commit: many jobs' ends, and the claims that refill their slots, in one transaction.
//!
//! A worker pool whose jobs finish close together would otherwise pay one commit (one fsync
//! on SQLite, one round trip and one WAL flush on PostgreSQL) per ack and another per claim.
//! [`Store::settle`] writes a whole batch in one transaction instead.
//!
//! What it guarantees:
//! - **Each end is fenced by its own lease token.** A job whose lease was lost meanwhile gets
//!   [`Error::LeaseLost`] in its own slot of [`Settled::ended`] and nothing of it changes,
//!   while the others of the batch end as asked.
//! - **Durable before reported.** `settle` returns only after the transaction committed, so
//!   an `Ok` in `ended` means that job's end is durable, and every claimed job's lease is
//!   committed with it.
//! - **All or nothing on error.** A database error rolls the whole batch back (no job ended,
//!   nothing claimed) and comes back as the outer `Err`; each job's lease is then still held
//!   (or expires), exactly as when a single ack fails.
//! - Claims follow [`Store::claim`]'s rules (claim order, concurrency keys, lanes, rescue of
//!   expired leases).
//!
//! How: SQLite takes one `BEGIN IMMEDIATE` transaction. PostgreSQL ends the batch and claims
//! in one statement without an explicit transaction (`settle.sql`, one round trip, on the
//! store's warm connection) unless a rescue of expired leases is due (about once a second
//! per store), the claim spans several lane requests, a job with a concurrency key is due,
//! or another caller holds the warm connection; then it takes a transaction like SQLite's.
//! Either way PostgreSQL plans claims with sorting disabled, so that a claim reads
//! `jobs_claim` in order, a priority at a time, whatever the table's statistics (`CLAIM_PLANNER_SETTINGS` in
//! `postgres/paths.rs`). The logic is written once, below, over [`QueuePaths`]; each backend
//! supplies its one-statement path and its batch of ends there.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::backend::Conn;
use crate::clock::{Millis, duration_millis};
use crate::leased::LeasedJob;
use crate::model::{Job, RunEnd};
use crate::queue::{ClaimRow, FastSettle, JobEnd, QueuePaths, QueueStatements, lease};
use crate::states::JobState;
use crate::store::{RunUpdate, Store, dispatch, run_after_rescue};
use crate::{Error, Result};

/// How often (by the store's clock) a claim first returns expired leases to the queue (on
/// PostgreSQL's one-statement path by taking the transactional one), unless
/// [`Store::rescue_expired`] ran meanwhile; a worker pool calls that every
/// [`RESCUE_INTERVAL`], so its claims never do. On SQLite every statement of a settle is a
/// round trip to the connection's thread, and rescuing on every claim cost one per settle.
const RESCUE_EVERY_MS: i64 = 1_000;

/// How often a worker pool calls [`Store::rescue_expired`]: often enough that its claims
/// never find a rescue due, so each stays one statement (a pickup never waits for one).
pub const RESCUE_INTERVAL: Duration = Duration::from_millis(500);

/// What to claim in a [`Store::settle`]: up to `limit` due jobs, only of `lanes` when given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    pub lanes: Option<Vec<String>>,
    pub limit: usize,
}

/// What a [`Store::settle`] did.
#[derive(Debug)]
pub struct Settled {
    /// One result per job ended, in the order given: `Ok` when its end is durable,
    /// [`Error::LeaseLost`] when its lease was lost (and nothing of it changed).
    pub ended: Vec<Result<()>>,
    /// The jobs claimed for each request, in the order of the requests; each list in claim
    /// order (priority, `run_at`, id).
    pub claimed: Vec<Vec<LeasedJob>>,
}

impl Store {
    /// Returns the jobs whose lease expired to the queue now (or dead-letters them after
    /// their last attempt, or cancels them when cancellation was requested), and moves their
    /// runs to match; returns how many. Claims do this too, at most once a second on
    /// PostgreSQL, in a transaction of their own; a worker pool calls this every
    /// [`RESCUE_INTERVAL`] apart from its claims, so that they need not. Wakes workers when
    /// it returned any job to the queue.
    pub async fn rescue_expired(&self) -> Result<usize> {
        let now = self.now();
        let rescued = dispatch!(self, b => rescue_expired(b, now))?;
        self.inner.last_rescue.fetch_max(now, Ordering::Relaxed);
        if rescued.moved > 0 {
            self.wake();
        }
        count_rescued(&rescued.jobs);
        self.tell_ended(&rescued.ended).await;
        Ok(rescued.moved)
    }

    /// Readies what settles use, so that a worker pool's first batch does not wait for it: on
    /// PostgreSQL, opens the warm connection and runs `settle.sql` on it with nothing to end
    /// or claim (which plans the statement and loads the server's catalog caches for every
    /// table, index and trigger it names; it reads almost no pages and writes nothing); without it, the first settle of a new pool
    /// is markedly slower than the rest (`bench/MEASUREMENTS.md`). Nothing to do on SQLite. A failure is left
    /// to the first settle, which opens the connection again or takes the transactional path.
    pub async fn warm_up(&self) {
        if let crate::store::AnyBackend::Postgres(b) = &self.inner.backend {
            let _ = b.warm_up(self.now()).await;
        }
    }

    /// Ends each job of `done` as its [`RunEnd`] says (as [`LeasedJob::complete`] would), all
    /// in one transaction; one result per job, in order.
    pub async fn complete_many(&self, done: &[(&LeasedJob, RunEnd)]) -> Result<Vec<Result<()>>> {
        Ok(self.settle(done, "", &[], Duration::ZERO).await?.ended)
    }

    /// Ends each job of `done` and claims for each of `claims` under `worker` with a lease of
    /// `lease`, in one transaction (see the module docs for what it guarantees). The leases in
    /// `done` must come from this store.
    pub async fn settle(
        &self,
        done: &[(&LeasedJob, RunEnd)],
        worker: &str,
        claims: &[ClaimRequest],
        lease: Duration,
    ) -> Result<Settled> {
        if let Some((foreign, _)) = done
            .iter()
            .find(|(l, _)| !Arc::ptr_eq(&l.store.inner, &self.inner))
        {
            return Err(Error::Invalid(format!(
                "job {} was leased from another store; end it through its own lease",
                foreign.job.id
            )));
        }
        let ends: Vec<JobEnd<'_>> = done
            .iter()
            .map(|(l, end)| JobEnd {
                job_id: l.job.id,
                token: l.token,
                end,
            })
            .collect();
        let lease_ms = duration_millis(lease).max(1);
        let now = self.now();
        let requests: Vec<ClaimRow<'_>> = claims
            .iter()
            .map(|c| ClaimRow {
                worker,
                lanes: c.lanes.as_deref(),
                limit: i64::try_from(c.limit).unwrap_or(i64::MAX),
                lease_ms,
                now,
            })
            .collect();
        let claiming = requests.iter().any(|c| c.limit > 0);
        if ends.is_empty() && !claiming {
            return Ok(Settled {
                ended: Vec::new(),
                claimed: claims.iter().map(|_| Vec::new()).collect(),
            });
        }
        let last = self.inner.last_rescue.load(Ordering::Relaxed);
        let rescue_due = claiming && now.saturating_sub(last) >= RESCUE_EVERY_MS;
        let outcome = dispatch!(self, b => settle(b, &ends, worker, &requests, rescue_due, now))?;
        if outcome.rescued {
            self.inner.last_rescue.fetch_max(now, Ordering::Relaxed);
        }
        count_rescued(&outcome.rescued_jobs);
        self.tell_ended(&outcome.runs_ended).await;
        if outcome.ended.contains(&Some(true)) {
            self.wake(); // jobs waiting for a concurrency key may run now
        }
        let mut ended = Vec::with_capacity(outcome.ended.len());
        for (end, won) in ends.iter().zip(outcome.ended) {
            ended.push(match won {
                Some(_) => Ok(()),
                None => Err(dispatch!(self, b => lease::lost(b, end.job_id, end.token))),
            });
        }
        let claimed = outcome
            .claimed
            .into_iter()
            .map(|jobs| {
                jobs.into_iter()
                    .map(|job| LeasedJob {
                        store: self.clone(),
                        token: job.lease_token,
                        job,
                        content: Default::default(),
                    })
                    .collect()
            })
            .collect();
        Ok(Settled { ended, claimed })
    }
}

/// What the backend side of a settle did.
#[derive(Debug)]
pub(crate) struct SettleOutcome {
    /// Per end, in order: `Some(keyed)` when the lease held and the job and run ended
    /// (`keyed`: the job held a concurrency key), `None` when the lease was lost and nothing
    /// of that job changed.
    pub ended: Vec<Option<bool>>,
    /// The jobs claimed per request, each list in claim order.
    pub claimed: Vec<Vec<Job>>,
    /// Whether expired leases were rescued.
    pub rescued: bool,
    /// The runs the rescue ended (see [`Rescued`]).
    pub runs_ended: Vec<String>,
    /// The jobs the rescue moved: `(lane, new status)` (see [`Rescued`]).
    pub rescued_jobs: Vec<(String, JobState)>,
}

/// Ends the jobs in `done` and claims for each request in `claims` (lanes, limit), all in one
/// transaction: one commit (one fsync on SQLite) for a whole batch of acks and the claims that
/// refill their slots. Each end is fenced by its own token. A database error rolls back
/// everything.
///
/// Expired leases are rescued first when `rescue_due` (then always on the transactional path);
/// a backend with a one-statement path ([`QueuePaths::settle_fast`]) takes that otherwise.
pub(crate) async fn settle<B: QueuePaths>(
    b: &B,
    done: &[JobEnd<'_>],
    worker: &str,
    claims: &[ClaimRow<'_>],
    rescue_due: bool,
    now: Millis,
) -> Result<SettleOutcome> {
    let mut done = done;
    let mut ended_first = None;
    if !rescue_due && claims.len() <= 1 {
        let claim = claims.first().copied().unwrap_or(ClaimRow {
            worker,
            lanes: None,
            limit: 0,
            lease_ms: 1,
            now,
        });
        match b.settle_fast(done, claim).await? {
            Some(FastSettle {
                ended,
                claimed: Some(mut jobs),
            }) => {
                claim_order(&mut jobs);
                let claimed = if claims.is_empty() {
                    Vec::new()
                } else {
                    vec![jobs]
                };
                return Ok(SettleOutcome {
                    ended,
                    claimed,
                    rescued: false,
                    runs_ended: Vec::new(),
                    rescued_jobs: Vec::new(),
                });
            }
            // A keyed job was due: the ends are written; claim on the general path.
            Some(FastSettle {
                ended,
                claimed: None,
            }) => {
                ended_first = Some(ended);
                done = &[];
            }
            None => {}
        }
    }
    let general = settle_in_transaction(b, done, claims, rescue_due, now).await;
    match (ended_first, general) {
        (None, general) => general,
        (Some(ended), Ok(general)) => Ok(SettleOutcome { ended, ..general }),
        (Some(ended), Err(e)) => {
            // The ends are durable already; report them, and leave the claim to the
            // caller's next try.
            tracing::warn!(error = %e, "claiming after a batch of ends failed");
            Ok(SettleOutcome {
                ended,
                claimed: claims.iter().map(|_| Vec::new()).collect(),
                rescued: false,
                runs_ended: Vec::new(),
                rescued_jobs: Vec::new(),
            })
        }
    }
}

/// The transactional path of [`settle`]: the ends, a rescue of expired leases when claiming
/// and `rescue_due`, and the claims, in one transaction.
async fn settle_in_transaction<B: QueuePaths>(
    b: &B,
    done: &[JobEnd<'_>],
    claims: &[ClaimRow<'_>],
    rescue_due: bool,
    now: Millis,
) -> Result<SettleOutcome> {
    let mut tx = b.begin_claiming().await?;
    let ended = B::finish_batch(&mut tx, done, now).await?;
    let rescued = rescue_due && claims.iter().any(|c| c.limit > 0);
    let (runs_ended, rescued_jobs) = if rescued {
        let r = rescue::<B>(&mut tx, now).await?;
        (r.ended, r.jobs)
    } else {
        Default::default()
    };
    let mut claimed = Vec::with_capacity(claims.len());
    for claim in claims {
        let mut jobs = if claim.limit > 0 {
            claim_in::<B>(&mut tx, *claim).await?
        } else {
            Vec::new()
        };
        claim_order(&mut jobs);
        claimed.push(jobs);
    }
    B::commit(tx).await?;
    Ok(SettleOutcome {
        ended,
        claimed,
        rescued,
        runs_ended,
        rescued_jobs,
    })
}

/// Counts, once they are committed, the jobs a rescue moved
/// (`nightshift_lease_expiries_total`, and the dead letters among them).
fn count_rescued(jobs: &[(String, JobState)]) {
    for (lane, status) in jobs {
        nightshift_telemetry::lease_expired(lane, rescue_outcome(*status));
    }
}

/// The metrics' name of what a rescue made of a job.
fn rescue_outcome(status: JobState) -> &'static str {
    match status {
        JobState::Dead => "dead_lettered",
        JobState::Cancelled => "cancelled",
        _ => "requeued",
    }
}

/// Sorts claimed jobs in claim order: priority, then `run_at`, then id.
fn claim_order(jobs: &mut [Job]) {
    jobs.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.run_at.cmp(&b.run_at))
            .then(a.id.cmp(&b.id))
    });
}

/// [`rescue`] in a transaction of its own.
pub(crate) async fn rescue_expired<B: QueueStatements>(b: &B, now: Millis) -> Result<Rescued> {
    let mut tx = b.begin().await?;
    let rescued = rescue::<B>(&mut tx, now).await?;
    B::commit(tx).await?;
    Ok(rescued)
}

/// What a rescue of expired leases did.
#[derive(Debug, Default)]
pub(crate) struct Rescued {
    /// How many jobs it moved.
    pub moved: usize,
    /// The runs it ended: those whose job it dead-lettered or cancelled. No worker tells of
    /// these ends (the one that held the job is gone), so the store does
    /// ([`Store::on_run_ended_by_store`]).
    pub ended: Vec<String>,
    /// Each job it moved: `(lane, the status it left the job in)`, for the metrics.
    pub jobs: Vec<(String, JobState)>,
}

/// Returns the jobs of workers whose lease expired to the queue (or dead-letters them when
/// that was their last attempt), and moves their runs to match.
async fn rescue<B: QueueStatements>(c: &mut Conn<B>, now: Millis) -> Result<Rescued> {
    let rescued = B::rescue_expired(c, now).await?;
    let mut ended = Vec::new();
    for job in &rescued {
        let (status, finished) = run_after_rescue(job.status, now);
        let update = RunUpdate {
            status,
            result: None,
            error: finished.and(job.error.as_deref()),
            finished_at: finished,
        };
        B::set_run_status(c, &job.run_id, update, now).await?;
        if finished.is_some() {
            ended.push(job.run_id.clone());
        }
    }
    Ok(Rescued {
        moved: rescued.len(),
        ended,
        jobs: rescued.into_iter().map(|j| (j.lane, j.status)).collect(),
    })
}

/// What a claim does with the jobs its statement returned: jobs without a concurrency key
/// run; of the keyed ones, the first of each key is a candidate, the rest go back.
fn split_claimed(claimed: Vec<Job>) -> (Vec<Job>, Vec<Job>, Vec<Job>) {
    let mut plain = Vec::with_capacity(claimed.len());
    let mut keyed = Vec::new();
    let mut back = Vec::new();
    let mut keys_taken = std::collections::HashSet::new();
    for job in claimed {
        match &job.concurrency_key {
            None => plain.push(job),
            Some(key) if keys_taken.insert(key.clone()) => keyed.push(job),
            Some(_) => back.push(job),
        }
    }
    // Keys are taken in one order by every claimer.
    keyed.sort_by(|a, b| a.concurrency_key.cmp(&b.concurrency_key));
    (plain, keyed, back)
}

/// Claims in `tx` (see `Store::claim`); the runs of the claimed jobs are marked running.
async fn claim_in<B: QueuePaths>(tx: &mut B::Tx, claim: ClaimRow<'_>) -> Result<Vec<Job>> {
    // The claim statement marks the runs of jobs without a concurrency key running where
    // the backend can do that in the same statement (see `MARKS_PLAIN_RUNS`).
    let (mut jobs, keyed, back) = split_claimed(B::claim(tx, claim).await?);
    for job in back {
        B::give_back(tx, job.id, claim.now).await?;
    }
    let plain = jobs.len();
    // One running job per key: take each key without waiting, then check that no other
    // running job holds it (a concurrent claim may have committed one).
    for job in keyed {
        let key = job.concurrency_key.as_deref().unwrap_or_default();
        let free =
            B::try_lock_key(tx, key).await? && B::key_holder(tx, key, job.id).await?.is_none();
        if free {
            jobs.push(job);
        } else {
            B::give_back(tx, job.id, claim.now).await?;
        }
    }
    let marked = if B::MARKS_PLAIN_RUNS { plain } else { 0 };
    let to_mark: Vec<&str> = jobs[marked..].iter().map(|j| j.run_id.as_str()).collect();
    if !to_mark.is_empty() {
        B::mark_runs_running(tx, &to_mark, claim.now).await?;
    }
    Ok(jobs)
}
