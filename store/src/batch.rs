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
//! Either way PostgreSQL plans claims with sorting disabled, so that a claim walks
//! `jobs_claim` in order whatever the table's statistics (`CLAIM_PLANNER_SETTINGS` in
//! `postgres.rs`). The backend side is written once, as `settle_operations!`, next to
//! `queue_operations!` in `backend.rs`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::clock::duration_millis;
use crate::model::RunEnd;
use crate::store::{LeasedJob, Store, dispatch};
use crate::{Error, Result};

/// How often (by the store's clock) a claim on the one-statement path of PostgreSQL first
/// takes the transactional path to return expired leases to the queue, unless
/// [`Store::rescue_expired`] ran meanwhile. SQLite rescues on every claim.
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
        let rescued = dispatch!(self, b => b.rescue_expired(now))?;
        self.inner.last_rescue.fetch_max(now, Ordering::Relaxed);
        if rescued > 0 {
            self.wake();
        }
        Ok(rescued)
    }

    /// Readies what settles use, so that a worker pool's first batch does not wait for it: on
    /// PostgreSQL, opens the warm connection and runs `settle.sql` on it with nothing to end
    /// or claim (which plans the statement and loads the server's catalog caches for every
    /// table, index and trigger it names; it reads almost no pages and writes nothing). Measured, the first settle of a new pool took
    /// about 3 ms more than the rest without this. Nothing to do on SQLite. A failure is left
    /// to the first settle, which opens the connection again or takes the transactional path.
    pub async fn warm_up(&self) {
        if let crate::store::Backend::Postgres(b) = &self.inner.backend {
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
        let ends: Vec<(i64, i64, &RunEnd)> = done
            .iter()
            .map(|(l, end)| (l.job.id, l.token, end))
            .collect();
        let lanes: Vec<Option<&[String]>> = claims.iter().map(|c| c.lanes.as_deref()).collect();
        let requests: Vec<(Option<&[String]>, i64)> = lanes
            .into_iter()
            .zip(claims)
            .map(|(lanes, c)| (lanes, i64::try_from(c.limit).unwrap_or(i64::MAX)))
            .collect();
        let lease_ms = duration_millis(lease).max(1);
        let now = self.now();
        let claiming = requests.iter().any(|(_, limit)| *limit > 0);
        if ends.is_empty() && !claiming {
            return Ok(Settled {
                ended: Vec::new(),
                claimed: claims.iter().map(|_| Vec::new()).collect(),
            });
        }
        let last = self.inner.last_rescue.load(Ordering::Relaxed);
        let rescue_due = claiming && now.saturating_sub(last) >= RESCUE_EVERY_MS;
        let (won, jobs, rescued) =
            dispatch!(self, b => b.settle(&ends, worker, &requests, lease_ms, now, rescue_due))?;
        if rescued {
            self.inner.last_rescue.fetch_max(now, Ordering::Relaxed);
        }
        if won.contains(&Some(true)) {
            self.wake(); // jobs waiting for a concurrency key may run now
        }
        let mut ended = Vec::with_capacity(won.len());
        for (&(job_id, token, _), won) in ends.iter().zip(won) {
            ended.push(match won {
                Some(_) => Ok(()),
                None => Err(dispatch!(self, b => b.lost(job_id, token))),
            });
        }
        let claimed = jobs
            .into_iter()
            .map(|jobs| {
                jobs.into_iter()
                    .map(|job| LeasedJob {
                        store: self.clone(),
                        token: job.lease_token,
                        job,
                    })
                    .collect()
            })
            .collect();
        Ok(Settled { ended, claimed })
    }
}

