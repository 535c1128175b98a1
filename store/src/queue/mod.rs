//! The queue's logic, written once for every backend: enqueueing runs and resumes (with the
//! concurrency-key policies), cancelling, and the reads of runs, jobs, events, checkpoints
//! and workers. The writes of a lease holder are in [`lease`]; group-committed ends and
//! claims in `batch.rs`.
//!
//! Each function is generic over a backend's statements ([`QueueStatements`],
//! [`QueuePaths`]) and takes its decisions in plain Rust ([`concurrency::plan_concurrency`]);
//! what a backend supplies is only binding and fetching.

pub(crate) mod binds;
pub(crate) mod concurrency;
pub(crate) mod lease;
mod statements;

pub(crate) use binds::{bind_event_row, queue_statements};
pub(crate) use statements::*;

use crate::audit::{AuditStatements, NewAudit, record_in};
use crate::clock::Millis;
use crate::content;
use crate::inbox::InboxStatements;
use crate::model::{
    CancelOutcome, Checkpoint, Enqueued, Event, Job, JobCount, NewResume, NewRun, Run, WorkerRow,
};
use crate::states::{JobKind, RunStatus};
use crate::store::{RunUpdate, parse_status};
use crate::{Error, Result};
use concurrency::{Plan, plan_concurrency, reads_other_runs};

impl Enqueued {
    /// A run enqueued now (neither a duplicate nor skipped).
    pub(crate) fn created(run_id: &str, job_id: i64, superseded: Vec<String>) -> Self {
        Self {
            run_id: run_id.to_string(),
            job_id,
            duplicate: false,
            skipped: false,
            superseded,
            superseded_idle: Vec::new(),
            cancelled: Vec::new(),
            cancelled_idle: Vec::new(),
        }
    }
}

/// The start job of a new run (`insert_job.sql`).
fn start_job<'a>(run_id: &'a str, new: &'a NewRun, run_at: Millis, now: Millis) -> JobRow<'a> {
    JobRow {
        run_id,
        kind: JobKind::Start,
        lane: &new.job.lane,
        priority: new.job.priority,
        payload: &new.input,
        run_at,
        max_attempts: new.job.max_attempts,
        dedupe_key: None,
        now,
    }
}

/// Whether enqueueing `new` decides nothing: it has no concurrency key, or its key's policy
/// is `queue`, whose plan does not depend on the key's other runs
/// ([`concurrency::reads_other_runs`]). Such a run and its start job are written by one
/// statement ([`QueuePaths::enqueue_plain`]); the others read the key's runs first.
pub(crate) fn decides_nothing(new: &NewRun) -> bool {
    new.concurrency_key.is_none() || !reads_other_runs(&new.concurrency_policy)
}

/// Creates run `run_id` and its start job, or returns the run holding its idempotency key;
/// with a concurrency key, applies its policy first (see [`plan_concurrency`]).
///
/// A run that [decides nothing](decides_nothing) takes the backend's one-statement path
/// ([`QueuePaths::enqueue_plain`]); any other is a transaction of its own.
pub(crate) async fn enqueue_run<B: QueuePaths>(b: &B, row: RunRow<'_>) -> Result<Enqueued> {
    if decides_nothing(row.new) {
        return match b.enqueue_plain(row).await? {
            Some(job_id) => Ok(Enqueued::created(row.id, job_id, Vec::new())),
            None => duplicate_run::<B>(&mut *b.writer().await?, row.new).await,
        };
    }
    let mut tx = b.begin().await?;
    let enqueued = enqueue_in::<B>(&mut tx, row).await?;
    B::commit(tx).await?;
    Ok(enqueued)
}

/// Enqueues `row` in a transaction of its own, as an operator's action (a manual schedule
/// trigger): the audit row `action` on `target` goes in the same transaction, naming the run
/// enqueued (`enqueued`; a duplicate's existing run too) or the active run that held it back
/// (`skipped`).
pub(crate) async fn enqueue_recorded<B: QueuePaths + AuditStatements>(
    b: &B,
    row: RunRow<'_>,
    actor: &str,
    action: &str,
    target: &str,
) -> Result<Enqueued> {
    let mut tx = b.begin().await?;
    let enqueued = enqueue_in::<B>(&mut tx, row).await?;
    let entry = crate::operator::enqueue_entry(actor, action, target, &enqueued);
    record_in::<B>(&mut tx, Some(&entry), row.now).await?;
    B::commit(tx).await?;
    Ok(enqueued)
}

