//! Background tasks: commands an agent started with `run_command {background: true}` that
//! outlive the tool call (and the job) that started them.
//!
//! What it guarantees:
//! - **One row per task, written before the model learns its id.** A task's id, run, the
//!   call that started it, its command (redacted by the caller) and its owner (the daemon
//!   running the process) are committed at start.
//! - **Ended once.** [`Store::end_task`] changes only a running task, so the first ending
//!   written wins: a task marked `lost` is never later reported as `succeeded`.
//! - **Lost, never success.** The owner refreshes its tasks' `heartbeat_at`
//!   ([`Store::heartbeat_tasks`]); [`Store::mark_lost_tasks`], run by every daemon, ends the
//!   running tasks nobody refreshed within the staleness window as `lost`.
//! - **Stopped from anywhere.** [`Store::request_task_stop`] marks a running task; its owner
//!   learns of it at its next refresh ([`Store::heartbeat_tasks`]), which also names the
//!   owner's tasks that another daemon has ended, so they are killed too.
//! - **Each ending reaches the model once.** `reported_at` is set after the run's log holds
//!   the ending ([`Store::mark_task_reported`]); [`Store::tasks_to_wake`] lists ended,
//!   unreported tasks of sleeping runs so the caller can wake them.
//!
//! A backend supplies the statements (`TaskStatements`, one method per file of
//! `store/sql/<backend>/tasks/`, bound by `task_statements!`); the checks, the staleness
//! cut-off and the choice of connection are written once here, over that trait.

use std::future::Future;
use std::time::Duration;

use crate::backend::{Backend, Conn};
use crate::clock::Millis;
use crate::states::TaskStatus;
use crate::store::{Store, dispatch};
use crate::{Error, Result};

/// A background task, as stored.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct Task {
    pub id: String,
    pub run_id: String,
    /// The `run_command` call that started it.
    #[sqlx(try_from = "crate::text::DbText")]
    pub call_id: String,
    /// The command line (secrets redacted).
    #[sqlx(try_from = "crate::text::DbText")]
    pub command: String,
    /// The daemon running the process.
    pub owner: String,
    #[sqlx(try_from = "String")]
    pub status: TaskStatus,
    pub exit_code: Option<i64>,
    /// How it ended, in words.
    #[sqlx(try_from = "crate::text::DbOptText")]
    pub detail: Option<String>,
    /// The last part of its output (redacted), once it ended.
    #[sqlx(try_from = "crate::text::DbOptText")]
    pub output_tail: Option<String>,
    /// Bytes of output it wrote in total.
    pub output_bytes: i64,
    pub started_at: Millis,
    /// When it is stopped if still running.
    pub deadline_at: Millis,
    pub heartbeat_at: Millis,
    pub ended_at: Option<Millis>,
    /// When the run's log took its ending.
    pub reported_at: Option<Millis>,
    /// When `task_stop` on another daemon asked the owner to stop it.
    pub stop_requested_at: Option<Millis>,
}

/// A task that just started.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTask<'a> {
    pub id: &'a str,
    pub run_id: &'a str,
    pub call_id: &'a str,
    pub command: &'a str,
    pub owner: &'a str,
    pub deadline_at: Millis,
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskEnd<'a> {
    pub status: TaskStatus,
    pub exit_code: Option<i64>,
    pub detail: &'a str,
    pub output_tail: &'a str,
    pub output_bytes: i64,
}

/// A running task refreshed by its owner (`tasks/heartbeat.sql`).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskBeat {
    pub id: String,
    /// Whether a stop was asked for it.
    pub stop_requested: bool,
}

/// An ended, unreported task whose run sleeps (`tasks/to_wake.sql`).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskToWake {
    pub run_id: String,
    pub task_id: String,
}

