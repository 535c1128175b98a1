//! One leased job from start to finish: heartbeats while the handler runs, the cancellation
//! token fired on a cancel request or a lost lease, the outcome written under the lease, and
//! release (not completion) when shutdown's grace period runs out.
//!
//! A run's end ([`JobOutcome::Done`]) is not written here: it goes back to the pool as
//! [`Exit::Ack`], and the pool writes the ends of all jobs that finished close together in
//! one transaction (see `Store::settle`). Retries, deferrals and parks are written here, one by
//! one.

use std::sync::Arc;
use std::time::Duration;

use nightshift_store::{Backoff, Error, Heartbeat, LeasedJob, RunEnd};
use tokio_util::sync::CancellationToken;

use crate::handler::{CancelReason, Handler, JobContext, JobOutcome, Written};

/// How a job's time in the pool ended, for the pool's log and tests.
#[derive(Debug, Clone, PartialEq)]
pub enum Finished {
    /// The handler's outcome was written.
    Recorded(JobOutcome),
    /// The lease was lost; nothing more was written.
    LeaseLost,
    /// The worker shut down before the job finished; its lease was released.
    Released,
    /// Writing the outcome failed for another reason; the lease will expire and the job
    /// will be retried.
    WriteFailed(String),
}

/// How a job task ended: done with, or with the run's end still to be written by the pool.
#[derive(Debug)]
pub(crate) enum Exit {
    /// Nothing more to write for this job.
    Finished(Finished),
    /// The handler ended the run with `end` while the lease held; the pool writes it under
    /// `lease` in its next batch, and tells `written` whether it did.
    Ack {
        lease: Box<LeasedJob>,
        end: RunEnd,
        written: Written,
    },
}

/// Timings the job runner needs.
#[derive(Debug, Clone)]
pub(crate) struct JobTimings {
    pub lease: Duration,
    pub heartbeat: Duration,
    pub backoff: Backoff,
}

/// Runs `handler` on `lease` until it returns or `hard_stop` fires, and tells the job's
/// context whether its outcome was written ([`JobContext::when_outcome_written`]; for a run's end,
/// the pool tells it once its batch is written).
pub(crate) async fn run_job<H: Handler>(
    handler: Arc<H>,
    lease: LeasedJob,
    timings: JobTimings,
    hard_stop: CancellationToken,
) -> Exit {
    let ctx = JobContext::new(lease.clone());
    let exit = run_in(handler, &ctx, lease, timings, hard_stop).await;
    if let Exit::Finished(finished) = &exit {
        ctx.written.tell(matches!(finished, Finished::Recorded(_)));
    }
    exit
}

/// [`run_job`] in `ctx`.
async fn run_in<H: Handler>(
    handler: Arc<H>,
    ctx: &JobContext,
    lease: LeasedJob,
    timings: JobTimings,
    hard_stop: CancellationToken,
) -> Exit {
    let beats = tokio::spawn(heartbeat_loop(ctx.clone(), timings.clone()));
    let outcome = tokio::select! {
        outcome = handler.handle(ctx.clone()) => Some(outcome),
        () = hard_stop.cancelled() => None,
    };
    beats.abort();
    let job_id = lease.id();
    let Some(outcome) = outcome else {
        ctx.stop(CancelReason::Shutdown);
        return Exit::Finished(
            match lease
                .release("released: the worker shut down before the job finished")
                .await
            {
                Ok(()) => {
                    tracing::info!(job_id, "released lease at shutdown");
                    Finished::Released
                }
                Err(e) if e.is_lease_lost() => Finished::LeaseLost,
                Err(e) => {
                    tracing::warn!(job_id, error = %e, "could not release lease; it will expire");
                    Finished::WriteFailed(e.to_string())
                }
            },
        );
    };
    if ctx.stop_reason() == Some(CancelReason::LeaseLost) {
        tracing::warn!(
            job_id,
            "lease lost while the handler ran; its outcome is dropped"
        );
        return Exit::Finished(Finished::LeaseLost);
    }
    if let JobOutcome::Done(end) = outcome {
        return Exit::Ack {
            lease: Box::new(lease),
            end,
            written: ctx.written.clone(),
        };
    }
    let written = apply_outcome(&lease, &outcome, &timings.backoff).await;
    Exit::Finished(match written {
        Ok(()) => {
            log_recorded(lease.job(), &outcome);
            Finished::Recorded(outcome)
        }
        Err(Error::LeaseLost { .. }) => {
            tracing::warn!(job_id, "lease lost before the outcome was written; dropped");
            Finished::LeaseLost
        }
        Err(e) => {
            tracing::error!(job_id, error = %e, "could not write the job's outcome");
            Finished::WriteFailed(e.to_string())
        }
    })
}

