//! The contract between the pool and the code that does a job's work (the agent loop plugs
//! in here). The handler gets the lease handle, to write events and checkpoints, and a
//! cancellation token; it returns an [`JobOutcome`] and the pool performs it.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nightshift_store::{LeasedJob, Millis, RunEnd};
use tokio_util::sync::CancellationToken;

/// Why a job's cancellation token fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// Someone asked to cancel the run; finish up and return [`JobOutcome::Done`] with
    /// [`RunEnd::Cancelled`].
    CancelRequested,
    /// The lease is gone (another worker owns the job now); nothing more can be written.
    LeaseLost,
    /// The worker is shutting down and the grace period ran out; the job will be released.
    Shutdown,
}

/// What a handler gets for one job.
#[derive(Debug, Clone)]
pub struct JobContext {
    /// The lease: the only way to write the job's events, checkpoints and result.
    pub lease: LeasedJob,
    /// Fires when the job should stop; see [`JobContext::stop_reason`].
    pub cancel: CancellationToken,
    pub(crate) reason: Arc<Mutex<Option<CancelReason>>>,
}

impl JobContext {
    /// A context for `lease` with a fresh token.
    pub fn new(lease: LeasedJob) -> Self {
        Self {
            lease,
            cancel: CancellationToken::new(),
            reason: Arc::new(Mutex::new(None)),
        }
    }

    /// Why [`cancel`](Self::cancel) fired, once it has.
    pub fn stop_reason(&self) -> Option<CancelReason> {
        *self.reason.lock().expect("stop reason lock")
    }

    /// Fires the token, keeping the first reason given.
    pub(crate) fn stop(&self, reason: CancelReason) {
        let mut slot = self.reason.lock().expect("stop reason lock");
        if slot.is_none() {
            *slot = Some(reason);
        }
        drop(slot);
        self.cancel.cancel();
    }
}

/// What the pool does with a job once its handler returns.
#[derive(Debug, Clone, PartialEq)]
pub enum JobOutcome {
    /// Finish the job and end the run (succeeded, failed, cancelled, budget exhausted).
    Done(RunEnd),
    /// Try again later: after `after`, or after the pool's backoff when `None`. On the last
    /// attempt the job is dead-lettered and the run fails with `error`.
    Retry {
        error: String,
        after: Option<Duration>,
    },
    /// Requeue the job at `until` without counting this attempt; never dead-letters, however
    /// often it comes back (for waits that are not the job's fault, such as a model
    /// provider's outage). `error` becomes the job's last error; the run is `queued` again,
    /// as for a retry, and the job holds no slot meanwhile. Cancels the run instead when
    /// cancellation was requested.
    Defer { until: Millis, error: String },
    /// Park the run until `until` (a wakeup); a resume job carrying `payload` is armed.
    Park { until: Millis, payload: String },
    /// Park the run as `awaiting_approval` for tool call `call_id`; a resume job carrying
    /// `payload` is armed for `until` (the approval's timeout) or at once when it is decided.
    AwaitApproval {
        call_id: String,
        until: Millis,
        payload: String,
    },
}

impl JobOutcome {
    /// The run succeeded with `result`.
    pub fn succeeded(result: impl Into<String>) -> Self {
        JobOutcome::Done(RunEnd::Succeeded {
            result: Some(result.into()),
        })
    }

    /// The run failed for good with `error`.
    pub fn failed(error: impl Into<String>) -> Self {
        JobOutcome::Done(RunEnd::Failed {
            error: error.into(),
        })
    }

    /// Retry after the pool's backoff.
    pub fn retry(error: impl Into<String>) -> Self {
        JobOutcome::Retry {
            error: error.into(),
            after: None,
        }
    }
}

/// The work of a job. One handler serves every slot of a pool.
pub trait Handler: Send + Sync + 'static {
    /// Does the job's work. Should return soon after `ctx.cancel` fires.
    fn handle(&self, ctx: JobContext) -> impl Future<Output = JobOutcome> + Send;
}