/// The statements of background tasks (`store/sql/<backend>/tasks/`).
pub(crate) trait TaskStatements: Backend {
    /// `tasks/insert.sql`: a task running and refreshed at `now`.
    fn insert_task(
        c: &mut Conn<Self>,
        new: &NewTask<'_>,
        now: Millis,
    ) -> impl Future<Output = Result<()>> + Send;
    /// `tasks/end.sql`: ends a running task; its run, `None` when it was not running.
    fn end_task(
        c: &mut Conn<Self>,
        id: &str,
        end: &TaskEnd<'_>,
        now: Millis,
    ) -> impl Future<Output = Result<Option<String>>> + Send;
    /// `tasks/heartbeat.sql`: refreshes the owner's running tasks.
    fn heartbeat_tasks(
        c: &mut Conn<Self>,
        owner: &str,
        now: Millis,
    ) -> impl Future<Output = Result<Vec<TaskBeat>>> + Send;
    /// `tasks/request_stop.sql`: whether the task was running and is asked to stop now.
    fn request_task_stop(
        c: &mut Conn<Self>,
        id: &str,
        now: Millis,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// `tasks/mark_lost.sql`: ends as lost the running tasks refreshed before
    /// `stale_before`; their ids.
    fn mark_lost_tasks(
        c: &mut Conn<Self>,
        now: Millis,
        stale_before: Millis,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;
    /// `tasks/get.sql`.
    fn get_task(c: &mut Conn<Self>, id: &str) -> impl Future<Output = Result<Option<Task>>> + Send;
    /// `tasks/of_run.sql`: oldest first.
    fn tasks_of_run(
        c: &mut Conn<Self>,
        run_id: &str,
    ) -> impl Future<Output = Result<Vec<Task>>> + Send;
    /// `tasks/unreported.sql`: the run's tasks whose ending its log does not hold yet.
    fn unreported_tasks(
        c: &mut Conn<Self>,
        run_id: &str,
    ) -> impl Future<Output = Result<Vec<Task>>> + Send;
    /// `tasks/mark_reported.sql`.
    fn mark_task_reported(
        c: &mut Conn<Self>,
        id: &str,
        now: Millis,
    ) -> impl Future<Output = Result<()>> + Send;
    /// `tasks/to_wake.sql`: oldest ending first.
    fn tasks_to_wake(
        c: &mut Conn<Self>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<TaskToWake>>> + Send;
    /// `tasks/orphaned.sql`: running tasks of `owner` whose run has finished.
    fn orphaned_tasks(
        c: &mut Conn<Self>,
        owner: &str,
    ) -> impl Future<Output = Result<Vec<String>>> + Send;
    /// `tasks/running_count.sql`.
    fn running_task_count(
        c: &mut Conn<Self>,
        run_id: &str,
    ) -> impl Future<Output = Result<i64>> + Send;
    /// `tasks/list.sql`: newest first, of one status when given.
    fn list_tasks(
        c: &mut Conn<Self>,
        status: Option<TaskStatus>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<Task>>> + Send;
}

/// Implements [`TaskStatements`] for a backend from its SQL directory.
macro_rules! task_statements {
    ($backend:ty, $dir:literal) => {
        impl $crate::tasks::TaskStatements for $backend {
            async fn insert_task(
                c: &mut $crate::backend::Conn<Self>,
                new: &$crate::tasks::NewTask<'_>,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "tasks/insert"))
                    .bind(new.id)
                    .bind(new.run_id)
                    .bind($crate::text::Text(new.call_id))
                    .bind($crate::text::Text(new.command))
                    .bind(new.owner)
                    .bind(now)
                    .bind(new.deadline_at)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn end_task(
                c: &mut $crate::backend::Conn<Self>,
                id: &str,
                end: &$crate::tasks::TaskEnd<'_>,
                now: i64,
            ) -> $crate::Result<Option<String>> {
                Ok(sqlx::query_scalar($crate::backend::sql!($dir, "tasks/end"))
                    .bind(id)
                    .bind(end.status.as_str())
                    .bind(end.exit_code)
                    .bind($crate::text::Text(end.detail))
                    .bind($crate::text::Text(end.output_tail))
                    .bind(end.output_bytes)
                    .bind(now)
                    .fetch_optional(c)
                    .await?)
            }

            async fn heartbeat_tasks(
                c: &mut $crate::backend::Conn<Self>,
                owner: &str,
                now: i64,
            ) -> $crate::Result<Vec<$crate::tasks::TaskBeat>> {
                let rows: Vec<(String, bool)> =
                    sqlx::query_as($crate::backend::sql!($dir, "tasks/heartbeat"))
                        .bind(owner)
                        .bind(now)
                        .fetch_all(c)
                        .await?;
                Ok(rows
                    .into_iter()
                    .map(|(id, stop_requested)| $crate::tasks::TaskBeat { id, stop_requested })
                    .collect())
            }

            async fn request_task_stop(
                c: &mut $crate::backend::Conn<Self>,
                id: &str,
                now: i64,
            ) -> $crate::Result<bool> {
                let asked: Option<String> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "tasks/request_stop"))
                        .bind(id)
                        .bind(now)
                        .fetch_optional(c)
                        .await?;
                Ok(asked.is_some())
            }

            async fn mark_lost_tasks(
                c: &mut $crate::backend::Conn<Self>,
                now: i64,
                stale_before: i64,
            ) -> $crate::Result<Vec<String>> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "tasks/mark_lost"))
                        .bind(now)
                        .bind(stale_before)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn get_task(
                c: &mut $crate::backend::Conn<Self>,
                id: &str,
            ) -> $crate::Result<Option<$crate::tasks::Task>> {
                Ok(sqlx::query_as($crate::backend::sql!($dir, "tasks/get"))
                    .bind(id)
                    .fetch_optional(c)
                    .await?)
            }

            async fn tasks_of_run(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
            ) -> $crate::Result<Vec<$crate::tasks::Task>> {
                Ok(sqlx::query_as($crate::backend::sql!($dir, "tasks/of_run"))
                    .bind(run_id)
                    .fetch_all(c)
                    .await?)
            }

            async fn unreported_tasks(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
            ) -> $crate::Result<Vec<$crate::tasks::Task>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "tasks/unreported"))
                        .bind(run_id)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn mark_task_reported(
                c: &mut $crate::backend::Conn<Self>,
                id: &str,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "tasks/mark_reported"))
                    .bind(id)
                    .bind(now)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn tasks_to_wake(
                c: &mut $crate::backend::Conn<Self>,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::tasks::TaskToWake>> {
                let rows: Vec<(String, String)> =
                    sqlx::query_as($crate::backend::sql!($dir, "tasks/to_wake"))
                        .bind(limit)
                        .fetch_all(c)
                        .await?;
                Ok(rows
                    .into_iter()
                    .map(|(run_id, task_id)| $crate::tasks::TaskToWake { run_id, task_id })
                    .collect())
            }

            async fn orphaned_tasks(
                c: &mut $crate::backend::Conn<Self>,
                owner: &str,
            ) -> $crate::Result<Vec<String>> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "tasks/orphaned"))
                        .bind(owner)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn running_task_count(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
            ) -> $crate::Result<i64> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "tasks/running_count"))
                        .bind(run_id)
                        .fetch_one(c)
                        .await?,
                )
            }

            async fn list_tasks(
                c: &mut $crate::backend::Conn<Self>,
                status: Option<$crate::states::TaskStatus>,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::tasks::Task>> {
                Ok(sqlx::query_as($crate::backend::sql!($dir, "tasks/list"))
                    .bind(status.map($crate::states::TaskStatus::as_str))
                    .bind(limit)
                    .fetch_all(c)
                    .await?)
            }
        }
    };
}
pub(crate) use task_statements;