/// Enqueues every run of `rows` in one transaction, in order, each exactly as
/// [`enqueue_run`] would alone (a later run sees the earlier ones: the same idempotency key
/// twice makes the second a duplicate of the first, and concurrency-key policies apply
/// between them). A batch of runs that decide nothing is one statement
/// ([`QueuePaths::enqueue_plain_many`]).
pub(crate) async fn enqueue_runs<B: QueuePaths>(
    b: &B,
    rows: &[RunRow<'_>],
) -> Result<Vec<Enqueued>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    if let [row] = rows {
        return Ok(vec![enqueue_run(b, *row).await?]);
    }
    if rows.iter().all(|r| decides_nothing(r.new))
        && let Some(job_ids) = b.enqueue_plain_many(rows).await?
    {
        let mut out = Vec::with_capacity(rows.len());
        let mut conn = None;
        for (row, job_id) in rows.iter().zip(job_ids) {
            out.push(match job_id {
                Some(job_id) => Enqueued::created(row.id, job_id, Vec::new()),
                None => {
                    let conn = match &mut conn {
                        Some(c) => c,
                        None => conn.insert(b.writer().await?),
                    };
                    duplicate_run::<B>(&mut **conn, row.new).await?
                }
            });
        }
        return Ok(out);
    }
    let mut tx = b.begin().await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push(enqueue_in::<B>(&mut tx, *row).await?);
    }
    B::commit(tx).await?;
    Ok(out)
}

/// One run of [`enqueue_runs`] in `tx`; a run the `skip` policy drops leaves nothing behind
/// (its just-inserted run row is deleted again, `delete_run.sql`).
pub(crate) async fn enqueue_in<B: QueuePaths>(
    tx: &mut crate::backend::Conn<B>,
    row: RunRow<'_>,
) -> Result<Enqueued> {
    let (new, run_id, now) = (row.new, row.id, row.now);
    let key = match &new.concurrency_key {
        Some(key) if !decides_nothing(new) => key,
        _ => {
            return match B::insert_plain(tx, row).await? {
                Some(job_id) => Ok(Enqueued::created(run_id, job_id, Vec::new())),
                None => duplicate_run::<B>(tx, new).await,
            };
        }
    };
    if !B::insert_run(tx, row).await? {
        return duplicate_run::<B>(tx, new).await;
    }
    if B::LOCKS_KEYS {
        B::lock_key(tx, key).await?;
    }
    let active = B::active_runs_of_key(tx, key, run_id).await?;
    let run_at = new.job.run_at.unwrap_or(now);
    let (run_at, to_supersede) =
        match plan_concurrency(&new.concurrency_policy, &active, run_at, now) {
            Plan::Skip { holder } => {
                B::delete_run(tx, run_id).await?;
                return skipped_for::<B>(tx, holder).await;
            }
            Plan::Insert { run_at, supersede } => (run_at, supersede),
        };
    let why = format!("superseded by run {run_id}");
    let (mut superseded, mut idle) = (Vec::new(), Vec::new());
    for old in to_supersede {
        if B::supersede_run(tx, &old, &why, now).await? {
            if stop_jobs::<B>(tx, &old, now).await?.is_empty() {
                idle.push(old.clone());
            }
            superseded.push(old);
        }
    }
    let job_id = B::insert_job(tx, start_job(run_id, new, run_at, now))
        .await?
        .ok_or_else(|| Error::Corrupt(format!("run {run_id}'s start job was not inserted")))?;
    Ok(Enqueued {
        superseded_idle: idle,
        cancelled: Vec::new(),
        cancelled_idle: Vec::new(),
        ..Enqueued::created(run_id, job_id, superseded)
    })
}

/// The answer to an enqueue skipped because `holder` holds the key.
async fn skipped_for<B: QueueStatements>(
    c: &mut crate::backend::Conn<B>,
    holder: String,
) -> Result<Enqueued> {
    let job_id = B::newest_job_of_run(c, &holder).await?;
    Ok(Enqueued {
        run_id: holder,
        job_id: job_id.unwrap_or_default(),
        duplicate: false,
        skipped: true,
        superseded: Vec::new(),
        superseded_idle: Vec::new(),
        cancelled: Vec::new(),
        cancelled_idle: Vec::new(),
    })
}

