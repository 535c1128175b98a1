//! A run's inbox: the messages sent to it (a webhook `resume` route) that its running job takes
//! into the run's log, and the closing that comes before the run ends.
//!
//! A message is accepted as a resume job carrying `{"type": "message"}`
//! ([`ResumeReason::Message`]). It reaches the model one of two ways: its own job resumes the
//! run (the run was waiting), or the job already running the run takes it
//! ([`LeasedJob::take_message`]: the message job ends and the run's event is appended in one
//! transaction, fenced by the lease). Before a run ends its job closes the inbox
//! ([`LeasedJob::close_inbox`]), and from then on [`check_open`] refuses every message.
//!
//! What it guarantees: a message is taken into the run or refused when it is sent, never
//! accepted and then dropped. Accepting ([`check_open`], in the enqueue's transaction) and
//! closing both lock the run row first (SQLite: the one writer, `BEGIN IMMEDIATE`;
//! PostgreSQL: `FOR NO KEY UPDATE`), so one comes wholly before the other: a closing that
//! finds a message still queued does not close (the job takes it and the run goes on), and a
//! message sent after the closing is refused, naming the run.

use std::future::Future;

use crate::backend::{Backend, Conn};
use crate::clock::Millis;
use crate::leased::LeasedJob;
use crate::model::ResumeReason;
use crate::queue::lease::{NewEvent, stage_event};
use crate::queue::parse_run_status;
use crate::states::RunStatus;
use crate::store::dispatch;
use crate::{Error, Result};

/// A message accepted for a run and not yet taken: its resume job and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedMessage {
    /// The resume job that carries it.
    pub job_id: i64,
    pub text: String,
}

/// A queued resume job's row as `inbox/queued.sql` reads it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct QueuedRow {
    id: i64,
    #[sqlx(try_from = "crate::text::DbText")]
    payload: String,
}

/// The run row as a message's acceptance sees it (`inbox/lock.sql`).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct InboxRow {
    status: String,
    inbox_closed_at: Option<Millis>,
}

/// The latest due time and lowest priority of a run's queued jobs (`inbox/last_queued.sql`).
#[derive(Debug, Clone, Copy, sqlx::FromRow)]
pub(crate) struct LastQueued {
    run_at: Option<Millis>,
    priority: Option<i64>,
}

/// The statements of runs' inboxes.
pub(crate) trait InboxStatements: Backend {
    /// `inbox/lock.sql`: the run's status and inbox, its row locked until commit.
    fn lock_inbox(
        c: &mut Conn<Self>,
        run_id: &str,
    ) -> impl Future<Output = Result<Option<InboxRow>>> + Send;
    /// `inbox/last_queued.sql`: the latest due time and lowest priority of the run's queued
    /// jobs.
    fn last_queued(
        c: &mut Conn<Self>,
        run_id: &str,
    ) -> impl Future<Output = Result<LastQueued>> + Send;
    /// `inbox/queued.sql`: the run's queued message jobs, oldest first.
    fn queued_messages(
        c: &mut Conn<Self>,
        run_id: &str,
    ) -> impl Future<Output = Result<Vec<QueuedRow>>> + Send;
    /// `inbox/take.sql`: whether the message job was still queued and is taken now.
    fn take_message_job(
        c: &mut Conn<Self>,
        job_id: i64,
        run_id: &str,
        now: Millis,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// `inbox/close.sql`: whether the lease held (the inbox is closed then).
    fn close_inbox(
        c: &mut Conn<Self>,
        job_id: i64,
        token: i64,
        now: Millis,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// `inbox/replace_approval_jobs.sql`: cancels the run's queued approval resumes but
    /// `job_id`.
    fn replace_approval_jobs(
        c: &mut Conn<Self>,
        run_id: &str,
        job_id: i64,
        now: Millis,
    ) -> impl Future<Output = Result<()>> + Send;
    /// `inbox/note.sql`: whether the lease held.
    fn note_job(
        c: &mut Conn<Self>,
        job_id: i64,
        token: i64,
        text: &str,
        now: Millis,
    ) -> impl Future<Output = Result<bool>> + Send;
}

/// Implements [`InboxStatements`] for a backend from its SQL directory.
macro_rules! inbox_statements {
    ($backend:ty, $dir:literal) => {
        impl $crate::inbox::InboxStatements for $backend {
            async fn lock_inbox(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
            ) -> $crate::Result<Option<$crate::inbox::InboxRow>> {
                Ok(sqlx::query_as($crate::backend::sql!($dir, "inbox/lock"))
                    .bind(run_id)
                    .fetch_optional(c)
                    .await?)
            }

            async fn last_queued(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
            ) -> $crate::Result<$crate::inbox::LastQueued> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "inbox/last_queued"))
                        .bind(run_id)
                        .fetch_one(c)
                        .await?,
                )
            }