/// Expands the settle operations (group-committed ends and claims) for one backend, next to
/// `queue_operations!`. `$dir` names the SQL directory; besides the queue operations the
/// backend provides `begin_claiming` (a transaction for claims), `settle_fast` (a
/// one-statement path, or `None`), `finish_batch` (a batch of ends in one or two
/// statements), `mark_runs_running`, `claim_statement` (the claim statement for every lane or
/// for listed ones, and its lane parameter) and `MARKS_PLAIN_RUNS` (whether claim.sql marks
/// runs running).
macro_rules! settle_operations {
    ($backend:ty, $db:ty, $dir:literal) => {
        macro_rules! settle_sql {
            ($name:literal) => {
                include_str!(concat!("../sql/", $dir, "/", $name, ".sql"))
            };
        }

        impl $backend {
            /// Ends the jobs in `done` (job id, token, end) and claims for each request in
            /// `claims` (lanes, limit), all in one transaction: one commit (one fsync on
            /// SQLite) for a whole batch of acks and the claims that refill their slots. Each
            /// end is fenced by its own token; per job it returns `Some(keyed)` when the lease
            /// held and the job and run ended, `None` when the lease was lost and nothing of
            /// that job changed. A database error rolls back everything.
            ///
            /// Expired leases are rescued first on the transactional path; a backend with a
            /// one-statement path (`settle_fast`) takes that unless `rescue_due`. The last
            /// value says whether a rescue ran.
            pub(crate) async fn settle(
                &self,
                done: &[(i64, i64, &$crate::model::RunEnd)],
                worker: &str,
                claims: &[(Option<&[String]>, i64)],
                lease_ms: i64,
                now: i64,
                rescue_due: bool,
            ) -> $crate::Result<(Vec<Option<bool>>, Vec<Vec<$crate::model::Job>>, bool)> {
                let mut done = done;
                let mut ended_first = None;
                if !rescue_due && claims.len() <= 1 {
                    let claim = claims.first().copied();
                    match self.settle_fast(done, worker, claim, lease_ms, now).await? {
                        Some((ended, Some(mut jobs))) => {
                            Self::claim_order(&mut jobs);
                            let claimed = if claims.is_empty() {
                                Vec::new()
                            } else {
                                vec![jobs]
                            };
                            return Ok((ended, claimed, false));
                        }
                        // A keyed job was due: the ends are written; claim on the general path.
                        Some((ended, None)) => {
                            ended_first = Some(ended);
                            done = &[];
                        }
                        None => {}
                    }
                }
                let general = self
                    .settle_in_transaction(done, worker, claims, lease_ms, now)
                    .await;
                match (ended_first, general) {
                    (None, general) => general,
                    (Some(ended), Ok((_, claimed, rescued))) => Ok((ended, claimed, rescued)),
                    (Some(ended), Err(e)) => {
                        // The ends are durable already; report them, and leave the claim to
                        // the caller's next try.
                        tracing::warn!(error = %e, "claiming after a batch of ends failed");
                        Ok((ended, claims.iter().map(|_| Vec::new()).collect(), false))
                    }
                }
            }

            /// The transactional path of [`settle`](Self::settle): the ends, a rescue of
            /// expired leases when claiming, and the claims, in one transaction.
            async fn settle_in_transaction(
                &self,
                done: &[(i64, i64, &$crate::model::RunEnd)],
                worker: &str,
                claims: &[(Option<&[String]>, i64)],
                lease_ms: i64,
                now: i64,
            ) -> $crate::Result<(Vec<Option<bool>>, Vec<Vec<$crate::model::Job>>, bool)> {
                let mut tx = self.begin_claiming().await?;
                let ended = self.finish_batch(&mut tx, done, now).await?;
                if ended.contains(&Some(true)) {
                    // Jobs waiting for a key may run now.
                    self.notify_enqueued(&mut tx, "").await?;
                }
                let mut claimed = Vec::with_capacity(claims.len());
                let rescued = claims.iter().any(|(_, limit)| *limit > 0);
                if rescued {
                    Self::rescue(&mut tx, now).await?;
                }
                for (lanes, limit) in claims {
                    let mut jobs = if *limit > 0 {
                        self.claim_in(&mut tx, worker, *lanes, *limit, lease_ms, now)
                            .await?
                    } else {
                        Vec::new()
                    };
                    Self::claim_order(&mut jobs);
                    claimed.push(jobs);
                }
                tx.commit().await?;
                Ok((ended, claimed, rescued))
            }

            /// Sorts claimed jobs in claim order: priority, then `run_at`, then id.
            fn claim_order(jobs: &mut [$crate::model::Job]) {
                jobs.sort_by(|a, b| {
                    b.priority
                        .cmp(&a.priority)
                        .then(a.run_at.cmp(&b.run_at))
                        .then(a.id.cmp(&b.id))
                });
            }

            /// [`rescue`](Self::rescue) in a transaction of its own; how many jobs it moved.
            pub(crate) async fn rescue_expired(&self, now: i64) -> $crate::Result<usize> {
                let mut tx = self.begin().await?;
                let rescued = Self::rescue(&mut tx, now).await?;
                tx.commit().await?;
                Ok(rescued)
            }

            /// Returns the jobs of workers whose lease expired to the queue (or dead-letters
            /// them when that was their last attempt), and moves their runs to match; how
            /// many jobs it moved.
            async fn rescue(
                tx: &mut Tx,
                now: i64,
            ) -> $crate::Result<usize> {
                // The error is read decoded and bound through `Text` (it names the worker).
                let rescued: Vec<(String, String, $crate::text::DbOptText)> =
                    sqlx::query_as(settle_sql!("rescue_expired"))
                        .bind(now)
                        .fetch_all(&mut **tx)
                        .await?;
                for (run_id, job_status, error) in &rescued {
                    let (status, finished) = $crate::store::run_after_rescue(job_status, now);
                    Self::set_run(
                        &mut **tx,
                        run_id,
                        $crate::store::RunUpdate {
                            status,
                            result: None,
                            error: finished.and(error.0.as_deref()),
                            finished_at: finished,
                        },
                        now,
                    )
                    .await?;
                }
                Ok(rescued.len())
            }

            /// Claims up to `limit` due jobs in `tx` (see `Store::claim`); their runs are
            /// marked running.
            async fn claim_in(
                &self,
                tx: &mut Tx,
                worker: &str,
                lanes: Option<&[String]>,
                limit: i64,
                lease_ms: i64,
                now: i64,
            ) -> $crate::Result<Vec<$crate::model::Job>> {
                let (claim_sql, lanes) = Self::claim_statement(lanes);
                // The claim statement marks the runs of jobs without a concurrency key running
                // where the backend can do that in the same statement (see `MARKS_PLAIN_RUNS`).
                let claimed: Vec<$crate::model::Job> = sqlx::query_as(claim_sql)
                    .bind(now)
                    .bind(worker)
                    .bind(lease_ms)
                    .bind(lanes)
                    .bind(limit)
                    .fetch_all(&mut **tx)
                    .await?;
                let mut jobs = Vec::with_capacity(claimed.len());
                let mut keys_taken = std::collections::HashSet::new();
                let mut keyed: Vec<$crate::model::Job> = Vec::new();
                for job in claimed {
                    match &job.concurrency_key {
                        None => jobs.push(job),
                        Some(key) if keys_taken.insert(key.clone()) => keyed.push(job),
                        Some(_) => Self::give_back(&mut **tx, job.id, now).await?,
                    }
                }
                let plain = jobs.len();
                // One running job per key: take each key without waiting, then check that no
                // other running job holds it (a concurrent claim may have committed one).
                keyed.sort_by(|a, b| a.concurrency_key.cmp(&b.concurrency_key));
                for job in keyed {
                    let key = job.concurrency_key.as_deref().unwrap_or_default();
                    let locked: bool = sqlx::query_scalar(settle_sql!("try_lock_key"))
                        .bind($crate::text::Text(key))
                        .fetch_one(&mut **tx)
                        .await?;
                    let holder: Option<i64> = if locked {
                        sqlx::query_scalar(settle_sql!("key_holder"))
                            .bind($crate::text::Text(key))
                            .bind(job.id)
                            .fetch_optional(&mut **tx)
                            .await?
                    } else {
                        None
                    };
                    if locked && holder.is_none() {
                        jobs.push(job);
                    } else {
                        Self::give_back(&mut **tx, job.id, now).await?;
                    }
                }
                let marked = if Self::MARKS_PLAIN_RUNS { plain } else { 0 };
                let to_mark: Vec<&str> = jobs[marked..].iter().map(|j| j.run_id.as_str()).collect();
                if !to_mark.is_empty() {
                    Self::mark_runs_running(tx, &to_mark, now).await?;
                }
                Ok(jobs)
            }

        }
    };
}

pub(crate) use settle_operations;