/// The run that already holds `new`'s idempotency key.
pub(crate) async fn duplicate_run<B: QueueStatements>(
    c: &mut crate::backend::Conn<B>,
    new: &NewRun,
) -> Result<Enqueued> {
    let key = new.idempotency_key.as_deref().unwrap_or_default();
    let holder = B::find_run_by_key(c, key).await?;
    let job_id = holder
        .start_job
        .ok_or_else(|| Error::Corrupt(format!("run {} has no start job", holder.run_id)))?;
    Ok(Enqueued {
        run_id: holder.run_id,
        job_id,
        duplicate: true,
        skipped: false,
        superseded: Vec::new(),
        superseded_idle: Vec::new(),
        cancelled: Vec::new(),
        cancelled_idle: Vec::new(),
    })
}

/// Adds a resume job to an unfinished run; with its dedupe key used, returns that job.
pub(crate) async fn enqueue_resume<B: QueueStatements + InboxStatements>(
    b: &B,
    new: &NewResume,
    now: Millis,
) -> Result<Enqueued> {
    let mut tx = b.begin().await?;
    match resume_in::<B>(&mut tx, new, now).await {
        Ok(enqueued) => {
            B::commit(tx).await?;
            Ok(enqueued)
        }
        Err(e) => {
            B::rollback(tx).await?;
            Err(e)
        }
    }
}

/// [`enqueue_resume`] in `tx`. On an error the resume job may have been inserted: the caller
/// rolls the transaction back (or back to a savepoint taken before).
///
/// A message ([`crate::inbox`]) is accepted only while its run's inbox is open: the run row
/// is locked and read first, and a run that is ending or ended refuses it.
pub(crate) async fn resume_in<B: QueueStatements + InboxStatements>(
    tx: &mut crate::backend::Conn<B>,
    new: &NewResume,
    now: Millis,
) -> Result<Enqueued> {
    let message = crate::inbox::is_message(&new.payload);
    let status = if message {
        crate::inbox::check_open::<B>(tx, &new.run_id).await?
    } else {
        parse_status(B::run_status(tx, &new.run_id).await?, &new.run_id)?
    };
    let (mut run_at, mut priority) = (new.job.run_at.unwrap_or(now), new.job.priority);
    if message {
        (run_at, priority) =
            crate::inbox::place::<B>(tx, &new.run_id, status, run_at, priority).await?;
    }
    let job = JobRow {
        run_id: &new.run_id,
        kind: JobKind::Resume,
        lane: &new.job.lane,
        priority,
        payload: &new.payload,
        run_at,
        max_attempts: new.job.max_attempts,
        dedupe_key: new.dedupe_key.as_deref(),
        now,
    };
    let Some(job_id) = B::insert_job(tx, job).await? else {
        let key = new.dedupe_key.as_deref().unwrap_or_default();
        let (run_id, job_id) = B::find_job_by_key(tx, key).await?;
        return Ok(Enqueued {
            duplicate: true,
            ..Enqueued::created(&run_id, job_id, Vec::new())
        });
    };
    if status.is_terminal() {
        return Err(Error::Conflict(format!(
            "run {} already finished as {status}; a finished run cannot be resumed",
            new.run_id
        )));
    }
    if status == RunStatus::Waiting {
        B::cancel_pending_wakeups(tx, &new.run_id, job_id, now).await?;
    }
    let target = B::resume_target(tx, &new.run_id, job_id).await?;
    if !target.has_concurrency_key && target.busy > 0 {
        // Two jobs of one run must never run at once; a concurrency key makes the queue hold
        // the second until the first lets go, without one there is nothing to hold it.
        return Err(Error::Conflict(format!(
            "run {} is busy (a job of it is queued or running) and has no concurrency key; \
             resume it once it waits, or start runs with a concurrency key",
            new.run_id
        )));
    }
    Ok(Enqueued::created(&new.run_id, job_id, Vec::new()))
}

/// Cancels the run's queued jobs and asks its running ones to stop (at their next
/// heartbeat); returns the running jobs' ids.
async fn stop_jobs<B: QueueStatements>(
    c: &mut crate::backend::Conn<B>,
    run_id: &str,
    now: Millis,
) -> Result<Vec<i64>> {
    B::cancel_queued_jobs(c, run_id, now).await?;
    B::flag_running_jobs(c, run_id, now).await
}