/// Refuses an ending that is no ending.
fn check_end(end: &TaskEnd<'_>) -> Result<()> {
    if end.status == TaskStatus::Running {
        return Err(Error::Invalid(
            "a task cannot end as running; give how it ended".into(),
        ));
    }
    Ok(())
}

/// The refresh time before which a running task counts as lost.
fn stale_before(now: Millis, stale_after: Duration) -> Millis {
    let stale_ms = i64::try_from(stale_after.as_millis()).unwrap_or(i64::MAX);
    now.saturating_sub(stale_ms)
}

/// Ends task `id`: its run when this call ended it, `None` when it had ended before;
/// `NotFound` for an unknown id.
async fn end<B: TaskStatements>(
    b: &B,
    id: &str,
    ending: &TaskEnd<'_>,
    now: Millis,
) -> Result<Option<String>> {
    let mut c = b.writer().await?;
    let ended = B::end_task(&mut c, id, ending, now).await?;
    if ended.is_none() && B::get_task(&mut c, id).await?.is_none() {
        return Err(Error::NotFound {
            what: "task",
            id: id.to_string(),
        });
    }
    Ok(ended)
}

async fn start<B: TaskStatements>(b: &B, new: &NewTask<'_>, now: Millis) -> Result<()> {
    B::insert_task(&mut *b.writer().await?, new, now).await
}

