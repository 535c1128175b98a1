//! Enqueueing: a run and its start job ([`Store::enqueue`]), many at once
//! ([`Store::enqueue_many`]), an operator's enqueue with its audit row, and a resume job for a
//! run that is not finished ([`Store::enqueue_resume`]). Which path a write takes to the
//! database is the write seam's choice (`writes.rs`); what it writes never depends on it. A
//! run that could never run (no agent, a bad lane or attempt count) is refused before
//! anything is written.

use crate::group::Via;
use crate::model::{Enqueued, JobOptions, NewResume, NewRun};
use crate::queue;
use crate::store::{Store, dispatch};
use crate::writes::WritePath;
use crate::{Error, Result};

impl Store {
    /// Creates a run and its start job. With a dedupe key already used, returns the existing
    /// run and job with `duplicate: true` and enqueues nothing. The run is marked `notify`
    /// when its agent is one of the notifying agents.
    ///
    /// Enqueues made at the same time share one transaction and its commit (`group.rs`);
    /// each still answers only once its run is durable.
    pub async fn enqueue(&self, new: &NewRun) -> Result<Enqueued> {
        check_new_run(new)?;
        let run_id = uuid::Uuid::now_v7().to_string();
        let now = self.now();
        let notify = self.notifies(&new.agent);
        let group = self.group();
        let enqueued = match group.writer(group.takes_run(new)) {
            Via::Group => group.enqueue(run_id, new, notify, now).await,
            Via::Caller(_lone) => {
                self.inner.writes.took(if queue::decides_nothing(new) {
                    WritePath::RunStatement
                } else {
                    WritePath::RunTransaction
                });
                let row = queue::RunRow {
                    id: &run_id,
                    new,
                    notify,
                    now,
                };
                dispatch!(self, b => queue::enqueue_run(b, row))
            }
        }?;
        if !enqueued.duplicate && !enqueued.skipped {
            self.wake();
        }
        self.tell_ended(&enqueued.superseded_idle).await;
        Ok(enqueued)
    }

    /// [`Store::enqueue`] in a transaction of its own that also stores the operator's audit
    /// row (see [`AsOperator::enqueue`](crate::AsOperator::enqueue)).
    pub(crate) async fn enqueue_recorded(
        &self,
        new: &NewRun,
        actor: &str,
        action: &str,
        target: &str,
    ) -> Result<Enqueued> {
        check_new_run(new)?;
        let run_id = uuid::Uuid::now_v7().to_string();
        let row = queue::RunRow {
            id: &run_id,
            new,
            notify: self.notifies(&new.agent),
            now: self.now(),
        };
        self.inner.writes.took(WritePath::RunTransaction);
        let enqueued =
            dispatch!(self, b => queue::enqueue_recorded(b, row, actor, action, target))?;
        if !enqueued.duplicate && !enqueued.skipped {
            self.wake();
        }
        self.tell_ended(&enqueued.superseded_idle).await;
        Ok(enqueued)
    }

    /// Enqueues many runs in one transaction (one statement when none has a concurrency key
    /// whose policy reads other runs), answering per run in the order given: each exactly as
    /// [`Store::enqueue`] would alone, in that order (a later run sees the earlier ones, so
    /// the same idempotency key twice makes the second a duplicate, and concurrency-key
    /// policies apply between runs of the batch). A run that is not valid is refused alone
    /// ([`Error::Invalid`] in its place) and the others are still enqueued. An error of the
    /// database fails the call, and then nothing of it was enqueued.
    pub async fn enqueue_many(&self, runs: &[NewRun]) -> Result<Vec<Result<Enqueued>>> {
        let now = self.now();
        let checked: Vec<Result<String>> = runs
            .iter()
            .map(|new| check_new_run(new).map(|()| uuid::Uuid::now_v7().to_string()))
            .collect();
        let rows: Vec<queue::RunRow<'_>> = runs
            .iter()
            .zip(&checked)
            .filter_map(|(new, id)| {
                let id = id.as_ref().ok()?;
                Some(queue::RunRow {
                    id,
                    new,
                    notify: self.notifies(&new.agent),
                    now,
                })
            })
            .collect();
        self.inner.writes.took(WritePath::ManyRuns);
        let written = dispatch!(self, b => queue::enqueue_runs(b, &rows))?;
        if written.iter().any(|e| !e.duplicate && !e.skipped) {
            self.wake();
        }
        for e in &written {
            self.tell_ended(&e.superseded_idle).await;
        }
        let mut written = written.into_iter();
        Ok(checked
            .into_iter()
            .map(|id| match id {
                Ok(_) => written
                    .next()
                    .ok_or_else(|| Error::Corrupt("a batch enqueue lost an answer".into())),
                Err(e) => Err(e),
            })
            .collect())
    }

    /// Adds a resume job to an unfinished run (a wakeup, an approval).
    pub async fn enqueue_resume(&self, new: &NewResume) -> Result<Enqueued> {
        validate_job_options(&new.job)?;
        let now = self.now();
        let enqueued = dispatch!(self, b => queue::enqueue_resume(b, new, now))?;
        if !enqueued.duplicate {
            self.wake();
        }
        Ok(enqueued)
    }
}

/// Refuses a run that could never be enqueued, saying what is wrong.
pub(crate) fn check_new_run(new: &NewRun) -> Result<()> {
    validate_job_options(&new.job)?;
    if new.agent.trim().is_empty() {
        return Err(Error::Invalid("agent must not be empty".into()));
    }
    Ok(())
}

pub(crate) fn validate_job_options(job: &JobOptions) -> Result<()> {
    if job.max_attempts < 1 {
        return Err(Error::Invalid(format!(
            "max_attempts must be at least 1 (got {})",
            job.max_attempts
        )));
    }
    if job.lane.trim().is_empty() || job.lane.len() > 64 {
        return Err(Error::Invalid(format!(
            "lane '{}' is not allowed; use 1-64 characters",
            job.lane
        )));
    }
    Ok(())
}