            async fn queued_messages(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
            ) -> $crate::Result<Vec<$crate::inbox::QueuedRow>> {
                Ok(sqlx::query_as($crate::backend::sql!($dir, "inbox/queued"))
                    .bind(run_id)
                    .fetch_all(c)
                    .await?)
            }

            async fn take_message_job(
                c: &mut $crate::backend::Conn<Self>,
                job_id: i64,
                run_id: &str,
                now: i64,
            ) -> $crate::Result<bool> {
                let taken: Option<i64> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "inbox/take"))
                        .bind(job_id)
                        .bind(run_id)
                        .bind(now)
                        .fetch_optional(c)
                        .await?;
                Ok(taken.is_some())
            }

            async fn close_inbox(
                c: &mut $crate::backend::Conn<Self>,
                job_id: i64,
                token: i64,
                now: i64,
            ) -> $crate::Result<bool> {
                let closed: Option<String> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "inbox/close"))
                        .bind(job_id)
                        .bind(token)
                        .bind(now)
                        .fetch_optional(c)
                        .await?;
                Ok(closed.is_some())
            }

            async fn replace_approval_jobs(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                job_id: i64,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "inbox/replace_approval_jobs"))
                    .bind(run_id)
                    .bind(job_id)
                    .bind(now)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn note_job(
                c: &mut $crate::backend::Conn<Self>,
                job_id: i64,
                token: i64,
                text: &str,
                now: i64,
            ) -> $crate::Result<bool> {
                let noted: Option<i64> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "inbox/note"))
                        .bind(job_id)
                        .bind(token)
                        .bind(text)
                        .bind(now)
                        .fetch_optional(c)
                        .await?;
                Ok(noted.is_some())
            }
        }
    };
}
pub(crate) use inbox_statements;

/// In the transaction accepting a message for `run_id`: the run's status, or a refusal when
/// the run is finished or its inbox closed (it is ending). Locks the run row until commit.
pub(crate) async fn check_open<B: InboxStatements>(
    tx: &mut Conn<B>,
    run_id: &str,
) -> Result<RunStatus> {
    let Some(row) = B::lock_inbox(tx, run_id).await? else {
        return Err(Error::NotFound {
            what: "run",
            id: run_id.to_string(),
        });
    };
    let status = parse_run_status(&row.status)?;
    if status.is_terminal() {
        return Err(Error::Conflict(format!(
            "run {run_id} already finished as {status}; a finished run takes no messages — \
             start a new run"
        )));
    }
    if row.inbox_closed_at.is_some() {
        return Err(Error::Conflict(format!(
            "run {run_id} is ending: it took its last messages and takes no more; this \
             message was not delivered — start a new run, or send it again once one runs \
             under this key"
        )));
    }
    Ok(status)
}

/// In the transaction accepting a message for `run_id` (in `status`): the due time and
/// priority of its job, `run_at` and `priority` as asked but never ahead of a job of the run
/// already queued — the start job that has not run yet, a retry, an earlier message — so
/// messages reach a run in the order they were sent and after what begins it. A waiting run's
/// queued jobs are its armed wakeups, which the message replaces: it is due at once.
pub(crate) async fn place<B: InboxStatements>(
    tx: &mut Conn<B>,
    run_id: &str,
    status: RunStatus,
    run_at: Millis,
    priority: i64,
) -> Result<(Millis, i64)> {
    if status == RunStatus::Waiting {
        return Ok((run_at, priority));
    }
    let last = B::last_queued(tx, run_id).await?;
    Ok((
        last.run_at.map_or(run_at, |t| t.max(run_at)),
        last.priority.map_or(priority, |p| p.min(priority)),
    ))
}