async fn heartbeat<B: TaskStatements>(b: &B, owner: &str, now: Millis) -> Result<Vec<TaskBeat>> {
    B::heartbeat_tasks(&mut *b.writer().await?, owner, now).await
}

async fn request_stop<B: TaskStatements>(b: &B, id: &str, now: Millis) -> Result<bool> {
    B::request_task_stop(&mut *b.writer().await?, id, now).await
}

async fn mark_lost<B: TaskStatements>(b: &B, now: Millis, before: Millis) -> Result<Vec<String>> {
    B::mark_lost_tasks(&mut *b.writer().await?, now, before).await
}

async fn get<B: TaskStatements>(b: &B, id: &str) -> Result<Option<Task>> {
    B::get_task(&mut *b.writer().await?, id).await
}

async fn of_run<B: TaskStatements>(b: &B, run_id: &str) -> Result<Vec<Task>> {
    B::tasks_of_run(&mut *b.writer().await?, run_id).await
}

async fn unreported<B: TaskStatements>(b: &B, run_id: &str) -> Result<Vec<Task>> {
    B::unreported_tasks(&mut *b.writer().await?, run_id).await
}

async fn mark_reported<B: TaskStatements>(b: &B, id: &str, now: Millis) -> Result<()> {
    B::mark_task_reported(&mut *b.writer().await?, id, now).await
}

async fn to_wake<B: TaskStatements>(b: &B, limit: i64) -> Result<Vec<TaskToWake>> {
    B::tasks_to_wake(&mut *b.writer().await?, limit).await
}

async fn orphaned<B: TaskStatements>(b: &B, owner: &str) -> Result<Vec<String>> {
    B::orphaned_tasks(&mut *b.writer().await?, owner).await
}

async fn running_count<B: TaskStatements>(b: &B, run_id: &str) -> Result<i64> {
    B::running_task_count(&mut *b.writer().await?, run_id).await
}

async fn list<B: TaskStatements>(
    b: &B,
    status: Option<TaskStatus>,
    limit: i64,
) -> Result<Vec<Task>> {
    B::list_tasks(&mut *b.reader().await?, status, limit).await
}

impl Store {
    /// Records a task that just started, as running and refreshed now.
    pub async fn start_task(&self, new: &NewTask<'_>) -> Result<()> {
        let now = self.now();
        dispatch!(self, b => start(b, new, now))
    }

    /// Records how task `id` ended. Returns the task's run when this call ended it, `None`
    /// when it had already ended (e.g. it was marked lost meanwhile); an unknown id is
    /// `NotFound`.
    pub async fn end_task(&self, id: &str, ending: &TaskEnd<'_>) -> Result<Option<String>> {
        check_end(ending)?;
        let now = self.now();
        dispatch!(self, b => end(b, id, ending, now))
    }

