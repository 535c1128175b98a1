//! The writes of a lease holder, written once for every backend: heartbeats, events,
//! checkpoints, progress, retries, parking and release. Each is fenced by the lease token:
//! when its statement matches no row, the job row is read ([`lost`]) and the caller gets
//! `LeaseLost` with the reason, and nothing changed.

use crate::backend::Conn;
use crate::clock::Millis;
use crate::content::{self, Draft, WriterState};
use crate::leased::LeasedJob;
use crate::model::{Heartbeat, JobOptions, RetryOutcome, RunProgress, StopRequest};
use crate::queue::{CheckpointRow, EventRow, JobRow, LeaseProbe, QueueStatements, RetryRow};
use crate::states::{JobKind, JobState, RunStatus};
use crate::store::{RunUpdate, lease_lost, run_after_retry};
use crate::{Error, Result};

/// Extends the lease, or says that the run was cancelled or superseded (the lease still
/// held).
pub(crate) async fn heartbeat<B: QueueStatements>(
    b: &B,
    job_id: i64,
    token: i64,
    lease_ms: i64,
    now: Millis,
) -> Result<Heartbeat> {
    let extended = B::heartbeat(&mut *b.writer().await?, job_id, token, lease_ms, now).await?;
    if let Some(expires_at) = extended {
        return Ok(Heartbeat::Extended { expires_at });
    }
    Ok(match stop_requested(b, job_id, token).await? {
        StopRequest::Cancel => Heartbeat::CancelRequested,
        StopRequest::Supersede => Heartbeat::Superseded,
    })
}

/// After a lease-guarded statement that also required no cancel request matched no row:
/// what was requested when the lease is still held (a supersession when the run is
/// recorded `superseded`), else `LeaseLost` with the reason read from the job row.
async fn stop_requested<B: QueueStatements>(b: &B, job_id: i64, token: i64) -> Result<StopRequest> {
    match probe(b, job_id).await? {
        Some(LeaseProbe {
            status: JobState::Running,
            lease_token,
            cancel_requested_at: Some(_),
            run_status,
        }) if lease_token == token => Ok(if run_status == RunStatus::Superseded {
            StopRequest::Supersede
        } else {
            StopRequest::Cancel
        }),
        probe => Err(lease_lost(job_id, token, probe)),
    }
}

async fn probe<B: QueueStatements>(b: &B, job_id: i64) -> Result<Option<LeaseProbe>> {
    B::lease_probe(&mut *b.writer().await?, job_id).await
}

/// The `LeaseLost` error for `job_id`'s lease `token`, with the reason read from the job row.
pub(crate) async fn lost<B: QueueStatements>(b: &B, job_id: i64, token: i64) -> Error {
    match probe(b, job_id).await {
        Ok(probe) => lease_lost(job_id, token, probe),
        Err(e) => e,
    }
}

/// `Ok` when a lease-guarded statement matched its row, else `LeaseLost`.
async fn fenced<B: QueueStatements>(b: &B, job_id: i64, token: i64, held: bool) -> Result<()> {
    if held {
        Ok(())
    } else {
        Err(lost(b, job_id, token).await)
    }
}

/// An event as the lease holder gives it, before its content is stored.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewEvent<'a> {
    pub event_type: &'a str,
    pub payload: &'a str,
    pub now: Millis,
}

/// Stores `event`'s content in `tx` (through the lease's content writer, whose memory is
/// `state` and `draft`) and returns the row that appends it.
pub(crate) async fn stage_event<'a, B: QueueStatements>(
    c: &mut Conn<B>,
    lease: &LeasedJob,
    (state, draft): (&WriterState, &mut Draft),
    event: NewEvent<'a>,
) -> Result<EventRow<'a>> {
    let run_id = &lease.job.run_id;
    let blob_id =
        content::put_event::<B>(c, run_id, (state, draft), event.payload, event.now).await?;
    Ok(EventRow {
        job_id: lease.job.id,
        token: lease.token,
        event_type: event.event_type,
        blob_id,
        now: event.now,
    })
}

