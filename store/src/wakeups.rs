//! Sleeping runs, for operators: the pending wakeups (a waiting run and the resume job armed
//! for it) and waking one early. Waking early only moves the armed job's due time to now;
//! the run resumes through the queue like any wakeup, and the model is told it woke early.

use std::future::Future;

use crate::audit::{AuditStatements, NewAudit, record_in};
use crate::backend::{Backend, Conn};
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

/// The statements of sleeping runs.
pub(crate) trait WakeupStatements: Backend {
    /// `wakeups/pending.sql`: waiting runs with their armed resume job, soonest first.
    fn pending_wakeups(
        conn: &mut Conn<Self>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<PendingWakeup>>> + Send;

    /// `wakeups/wake_now.sql`: makes the run's armed wakeup due now; the jobs it moved.
    fn wake_now(
        conn: &mut Conn<Self>,
        run_id: &str,
        now: Millis,
    ) -> impl Future<Output = Result<Vec<i64>>> + Send;
}

/// Implements [`WakeupStatements`] for a backend from its SQL directory.
macro_rules! wakeup_statements {
    ($backend:ty, $dir:literal) => {
        impl $crate::wakeups::WakeupStatements for $backend {
            async fn pending_wakeups(
                conn: &mut $crate::backend::Conn<Self>,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::wakeups::PendingWakeup>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "wakeups/pending"))
                        .bind(limit)
                        .fetch_all(conn)
                        .await?,
                )
            }

            async fn wake_now(
                conn: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                now: i64,
            ) -> $crate::Result<Vec<i64>> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "wakeups/wake_now"))
                        .bind(run_id)
                        .bind(now)
                        .fetch_all(conn)
                        .await?,
                )
            }
        }
    };
}
pub(crate) use wakeup_statements;

async fn pending<B: WakeupStatements>(b: &B, limit: i64) -> Result<Vec<PendingWakeup>> {
    B::pending_wakeups(&mut *b.reader().await?, limit).await
}

async fn wake<B: WakeupStatements + AuditStatements>(
    b: &B,
    run_id: &str,
    now: Millis,
    audit: Option<&NewAudit<'_>>,
) -> Result<Vec<i64>> {
    let mut tx = b.begin().await?;
    let woken = B::wake_now(&mut tx, run_id, now).await?;
    if !woken.is_empty() {
        record_in::<B>(&mut tx, audit, now).await?;
    }
    B::commit(tx).await?;
    Ok(woken)
}

impl Store {
    /// Waiting runs and when each wakes, soonest first.
    pub async fn pending_wakeups(&self, limit: i64) -> Result<Vec<PendingWakeup>> {
        dispatch!(self, b => pending(b, limit.clamp(1, 10_000)))
    }

    /// Wakes a waiting run now instead of at its due time.
    pub async fn wake_now(&self, run_id: &str) -> Result<()> {
        self.wake_now_recorded(run_id, None).await
    }

    /// [`Store::wake_now`], writing `audit` in its transaction when it wakes the run.
    pub(crate) async fn wake_now_recorded(
        &self,
        run_id: &str,
        audit: Option<&NewAudit<'_>>,
    ) -> Result<()> {
        let now = self.now();
        let woken = dispatch!(self, b => wake(b, run_id, now, audit))?;
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
