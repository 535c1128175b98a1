//! Sleeping runs, for operators: the pending wakeups (a waiting run and the resume job armed
//! for it) and waking one early. Waking early only moves the armed job's due time to now;
//! the run resumes through the queue like any wakeup, and the model is told it woke early.

use crate::clock::Millis;
use crate::model::ResumeReason;
use crate::store::{Store, dispatch};
use crate::{Error, Result};

/// A run waiting for its wakeup.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct PendingWakeup {
    pub run_id: String,
    pub agent: String,
    /// The resume job armed for the wakeup.
    pub job_id: i64,
    pub due_at: Millis,
    /// Why the run resumes (the agent's reason for a wakeup it set).
    #[serde(skip)]
    #[sqlx(try_from = "crate::text::DbText")]
    pub payload: String,
}

impl PendingWakeup {
    /// Why the run sleeps: the reason the agent gave for a wakeup it set, or the background
    /// task it waits for (it wakes when that ends, or at `due_at` at the latest).
    pub fn reason(&self) -> Option<String> {
        match ResumeReason::from_payload(&self.payload) {
            Some(ResumeReason::Wakeup { reason, .. }) => Some(reason),
            Some(ResumeReason::Task { task_id }) => {
                Some(format!("waiting for background task {task_id}"))
            }
            _ => None,
        }
    }
}

macro_rules! wakeup_operations {
    ($backend:ty, $dir:literal) => {
        impl $backend {
            pub(crate) async fn pending_wakeups(
                &self,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::wakeups::PendingWakeup>> {
                Ok(sqlx::query_as(include_str!(concat!(
                    "../sql/",
                    $dir,
                    "/wakeups/pending.sql"
                )))
                .bind(limit)
                .fetch_all(&mut *self.reader().await?)
                .await?)
            }

            pub(crate) async fn wake_now(
                &self,
                run_id: &str,
                now: i64,
            ) -> $crate::Result<Vec<i64>> {
                Ok(sqlx::query_scalar(include_str!(concat!(
                    "../sql/",
                    $dir,
                    "/wakeups/wake_now.sql"
                )))
                .bind(run_id)
                .bind(now)
                .fetch_all(&mut *self.writer().await?)
                .await?)
            }
        }
    };
}

pub(crate) use wakeup_operations;

impl Store {
    /// Waiting runs and when each wakes, soonest first.
    pub async fn pending_wakeups(&self, limit: i64) -> Result<Vec<PendingWakeup>> {
        dispatch!(self, b => b.pending_wakeups(limit.clamp(1, 10_000)))
    }

    /// Wakes a waiting run now instead of at its due time.
    pub async fn wake_now(&self, run_id: &str) -> Result<()> {
        let now = self.now();
        let woken = dispatch!(self, b => b.wake_now(run_id, now))?;
        if !woken.is_empty() {
            self.wake();
            return Ok(());
        }
        match self.run(run_id).await? {
            None => Err(Error::NotFound {
                what: "run",
                id: run_id.to_string(),
            }),
            Some(run) => Err(Error::Conflict(format!(
                "run {run_id} is {}, not waiting for a wakeup; only a sleeping run can be woken",
                run.status
            ))),
        }
    }
}