    /// Refreshes every running task of `owner`. Returns those still running, each with
    /// whether a stop was requested for it; a task of `owner` missing from the answer has
    /// ended meanwhile (e.g. marked lost by another daemon) and must not run on.
    pub async fn heartbeat_tasks(&self, owner: &str) -> Result<Vec<TaskBeat>> {
        let now = self.now();
        dispatch!(self, b => heartbeat(b, owner, now))
    }

    /// Asks the owner of running task `id` to stop it (its next refresh sees the request).
    /// Returns false when the task is not running.
    pub async fn request_task_stop(&self, id: &str) -> Result<bool> {
        let now = self.now();
        dispatch!(self, b => request_stop(b, id, now))
    }

    /// Ends as `lost` every running task not refreshed within `stale_after`; returns their ids.
    pub async fn mark_lost_tasks(&self, stale_after: Duration) -> Result<Vec<String>> {
        let now = self.now();
        let before = stale_before(now, stale_after);
        dispatch!(self, b => mark_lost(b, now, before))
    }

    /// A task by id.
    pub async fn task(&self, id: &str) -> Result<Option<Task>> {
        dispatch!(self, b => get(b, id))
    }

    /// A run's tasks, oldest first.
    pub async fn tasks_of_run(&self, run_id: &str) -> Result<Vec<Task>> {
        dispatch!(self, b => of_run(b, run_id))
    }

    /// A run's tasks whose ending its log does not hold yet (running ones included).
    pub async fn unreported_tasks(&self, run_id: &str) -> Result<Vec<Task>> {
        dispatch!(self, b => unreported(b, run_id))
    }

    /// The run's log holds task `id`'s ending. Does nothing for a running task.
    pub async fn mark_task_reported(&self, id: &str) -> Result<()> {
        let now = self.now();
        dispatch!(self, b => mark_reported(b, id, now))
    }

    /// Ended, unreported tasks whose run is waiting, oldest ending first: each such run
    /// should be woken to hear of its task.
    pub async fn tasks_to_wake(&self, limit: i64) -> Result<Vec<TaskToWake>> {
        dispatch!(self, b => to_wake(b, limit.clamp(1, 10_000)))
    }

    /// Running tasks of `owner` whose run has finished (they should be stopped).
    pub async fn orphaned_tasks(&self, owner: &str) -> Result<Vec<String>> {
        dispatch!(self, b => orphaned(b, owner))
    }

    /// How many of a run's tasks are running.
    pub async fn running_task_count(&self, run_id: &str) -> Result<i64> {
        dispatch!(self, b => running_count(b, run_id))
    }

    /// Tasks, newest first, optionally only those in `status`; at most `limit` (1-1000).
    pub async fn list_tasks(&self, status: Option<TaskStatus>, limit: i64) -> Result<Vec<Task>> {
        dispatch!(self, b => list(b, status, limit.clamp(1, 1000)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ending(status: TaskStatus) -> TaskEnd<'static> {
        TaskEnd {
            status,
            exit_code: None,
            detail: "",
            output_tail: "",
            output_bytes: 0,
        }
    }

    #[test]
    fn only_a_real_ending_ends_a_task() {
        assert!(matches!(
            check_end(&ending(TaskStatus::Running)),
            Err(Error::Invalid(_))
        ));
        for status in TaskStatus::ALL
            .iter()
            .filter(|s| **s != TaskStatus::Running)
        {
            assert!(check_end(&ending(*status)).is_ok(), "{status}");
        }
    }

    #[test]
    fn tasks_refreshed_before_the_window_are_stale() {
        assert_eq!(stale_before(100_000, Duration::from_secs(30)), 70_000);
        assert_eq!(
            stale_before(5, Duration::MAX),
            5 - i64::MAX,
            "an endless window counts no task stale"
        );
    }
}
