//! [`LeasedJob`]: a claimed job and the only writer of its row. Every change — a
//! heartbeat, an event, a checkpoint, progress, the end, a retry, a park, a release — is
//! guarded by the job's lease token in the statement that makes it, so a worker whose lease
//! was taken over changes nothing and hears [`Error::LeaseLost`](crate::Error::LeaseLost).

use std::time::Duration;

use crate::backoff::Backoff;
use crate::clock::{Millis, duration_millis};
use crate::content::ContentWriter;
use crate::model::{Heartbeat, Job, JobOptions, RetryOutcome, RunEnd, RunProgress, StopRequest};
use crate::queue::RetryRow;
use crate::queue::lease::{self, NewCheckpoint, NewEvent, Parking};
use crate::states::RunStatus;
use crate::store::{Store, dispatch};
use crate::{Error, Result};

/// A job this worker holds a lease on. Its methods are the only writers of the job row, and
/// each succeeds only while the lease token is current; otherwise it returns
/// [`Error::LeaseLost`] and writes nothing.
#[derive(Debug, Clone)]
pub struct LeasedJob {
    pub(crate) store: Store,
    pub(crate) token: i64,
    pub(crate) job: Job,
    /// The chain and known blobs of the content this holder writes (`content/`).
    pub(crate) content: ContentWriter,
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
        let event = NewEvent {
            event_type,
            payload,
            now,
        };
        dispatch!(s, b => lease::append_event(b, self, event))
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
        let event = NewEvent {
            event_type,
            payload,
            now,
        };
        dispatch!(s, b => lease::append_event_live(b, self, event))
    }

    /// Writes a checkpoint covering events up to `through_seq`: `document` (JSON text) is
    /// stored as a skeleton whose long strings are the run's blobs, which the events it covers
    /// hold already, and the run's older checkpoints go in the same transaction (a resume
    /// reads the newest only).
    pub async fn write_checkpoint(
        &self,
        through_seq: i64,
        format_version: i64,
        document: &str,
    ) -> Result<()> {
        if through_seq < 0 || format_version < 1 {
            return Err(Error::Invalid(format!(
                "checkpoint through_seq must be >= 0 and format_version >= 1 (got {through_seq}, \
                 {format_version})"
            )));
        }
        let s = &self.store;
        let now = s.now();
        let checkpoint = NewCheckpoint {
            through_seq,
            format_version,
            document,
            now,
        };
        dispatch!(s, b => lease::write_checkpoint(b, self, checkpoint))
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
