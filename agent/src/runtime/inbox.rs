//! The run's inbox as its job sees it: messages sent while the run is queued or running are
//! taken into the log before each model call, before the run sleeps and before it ends; the
//! inbox closes before the run ends; and a job whose run had already ended does nothing.
//!
//! What it guarantees (with `nightshift_store::inbox`): a message accepted for a run reaches
//! the model — taken by the running job, or delivered by its own resume job when the run
//! waits — or, when the run ended another way than succeeding, its job ends cancelled
//! saying why; a run that would succeed while a message waits takes it and goes on instead.
//! A run ends once: a job that finds its run already ended (and was not running when it
//! ended: see [`ends_its_run`]) logs no start or end, counts nothing and exports no span.

use nightshift_store::{ResumeReason, Run, RunEnd};
use nightshift_worker::JobOutcome;

use super::{Session, Stop, opening};
use crate::events::RunEvent;

impl Session<'_> {
    /// Takes the messages sent to the run that no job took yet into its log (each in one
    /// transaction with its job's end). Whether any was taken: the conversation changed, so
    /// the caller decides its next step again.
    pub(super) async fn take_messages(&mut self) -> Result<bool, Stop> {
        let queued = self.ctx.lease.queued_messages().await?;
        let mut took = false;
        for message in queued {
            if self.state.taken_messages.contains(&message.job_id) {
                // Its own job delivered it and then went back to the queue (a retry): that
                // job continues the run now, it is not a message to take.
                continue;
            }
            let event = self.redacted(RunEvent::MessageReceived {
                job_id: message.job_id,
                text: opening::message_text(message.text, self.state.wakeup.as_ref()),
            })?;
            let Some(seq) = self
                .ctx
                .lease
                .take_message(message.job_id, event.kind(), &event.payload())
                .await?
            else {
                continue; // cancelled meanwhile
            };
            self.fold(seq, &event)?;
            tracing::info!(
                message_job = message.job_id,
                "a message was taken into the run"
            );
            took = true;
        }
        Ok(took)
    }

    /// Before a successful end: closes the inbox unless a message waits. `false`: one came
    /// since the last look, nothing was closed, and the run goes on to take it.
    pub(super) async fn close_inbox_for_success(&mut self) -> Result<bool, Stop> {
        if self.inbox_closed {
            return Ok(true);
        }
        let closed = self.ctx.lease.close_inbox(true).await?;
        self.inbox_closed = closed;
        Ok(closed)
    }

    /// Before any other end (or a success whose inbox was closed above): closes the inbox,
    /// whatever waits in it. Messages still queued then end with their jobs, saying why.
    pub(super) async fn close_inbox(&mut self) -> Result<(), Stop> {
        if !self.inbox_closed {
            self.ctx.lease.close_inbox(false).await?;
            self.inbox_closed = true;
        }
        Ok(())
    }
}

/// Whether this job, whose run the store shows ended, is the one that ends it: a run
/// superseded or cancelled while this job ran (the store flagged the job) is ended, logged and
/// counted by it. A job that was queued when its run ended has nothing to do.
pub(super) async fn ends_its_run(ctx: &nightshift_worker::JobContext) -> Result<bool, Stop> {
    if ctx.cancel.is_cancelled() {
        return Ok(true);
    }
    let job = ctx.lease.store().job(ctx.lease.id()).await?;
    Ok(job.is_some_and(|j| j.cancel_requested_at.is_some()))
}

/// The outcome of a job whose run had already ended when it was claimed (a message sent
/// before the run ended another way than succeeding, a start job a message's job began the
/// run before): it ends cancelled with a note saying why, and the run is left as it is (a
/// finished run's row never changes).
pub(super) async fn leftover(
    lease: &nightshift_store::LeasedJob,
    run: &Run,
) -> Result<JobOutcome, Stop> {
    let job = lease.job();
    let why = match ResumeReason::from_payload(&job.payload) {
        Some(ResumeReason::Message { .. }) => format!(
            "not delivered: run {} ended as {} before it took this message",
            run.id, run.status
        ),
        _ => format!(
            "nothing to do: run {} had already ended as {}",
            run.id, run.status
        ),
    };
    tracing::warn!(run_status = %run.status, "{why}");
    lease.note(&why).await?;
    Ok(JobOutcome::Done(RunEnd::Cancelled))
}