/// Appends the run's next event, its content with it, in one transaction fenced by the
/// lease; `LeaseLost` (and nothing written) once the lease is gone.
pub(crate) async fn append_event<B: QueueStatements>(
    b: &B,
    lease: &LeasedJob,
    event: NewEvent<'_>,
) -> Result<i64> {
    match append_if::<B>(b, lease, event, false).await? {
        Some(seq) => Ok(seq),
        None => Err(lost(b, lease.job.id, lease.token).await),
    }
}

/// [`append_event`], also refused once the run was cancelled or superseded: then which of the
/// two, and nothing written.
pub(crate) async fn append_event_live<B: QueueStatements>(
    b: &B,
    lease: &LeasedJob,
    event: NewEvent<'_>,
) -> Result<std::result::Result<i64, StopRequest>> {
    match append_if::<B>(b, lease, event, true).await? {
        Some(seq) => Ok(Ok(seq)),
        None => Ok(Err(stop_requested(b, lease.job.id, lease.token).await?)),
    }
}

/// The append both share: the event's seq, or `None` when its statement (fenced by the
/// lease, and with `live` by the run's stop requests too) matched no row and nothing was
/// written.
async fn append_if<B: QueueStatements>(
    b: &B,
    lease: &LeasedJob,
    event: NewEvent<'_>,
    live: bool,
) -> Result<Option<i64>> {
    let mut state = lease.content.lock().await;
    let mut draft = state.draft();
    let mut tx = b.begin().await?;
    let row = stage_event::<B>(&mut tx, lease, (&state, &mut draft), event).await?;
    let seq = if live {
        B::append_event_live(&mut tx, row).await?
    } else {
        B::append_event(&mut tx, row).await?
    };
    match seq {
        Some(seq) => {
            B::commit(tx).await?;
            state.keep(draft);
            Ok(Some(seq))
        }
        None => {
            B::rollback(tx).await?;
            Ok(None)
        }
    }
}

/// Writes a checkpoint (its long strings as the run's blobs, its skeleton in the row) and
/// drops the run's older ones, in one transaction fenced by the lease.
pub(crate) async fn write_checkpoint<B: QueueStatements>(
    b: &B,
    lease: &LeasedJob,
    checkpoint: NewCheckpoint<'_>,
) -> Result<()> {
    let mut state = lease.content.lock().await;
    let mut draft = state.draft();
    let mut tx = b.begin().await?;
    let body = content::put_checkpoint::<B>(
        &mut tx,
        &lease.job.run_id,
        (&state, &mut draft),
        checkpoint.document,
        checkpoint.now,
    )
    .await?;
    let row = CheckpointRow {
        job_id: lease.job.id,
        token: lease.token,
        through_seq: checkpoint.through_seq,
        format_version: checkpoint.format_version,
        body: &body,
        now: checkpoint.now,
    };
    if !B::write_checkpoint(&mut tx, row).await? {
        B::rollback(tx).await?;
        drop(state);
        return Err(lost(b, lease.job.id, lease.token).await);
    }
    B::prune_checkpoints(&mut tx, lease.job.id, checkpoint.through_seq).await?;
    B::commit(tx).await?;
    state.keep(draft);
    Ok(())
}

/// A checkpoint as the lease holder gives it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewCheckpoint<'a> {
    pub through_seq: i64,
    pub format_version: i64,
    pub document: &'a str,
    pub now: Millis,
}

/// Marks the leased attempt as having made progress (see [`record_progress`]).
pub(crate) async fn mark_progress<B: QueueStatements>(
    b: &B,
    job_id: i64,
    token: i64,
) -> Result<()> {
    let marked = B::mark_progress(&mut *b.writer().await?, job_id, token).await?;
    fenced(b, job_id, token, marked).await
}

/// Records the run's totals and marks that this attempt made progress (which keeps a later
/// lease expiry from counting it), in one transaction, both fenced.
pub(crate) async fn record_progress<B: QueueStatements>(
    b: &B,
    job_id: i64,
    token: i64,
    progress: &RunProgress,
    now: Millis,
) -> Result<()> {
    let mut tx = b.begin().await?;
    let held = B::mark_progress(&mut tx, job_id, token).await?
        && B::record_progress(&mut tx, job_id, token, progress, now).await?;
    if !held {
        B::rollback(tx).await?;
        return Err(lost(b, job_id, token).await);
    }
    B::commit(tx).await
}

