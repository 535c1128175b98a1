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

macro_rules! task_operations {
    ($backend:ty, $dir:literal) => {
        macro_rules! task_sql {
            ($name:literal) => {
                include_str!(concat!("../sql/", $dir, "/tasks/", $name, ".sql"))
            };
        }

        impl $backend {
            pub(crate) async fn start_task(
                &self,
                new: &$crate::tasks::NewTask<'_>,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query(task_sql!("insert"))
                    .bind(new.id)
                    .bind(new.run_id)
                    .bind($crate::text::Text(new.call_id))
                    .bind($crate::text::Text(new.command))
                    .bind(new.owner)
                    .bind(now)
                    .bind(new.deadline_at)
                    .execute(&mut *self.writer().await?)
                    .await?;
                Ok(())
            }

            pub(crate) async fn end_task(
                &self,
                id: &str,
                end: &$crate::tasks::TaskEnd<'_>,
                now: i64,
            ) -> $crate::Result<Option<String>> {
                Ok(sqlx::query_scalar(task_sql!("end"))
                    .bind(id)
                    .bind(end.status.as_str())
                    .bind(end.exit_code)
                    .bind($crate::text::Text(end.detail))
                    .bind($crate::text::Text(end.output_tail))
                    .bind(end.output_bytes)
                    .bind(now)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn heartbeat_tasks(
                &self,
                owner: &str,
                now: i64,
            ) -> $crate::Result<Vec<(String, bool)>> {
                Ok(sqlx::query_as(task_sql!("heartbeat"))
                    .bind(owner)
                    .bind(now)
                    .fetch_all(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn request_task_stop(
                &self,
                id: &str,
                now: i64,
            ) -> $crate::Result<Option<String>> {
                Ok(sqlx::query_scalar(task_sql!("request_stop"))
                    .bind(id)
                    .bind(now)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn mark_lost_tasks(
                &self,
                now: i64,
                stale_before: i64,
            ) -> $crate::Result<Vec<String>> {
                Ok(sqlx::query_scalar(task_sql!("mark_lost"))
                    .bind(now)
                    .bind(stale_before)
                    .fetch_all(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn task(
                &self,
                id: &str,
            ) -> $crate::Result<Option<$crate::tasks::Task>> {
                Ok(sqlx::query_as(task_sql!("get"))
                    .bind(id)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn tasks_of_run(
                &self,
                run_id: &str,
                unreported_only: bool,
            ) -> $crate::Result<Vec<$crate::tasks::Task>> {
                let sql = if unreported_only {
                    task_sql!("unreported")
                } else {
                    task_sql!("of_run")
                };
                Ok(sqlx::query_as(sql)
                    .bind(run_id)
                    .fetch_all(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn mark_task_reported(
                &self,
                id: &str,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query(task_sql!("mark_reported"))
                    .bind(id)
                    .bind(now)
                    .execute(&mut *self.writer().await?)
                    .await?;
                Ok(())
            }

            pub(crate) async fn tasks_to_wake(
                &self,
                limit: i64,
            ) -> $crate::Result<Vec<(String, String)>> {
                Ok(sqlx::query_as(task_sql!("to_wake"))
                    .bind(limit)
                    .fetch_all(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn orphaned_tasks(&self, owner: &str) -> $crate::Result<Vec<String>> {
                Ok(sqlx::query_scalar(task_sql!("orphaned"))
                    .bind(owner)
                    .fetch_all(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn running_task_count(&self, run_id: &str) -> $crate::Result<i64> {
                Ok(sqlx::query_scalar(task_sql!("running_count"))
                    .bind(run_id)
                    .fetch_one(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn list_tasks(
                &self,
                status: Option<&str>,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::tasks::Task>> {
                Ok(sqlx::query_as(task_sql!("list"))
                    .bind(status)
                    .bind(limit)
                    .fetch_all(&mut *self.reader().await?)
                    .await?)
            }
        }
    };
}

pub(crate) use task_operations;

impl Store {
    /// Records a task that just started, as running and refreshed now.
    pub async fn start_task(&self, new: &NewTask<'_>) -> Result<()> {
        let now = self.now();
        dispatch!(self, b => b.start_task(new, now))
    }

    /// Records how task `id` ended. Returns the task's run when this call ended it, `None`
    /// when it had already ended (e.g. it was marked lost meanwhile); an unknown id is
    /// `NotFound`.
    pub async fn end_task(&self, id: &str, end: &TaskEnd<'_>) -> Result<Option<String>> {
        if end.status == TaskStatus::Running {
            return Err(Error::Invalid(
                "a task cannot end as running; give how it ended".into(),
            ));
        }
        let now = self.now();
        let ended = dispatch!(self, b => b.end_task(id, end, now))?;
        if ended.is_none() && self.task(id).await?.is_none() {
            return Err(Error::NotFound {
                what: "task",
                id: id.to_string(),
            });
        }
        Ok(ended)
    }

    /// Refreshes every running task of `owner`. Returns those still running, each with
    /// whether a stop was requested for it; a task of `owner` missing from the answer has
    /// ended meanwhile (e.g. marked lost by another daemon) and must not run on.
    pub async fn heartbeat_tasks(&self, owner: &str) -> Result<Vec<(String, bool)>> {
        let now = self.now();
        dispatch!(self, b => b.heartbeat_tasks(owner, now))
    }

    /// Asks the owner of running task `id` to stop it (its next refresh sees the request).
    /// Returns false when the task is not running.
    pub async fn request_task_stop(&self, id: &str) -> Result<bool> {
        let now = self.now();
        Ok(dispatch!(self, b => b.request_task_stop(id, now))?.is_some())
    }

    /// Ends as `lost` every running task not refreshed within `stale_after`; returns their ids.
    pub async fn mark_lost_tasks(&self, stale_after: std::time::Duration) -> Result<Vec<String>> {
        let now = self.now();
        let stale_ms = i64::try_from(stale_after.as_millis()).unwrap_or(i64::MAX);
        dispatch!(self, b => b.mark_lost_tasks(now, now.saturating_sub(stale_ms)))
    }

    /// A task by id.
    pub async fn task(&self, id: &str) -> Result<Option<Task>> {
        dispatch!(self, b => b.task(id))
    }

    /// A run's tasks, oldest first.
    pub async fn tasks_of_run(&self, run_id: &str) -> Result<Vec<Task>> {
        dispatch!(self, b => b.tasks_of_run(run_id, false))
    }

    /// A run's tasks whose ending its log does not hold yet (running ones included).
    pub async fn unreported_tasks(&self, run_id: &str) -> Result<Vec<Task>> {
        dispatch!(self, b => b.tasks_of_run(run_id, true))
    }

    /// The run's log holds task `id`'s ending. Does nothing for a running task.
    pub async fn mark_task_reported(&self, id: &str) -> Result<()> {
        let now = self.now();
        dispatch!(self, b => b.mark_task_reported(id, now))
    }

    /// `(run id, task id)` of ended, unreported tasks whose run is waiting, oldest ending
    /// first: each such run should be woken to hear of its task.
    pub async fn tasks_to_wake(&self, limit: i64) -> Result<Vec<(String, String)>> {
        dispatch!(self, b => b.tasks_to_wake(limit.clamp(1, 10_000)))
    }

    /// Running tasks of `owner` whose run has finished (they should be stopped).
    pub async fn orphaned_tasks(&self, owner: &str) -> Result<Vec<String>> {
        dispatch!(self, b => b.orphaned_tasks(owner))
    }

    /// How many of a run's tasks are running.
    pub async fn running_task_count(&self, run_id: &str) -> Result<i64> {
        dispatch!(self, b => b.running_task_count(run_id))
    }

    /// Tasks, newest first, optionally only those in `status`; at most `limit` (1-1000).
    pub async fn list_tasks(&self, status: Option<TaskStatus>, limit: i64) -> Result<Vec<Task>> {
        let status = status.map(TaskStatus::as_str);
        dispatch!(self, b => b.list_tasks(status, limit.clamp(1, 1000)))
    }
}