/// Whether a resume job's payload is a message (what the inbox holds).
pub(crate) fn is_message(payload: &str) -> bool {
    matches!(
        ResumeReason::from_payload(payload),
        Some(ResumeReason::Message { .. })
    )
}

async fn queued<B: InboxStatements>(b: &B, run_id: &str) -> Result<Vec<QueuedMessage>> {
    let rows = B::queued_messages(&mut *b.reader().await?, run_id).await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| match ResumeReason::from_payload(&row.payload) {
            Some(ResumeReason::Message { text }) => Some(QueuedMessage {
                job_id: row.id,
                text,
            }),
            _ => None,
        })
        .collect())
}

async fn take<B: InboxStatements + crate::queue::QueueStatements>(
    b: &B,
    lease: &LeasedJob,
    message_job: i64,
    event: NewEvent<'_>,
) -> Result<Option<i64>> {
    let mut state = lease.content.lock().await;
    let mut draft = state.draft();
    let mut tx = b.begin().await?;
    if !B::take_message_job(&mut tx, message_job, &lease.job.run_id, event.now).await? {
        B::rollback(tx).await?;
        return Ok(None);
    }
    let row = stage_event::<B>(&mut tx, lease, (&state, &mut draft), event).await?;
    let Some(seq) = B::append_event(&mut tx, row).await? else {
        B::rollback(tx).await?;
        drop(state);
        return Err(crate::queue::lease::lost(b, lease.job.id, lease.token).await);
    };
    B::commit(tx).await?;
    state.keep(draft);
    Ok(Some(seq))
}

async fn close<B: InboxStatements + crate::queue::QueueStatements>(
    b: &B,
    lease: &LeasedJob,
    unless_queued: bool,
    now: Millis,
) -> Result<bool> {
    let run_id = &lease.job.run_id;
    let mut tx = b.begin().await?;
    B::lock_inbox(&mut tx, run_id).await?;
    if unless_queued && !B::queued_messages(&mut tx, run_id).await?.is_empty() {
        B::rollback(tx).await?;
        return Ok(false);
    }
    if !B::close_inbox(&mut tx, lease.job.id, lease.token, now).await? {
        B::rollback(tx).await?;
        return Err(crate::queue::lease::lost(b, lease.job.id, lease.token).await);
    }
    B::commit(tx).await?;
    Ok(true)
}

async fn note<B: InboxStatements + crate::queue::QueueStatements>(
    b: &B,
    lease: &LeasedJob,
    text: &str,
    now: Millis,
) -> Result<()> {
    if B::note_job(
        &mut *b.writer().await?,
        lease.job.id,
        lease.token,
        text,
        now,
    )
    .await?
    {
        Ok(())
    } else {
        Err(crate::queue::lease::lost(b, lease.job.id, lease.token).await)
    }
}

impl LeasedJob {
    /// The messages accepted for this job's run and not yet taken, oldest first.
    pub async fn queued_messages(&self) -> Result<Vec<QueuedMessage>> {
        let s = &self.store;
        dispatch!(s, b => queued(b, &self.job.run_id))
    }

    /// Takes message job `message_job` into the run: it ends (succeeded) and the event
    /// (`event_type`, `payload`: the message as the run logs it) is appended, in one
    /// transaction fenced by this lease. The event's sequence number, or `None` when the
    /// message was no longer queued (its run was cancelled meanwhile) and nothing was written.
    pub async fn take_message(
        &self,
        message_job: i64,
        event_type: &str,
        payload: &str,
    ) -> Result<Option<i64>> {
        let s = &self.store;
        let now = s.now();
        let event = NewEvent {
            event_type,
            payload,
            now,
        };
        dispatch!(s, b => take(b, self, message_job, event))
    }

    /// Closes the run's inbox before the run ends: every message sent from now on is
    /// refused. With `unless_queued`, only when no accepted message waits: `false` then, and
    /// nothing changed (take them first). A run closed before stays closed.
    pub async fn close_inbox(&self, unless_queued: bool) -> Result<bool> {
        let s = &self.store;
        let now = s.now();
        dispatch!(s, b => close(b, self, unless_queued, now))
    }

    /// Records on the job why it ends without doing anything (`last_error`), under the lease.
    pub async fn note(&self, text: &str) -> Result<()> {
        let s = &self.store;
        let now = s.now();
        dispatch!(s, b => note(b, self, text, now))
    }
}