/// Re-queues the leased job at `retry.run_at`. `counted`: the attempt counts (a retry:
/// dead-letters on the last attempt); otherwise it is given back and never dead-letters (a
/// deferral).
pub(crate) async fn retry<B: QueueStatements>(b: &B, retry: RetryRow<'_>) -> Result<RetryOutcome> {
    let mut tx = b.begin().await?;
    let Some(job) = B::retry_job(&mut tx, retry).await? else {
        B::rollback(tx).await?;
        return Err(lost(b, retry.job_id, retry.token).await);
    };
    let (status, finished, outcome) = run_after_retry(job.status, retry.run_at, retry.now);
    let update = RunUpdate {
        status,
        result: None,
        error: finished.map(|_| retry.error),
        finished_at: finished,
    };
    B::set_run_status(&mut tx, &job.run_id, update, retry.now).await?;
    B::commit(tx).await?;
    Ok(outcome)
}

/// Where a parked run goes: its resume job's options and payload, the waiting status, and
/// the approval it waits for, if any.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parking<'a> {
    pub resume: &'a JobOptions,
    pub payload: &'a str,
    pub waiting: RunStatus,
    pub approval_call: Option<&'a str>,
}

/// Ends the leased job as parked and arms the run's resume job; `None` when cancellation
/// won the race (the run is cancelled instead).
pub(crate) async fn park<B: QueueStatements + crate::inbox::InboxStatements>(
    b: &B,
    job_id: i64,
    token: i64,
    parking: Parking<'_>,
    now: Millis,
) -> Result<Option<i64>> {
    let mut tx = b.begin().await?;
    let Some(job) = B::finish_job(&mut tx, job_id, token, JobState::Parked, now).await? else {
        B::rollback(tx).await?;
        return Err(lost(b, job_id, token).await);
    };
    if job.cancel_requested_at.is_some() {
        // Cancellation won the race with parking: end the run instead of arming a job
        // nobody wants.
        B::set_run_status(&mut tx, &job.run_id, RunUpdate::cancelled(now), now).await?;
        B::commit(tx).await?;
        return Ok(None);
    }
    let mut run_at = parking.resume.run_at.unwrap_or(now);
    if let Some(call_id) = parking.approval_call {
        // Serialised with decide_approval: a decision that landed before this park makes the
        // resume due now instead of at the timeout.
        B::lock_key(&mut tx, &format!("approval:{}", job.run_id)).await?;
        if B::approval_decided(&mut tx, &job.run_id, call_id).await? {
            run_at = now;
        }
    }
    let resume = JobRow {
        run_id: &job.run_id,
        kind: JobKind::Resume,
        lane: &parking.resume.lane,
        priority: parking.resume.priority,
        payload: parking.payload,
        run_at,
        max_attempts: parking.resume.max_attempts,
        dedupe_key: None,
        now,
    };
    let resume_id = B::insert_job(&mut tx, resume).await?.ok_or_else(|| {
        Error::Corrupt(format!("run {}'s resume job was not inserted", job.run_id))
    })?;
    if parking.approval_call.is_some() {
        B::replace_approval_jobs(&mut tx, &job.run_id, resume_id, now).await?;
    }
    B::set_run_status(
        &mut tx,
        &job.run_id,
        RunUpdate::status(parking.waiting),
        now,
    )
    .await?;
    B::commit(tx).await?;
    Ok(Some(resume_id))
}

/// Gives the leased job back to the queue uncounted (the worker is stopping).
pub(crate) async fn release<B: QueueStatements>(
    b: &B,
    job_id: i64,
    token: i64,
    reason: &str,
    now: Millis,
) -> Result<()> {
    let mut tx = b.begin().await?;
    let Some(run_id) = B::release_job(&mut tx, job_id, token, reason, now).await? else {
        B::rollback(tx).await?;
        return Err(lost(b, job_id, token).await);
    };
    B::set_run_status(&mut tx, &run_id, RunUpdate::status(RunStatus::Queued), now).await?;
    B::commit(tx).await
}