/// The one line for a retry or a deferral that was written: whether the attempt was the last
/// (the job is dead-lettered, and counted so, or cancelled when that was asked) or the job
/// comes back.
fn log_recorded(job: &nightshift_store::Job, outcome: &JobOutcome) {
    match outcome {
        JobOutcome::Retry { error, .. } if job.cancel_requested_at.is_some() => {
            tracing::info!(%error, "attempt failed; the run was cancelled meanwhile, so it is not retried");
        }
        JobOutcome::Retry { error, .. } if job.attempts >= job.max_attempts => {
            tracing::warn!(%error, attempt = job.attempts, max_attempts = job.max_attempts,
                           "attempt failed and it was the last one: the job is dead-lettered and the run failed");
            nightshift_telemetry::dead_lettered(&job.lane, "attempts_exhausted");
        }
        JobOutcome::Retry { error, .. } => {
            tracing::info!(%error, attempt = job.attempts, max_attempts = job.max_attempts,
                           "attempt failed; the job will be retried");
        }
        JobOutcome::Defer { until, error } => {
            tracing::info!(%error, until, "job deferred; the attempt is not counted");
        }
        _ => {}
    }
}

/// Writes a handler's outcome under `lease`: complete, retry (after the outcome's delay or
/// `backoff`'s), defer (requeue without counting the attempt), or park. The pool writes
/// retries and parks with it (and ends in batches, to the same effect); it is public so that
/// tools and tests driving a handler by hand record outcomes exactly as the pool does — all
/// but the telling: it does not tell the job's context, so a handler's
/// [`JobContext::when_outcome_written`] hears `false` once its context is dropped.
pub async fn apply_outcome(
    lease: &LeasedJob,
    outcome: &JobOutcome,
    backoff: &Backoff,
) -> nightshift_store::Result<()> {
    match outcome {
        JobOutcome::Done(end) => lease.complete(end.clone()).await,
        JobOutcome::Retry { error, after } => {
            let delay = after.unwrap_or_else(|| backoff.delay(lease.job().attempts));
            lease.retry_after(delay, error).await.map(|_| ())
        }
        JobOutcome::Defer { until, error } => lease.defer_until(*until, error).await.map(|_| ()),
        JobOutcome::Park { until, payload } => lease.park_until(*until, payload).await.map(|_| ()),
        JobOutcome::AwaitApproval {
            call_id,
            until,
            payload,
        } => lease
            .park_for_approval(call_id, *until, payload)
            .await
            .map(|_| ()),
    }
}

/// Extends the lease every `heartbeat`; fires the job's token on a cancel request or a lost
/// lease. Transient errors are logged and retried at the next beat.
async fn heartbeat_loop(ctx: JobContext, timings: JobTimings) {
    let mut ticker = tokio::time::interval(timings.heartbeat);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await; // the first tick is immediate; the claim just set the lease
    loop {
        ticker.tick().await;
        match ctx.lease.heartbeat(timings.lease).await {
            Ok(Heartbeat::Extended { .. }) => {}
            Ok(Heartbeat::CancelRequested) => {
                tracing::info!(job_id = ctx.lease.id(), run_id = %ctx.lease.job().run_id,
                    "cancellation requested");
                ctx.stop(CancelReason::CancelRequested);
                return;
            }
            Ok(Heartbeat::Superseded) => {
                tracing::info!(job_id = ctx.lease.id(), run_id = %ctx.lease.job().run_id,
                    "superseded by a newer run");
                ctx.stop(CancelReason::Superseded);
                return;
            }
            Err(e) if e.is_lease_lost() => {
                tracing::warn!(job_id = ctx.lease.id(), run_id = %ctx.lease.job().run_id,
                    error = %e, "lease lost");
                ctx.stop(CancelReason::LeaseLost);
                return;
            }
            Err(e) => tracing::warn!(job_id = ctx.lease.id(), error = %e, "heartbeat failed"),
        }
    }
}