/// Cancels every unfinished run whose concurrency key is `key`, in `tx` (a webhook's
/// `cancel` route): each ends `cancelled` at once when no job of it runs, else its running
/// job is asked to stop (at its next heartbeat; its side effects are fenced from now on).
pub(crate) async fn cancel_key_in<B: QueueStatements>(
    tx: &mut crate::backend::Conn<B>,
    key: &str,
    now: Millis,
) -> Result<Enqueued> {
    let (mut cancelled, mut idle) = (Vec::new(), Vec::new());
    for run in B::active_runs_of_key(tx, key, "").await? {
        B::request_cancel(tx, &run.id, now).await?;
        if stop_jobs::<B>(tx, &run.id, now).await?.is_empty() {
            B::set_run_status(tx, &run.id, RunUpdate::cancelled(now), now).await?;
            idle.push(run.id.clone());
        }
        cancelled.push(run.id);
    }
    Ok(Enqueued {
        run_id: String::new(),
        job_id: 0,
        duplicate: false,
        skipped: false,
        superseded: Vec::new(),
        superseded_idle: Vec::new(),
        cancelled,
        cancelled_idle: idle,
    })
}

/// Cancels a run: ends it at once when no job of it runs, else flags the running job.
pub(crate) async fn cancel_run<B: QueueStatements + AuditStatements>(
    b: &B,
    run_id: &str,
    now: Millis,
    audit: Option<&NewAudit<'_>>,
) -> Result<CancelOutcome> {
    let mut tx = b.begin().await?;
    let status = parse_status(B::run_status(&mut tx, run_id).await?, run_id)?;
    if status.is_terminal() {
        B::rollback(tx).await?;
        return Err(Error::Conflict(format!(
            "run {run_id} already finished as {status}; there is nothing to cancel"
        )));
    }
    B::request_cancel(&mut tx, run_id, now).await?;
    let running = stop_jobs::<B>(&mut tx, run_id, now).await?;
    let outcome = if running.is_empty() {
        B::set_run_status(&mut tx, run_id, RunUpdate::cancelled(now), now).await?;
        CancelOutcome::Cancelled
    } else {
        CancelOutcome::Requested
    };
    record_in::<B>(&mut tx, audit, now).await?;
    B::commit(tx).await?;
    Ok(outcome)
}

pub(crate) async fn run<B: QueueStatements>(b: &B, id: &str) -> Result<Option<Run>> {
    B::get_run(&mut *b.reader().await?, id).await
}

pub(crate) async fn active_run_by_concurrency_key<B: QueueStatements>(
    b: &B,
    key: &str,
) -> Result<Option<Run>> {
    B::find_active_run_by_concurrency_key(&mut *b.reader().await?, key).await
}

pub(crate) async fn list_runs<B: QueueStatements>(
    b: &B,
    status: Option<RunStatus>,
    limit: i64,
) -> Result<Vec<Run>> {
    B::list_runs(&mut *b.reader().await?, status, limit).await
}

pub(crate) async fn job<B: QueueStatements>(b: &B, id: i64) -> Result<Option<Job>> {
    B::get_job(&mut *b.reader().await?, id).await
}

pub(crate) async fn jobs_of_run<B: QueueStatements>(b: &B, run_id: &str) -> Result<Vec<Job>> {
    B::jobs_of_run(&mut *b.reader().await?, run_id).await
}

pub(crate) async fn events_after<B: QueueStatements>(
    b: &B,
    run_id: &str,
    after_seq: i64,
) -> Result<Vec<Event>> {
    let mut c = b.reader().await?;
    let records = B::events_after(&mut c, run_id, after_seq).await?;
    content::events::<B>(&mut c, records).await
}

pub(crate) async fn latest_checkpoint<B: QueueStatements>(
    b: &B,
    run_id: &str,
) -> Result<Option<Checkpoint>> {
    let mut c = b.reader().await?;
    match B::latest_checkpoint(&mut c, run_id).await? {
        Some(record) => Ok(Some(content::checkpoint::<B>(&mut c, record).await?)),
        None => Ok(None),
    }
}

pub(crate) async fn job_counts<B: QueueStatements>(b: &B) -> Result<Vec<JobCount>> {
    B::job_counts(&mut *b.reader().await?).await
}

pub(crate) async fn next_due<B: QueueStatements>(b: &B) -> Result<Option<Millis>> {
    B::next_due(&mut *b.reader().await?).await
}

pub(crate) async fn upsert_worker<B: QueueStatements>(
    b: &B,
    id: &str,
    host: &str,
    pid: i64,
    now: Millis,
) -> Result<()> {
    B::upsert_worker(&mut *b.writer().await?, id, host, pid, now).await
}

pub(crate) async fn remove_worker<B: QueueStatements>(b: &B, id: &str) -> Result<()> {
    B::remove_worker(&mut *b.writer().await?, id).await
}

pub(crate) async fn workers<B: QueueStatements>(b: &B) -> Result<Vec<WorkerRow>> {
    B::list_workers(&mut *b.reader().await?).await
}
