//! The contract between the pool and the code that does a job's work (the agent loop plugs
//! in here). The handler gets the lease handle, to write events and checkpoints, and a
//! cancellation token; it returns an [`JobOutcome`] and the pool performs it, then tells the
//! context whether that outcome was written ([`JobContext::when_outcome_written`]), so a handler
//! counts what its jobs did only once it is durable and never a stale outcome a lost lease
//! refused.

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
    /// A newer run took the run's concurrency key; finish up and return
    /// [`JobOutcome::Done`] with [`RunEnd::Superseded`].
    Superseded,
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
    /// Told once what became of the handler's outcome ([`JobContext::when_outcome_written`]).
    pub(crate) written: Written,
}

/// What a handler asked to be done once the pool knows whether its outcome was written.
type WhenWritten = Box<dyn FnOnce(bool) + Send>;

/// Where the pool tells a job's context whether the outcome its handler returned was written,
/// and what runs then ([`JobContext::when_outcome_written`]). Shared by every clone of the
/// context; when the last one goes untold, what waits is told `false`.
#[derive(Clone, Default)]
pub(crate) struct Written(Arc<Telling>);

/// The telling: what was told (`None` until then) and what waits for it.
#[derive(Default)]
struct Telling(Mutex<(Option<bool>, Vec<WhenWritten>)>);

impl std::fmt::Debug for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let told = self.0.0.lock().map(|t| t.0).unwrap_or(None);
        f.debug_tuple("Written").field(&told).finish()
    }
}

impl Written {
    /// Tells whether the outcome was written and runs what waited for it, on the caller's
    /// task; only the first telling counts.
    pub(crate) fn tell(&self, written: bool) {
        let waiting = {
            let mut telling = self.0.0.lock().expect("written lock");
            if telling.0.is_some() {
                return;
            }
            telling.0 = Some(written);
            std::mem::take(&mut telling.1)
        };
        for then in waiting {
            then(written);
        }
    }

    /// Runs `then` once told, at once when told already.
    fn when(&self, then: WhenWritten) {
        let told = {
            let mut telling = self.0.0.lock().expect("written lock");
            match telling.0 {
                Some(told) => told,
                None => {
                    telling.1.push(then);
                    return;
                }
            }
        };
        then(told);
    }
}

impl Drop for Telling {
    fn drop(&mut self) {
        let telling = self
            .0
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if telling.0.is_none() {
            for then in std::mem::take(&mut telling.1) {
                then(false);
            }
        }
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

    /// Calls `then` once the pool knows what became of the outcome the handler returns for
    /// this job: `then(true)` when it was written under the job's lease (for a run's end:
    /// committed), `then(false)` when it was not — the lease was lost (the job may be running
    /// on another worker by now), the worker shut down first and released it, or the write
    /// failed (the lease expires and the job runs again) — and `then(false)` too when no pool
    /// is there to write it (every clone of this context dropped untold: a handler driven by
    /// hand, with [`apply_outcome`](crate::apply_outcome) or not). At once when that is
    /// known already. A write whose answer was lost (the connection dropped during the
    /// commit) is told `false` even if the commit landed: the pool cannot tell, and counting
    /// it could count twice what another worker ends.
    ///
    /// Count what a job did here, not when the handler returns: a worker frozen past its
    /// lease whose job was rescued must not count an end that another worker writes and
    /// counts. `then` runs in the write's path before the pool goes on (on the job's task for
    /// a retry, deferral or park; on the pool's task for a run's end, written in a batch; on
    /// whichever drops the context's last clone when untold), so what it records is recorded
    /// before a draining pool returns: keep it short, and it must not panic.
    pub fn when_outcome_written(&self, then: impl FnOnce(bool) + Send + 'static) {
        self.written.when(Box::new(then));
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

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::Written;

    /// A `then` that sends what it was told on a channel.
    fn heard() -> (impl FnOnce(bool) + Send + 'static, mpsc::Receiver<bool>) {
        let (tx, rx) = mpsc::channel();
        (
            move |written| {
                tx.send(written).expect("the test listens");
            },
            rx,
        )
    }

    #[test]
    fn what_waits_hears_the_first_telling_once_and_what_comes_later_hears_it_at_once() {
        let written = Written::default();
        let (early, early_heard) = heard();
        written.when(Box::new(early));
        assert!(early_heard.try_recv().is_err(), "nothing told yet");
        written.tell(true);
        written.tell(false);
        assert_eq!(early_heard.try_iter().collect::<Vec<_>>(), vec![true]);
        let (late, late_heard) = heard();
        written.when(Box::new(late));
        assert_eq!(late_heard.try_iter().collect::<Vec<_>>(), vec![true]);
    }

    #[test]
    fn the_last_clone_dropped_untold_tells_what_waits_it_was_not_written() {
        let written = Written::default();
        let clone = written.clone();
        let (then, untold) = heard();
        written.when(Box::new(then));
        drop(written);
        assert!(untold.try_recv().is_err(), "a clone still holds it");
        drop(clone);
        assert_eq!(untold.try_iter().collect::<Vec<_>>(), vec![false]);

        let told = Written::default();
        let (then, heard) = heard();
        told.when(Box::new(then));
        told.tell(true);
        drop(told);
        assert_eq!(
            heard.try_iter().collect::<Vec<_>>(),
            vec![true],
            "told once, not again"
        );
    }

    #[test]
    fn what_runs_when_told_may_ask_again_without_waiting_on_itself() {
        let written = Written::default();
        let (inner, inner_heard) = heard();
        let again = written.clone();
        written.when(Box::new(move |_| again.when(Box::new(inner))));
        written.tell(true);
        assert_eq!(inner_heard.try_iter().collect::<Vec<_>>(), vec![true]);
    }
}
