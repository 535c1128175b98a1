//! The contract between the pool and the code that does a job's work (the agent loop plugs
//! in here). The handler gets the lease handle, to write events and checkpoints, and a
//! cancellation token; it returns an [`JobOutcome`] and the pool performs it, then tells the
//! context whether that outcome was written ([`JobContext::outcome_written`]), so a handler
//! counts what its jobs did only once it is durable and never a stale outcome a lost lease
//! refused.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nightshift_store::{LeasedJob, Millis, RunEnd};
use tokio::sync::watch;
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
    /// Told once what became of the handler's outcome ([`JobContext::outcome_written`]).
    pub(crate) written: Written,
}

/// Where the pool tells a job's context whether the outcome its handler returned was written
/// (`Some(true)`) or not (`Some(false)`); `None` until it knows.
#[derive(Debug, Clone, Default)]
pub(crate) struct Written(Arc<watch::Sender<Option<bool>>>);

impl Written {
    /// Tells whether the outcome was written; only the first telling counts.
    pub(crate) fn tell(&self, written: bool) {
        self.0.send_if_modified(|told| {
            let first = told.is_none();
            if first {
                *told = Some(written);
            }
            first
        });
    }
}

impl JobContext {
    /// A context for `lease` with a fresh token.
    pub fn new(lease: LeasedJob) -> Self {
        Self {
            lease,
            cancel: CancellationToken::new(),
            reason: Arc::new(Mutex::new(None)),
            written: Written::default(),
        }
    }

    /// Resolves once the pool knows what became of the outcome the handler returns for this
    /// job: `true` when it was written under the job's lease (for a run's end: committed),
    /// `false` when it was not — the lease was lost (the job may be running on another
    /// worker by now), the worker shut down first and released it, or the write failed (the
    /// lease expires and the job runs again) — and `false` too when no pool is there to
    /// write it (every clone of this context dropped without a telling).
    ///
    /// Count what a job did here, not when the handler returns: a worker frozen past its
    /// lease whose job was rescued must not count an end that another worker writes and
    /// counts. The future holds no clone of the context, so it can be awaited in a task of
    /// its own after the handler returned.
    pub fn outcome_written(&self) -> impl Future<Output = bool> + Send + 'static {
        let mut told = self.written.0.subscribe();
        async move {
            match told.wait_for(Option::is_some).await {
                Ok(written) => written.unwrap_or(false),
                Err(_) => false,
            }
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
