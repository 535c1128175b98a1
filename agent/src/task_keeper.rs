//! Background tasks in the daemon: the store-backed `StoreLedger` the task supervisor
//! records into, and the [`TaskKeeper`] loop that keeps the rows true.
//!
//! What the keeper guarantees, once a second on every daemon:
//! - its own running tasks' heartbeats are refreshed, so nobody marks them lost; those that
//!   `task_stop` on another daemon asked to stop are stopped, and those another daemon
//!   marked lost meanwhile are killed (the model was told they were lost);
//! - running tasks whose daemon stopped refreshing them for `lost_after_seconds` end as
//!   `lost` (whichever daemon notices first), never as `succeeded`;
//! - its own running tasks whose run has ended (cancelled, superseded, failed…) are stopped;
//! - a sleeping run with an ended, unreported task is woken: a `resume` job with the
//!   [`ResumeReason::Task`] reason and the dedupe key `task:{id}`, so waking twice is a no-op.
//!
//! An ending recorded by `StoreLedger::ended` tries that wake at once; the keeper is the
//! fallback for runs that were busy at that moment. On shutdown the keeper stops every task
//! (they end as `lost`: the daemon goes away before they finished) before returning.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use nightshift_store::{
    Error as StoreError, JobOptions, NewResume, NewTask, ResumeReason, Store, TaskEnd, TaskStatus,
};
use nightshift_tools::{
    EndedTask, StartedTask, StopCause, TaskEnding, TaskLedger, TaskSnapshot, TaskSupervisor,
};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::ConfigError;

/// How often the keeper refreshes, sweeps and wakes.
const TICK: Duration = Duration::from_secs(1);
/// How long shutdown waits for stopped tasks' endings to be recorded.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The `[runtime.background]` settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackgroundConfig {
    /// A background command's deadline when the call sets none, in seconds. Default 3600.
    pub timeout_seconds: u64,
    /// The longest deadline a call may ask for, in seconds. Default 86400.
    pub max_timeout_seconds: u64,
    /// Background commands one run may have running at once. Default 4.
    pub max_per_run: u32,
    /// A running task whose daemon has not refreshed it for this long is lost. Default 30.
    pub lost_after_seconds: u64,
}

impl Default for BackgroundConfig {
    fn default() -> Self {
        Self {
            timeout_seconds: 3600,
            max_timeout_seconds: 24 * 3600,
            max_per_run: 4,
            lost_after_seconds: 30,
        }
    }
}

impl BackgroundConfig {
    /// Checks the values; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let key = "runtime.background";
        if self.timeout_seconds == 0 || self.max_timeout_seconds == 0 {
            return Err(ConfigError::table(
                key,
                "timeout_seconds and max_timeout_seconds must be at least 1",
            ));
        }
        if self.timeout_seconds > self.max_timeout_seconds {
            return Err(ConfigError::value(
                format!("{key}.timeout_seconds"),
                format!(
                    "({}) is above max_timeout_seconds ({})",
                    self.timeout_seconds, self.max_timeout_seconds
                ),
            ));
        }
        if self.max_per_run == 0 {
            return Err(ConfigError::value(
                format!("{key}.max_per_run"),
                "must be at least 1; to forbid background commands, do not enable run_command",
            ));
        }
        if self.lost_after_seconds < 3 {
            return Err(ConfigError::value(
                format!("{key}.lost_after_seconds"),
                format!(
                    "is {}; it must be at least 3 (tasks are refreshed every second)",
                    self.lost_after_seconds
                ),
            ));
        }
        Ok(())
    }
}

/// Records tasks in the store, as run by daemon `owner`.
#[derive(Debug, Clone)]
pub(crate) struct StoreLedger {
    store: Store,
    owner: String,
    max_per_run: u32,
}

impl StoreLedger {
    pub(crate) fn new(store: Store, owner: impl Into<String>, config: &BackgroundConfig) -> Self {
        Self {
            store,
            owner: owner.into(),
            max_per_run: config.max_per_run,
        }
    }
}

/// How a task in `status` ended; `None` while it runs.
fn ending_of(status: TaskStatus) -> Option<TaskEnding> {
    match status {
        TaskStatus::Running => None,
        TaskStatus::Succeeded => Some(TaskEnding::Succeeded),
        TaskStatus::Failed => Some(TaskEnding::Failed),
        TaskStatus::TimedOut => Some(TaskEnding::TimedOut),
        TaskStatus::Stopped => Some(TaskEnding::Stopped),
        TaskStatus::Lost => Some(TaskEnding::Lost),
    }
}

fn status_of(ending: TaskEnding) -> TaskStatus {
    match ending {
        TaskEnding::Succeeded => TaskStatus::Succeeded,
        TaskEnding::Failed => TaskStatus::Failed,
        TaskEnding::TimedOut => TaskStatus::TimedOut,
        TaskEnding::Stopped => TaskStatus::Stopped,
        TaskEnding::Lost => TaskStatus::Lost,
    }
}

impl TaskLedger for StoreLedger {
    fn started<'a>(&'a self, task: &'a StartedTask) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let unavailable =
                |e: StoreError| format!("the background command was not started: {e}");
            let running = self
                .store
                .running_task_count(&task.run_id)
                .await
                .map_err(unavailable)?;
            if running >= i64::from(self.max_per_run) {
                return Err(format!(
                    "this run already has {running} background tasks running (the limit is {}); \
                     wait for one to end or stop one with task_stop",
                    self.max_per_run
                ));
            }
            let timeout_ms = i64::try_from(task.timeout.as_millis()).unwrap_or(i64::MAX);
            self.store
                .start_task(&NewTask {
                    id: &task.id,
                    run_id: &task.run_id,
                    call_id: &task.call_id,
                    command: &task.command,
                    owner: &self.owner,
                    deadline_at: self.store.now().saturating_add(timeout_ms),
                })
                .await
                .map_err(unavailable)
        })
    }

    fn ended<'a>(&'a self, task: &'a EndedTask) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let end = TaskEnd {
                status: status_of(task.ending),
                exit_code: task.exit_code.map(i64::from),
                detail: &task.detail,
                output_tail: &task.output_tail,
                output_bytes: i64::try_from(task.output_bytes).unwrap_or(i64::MAX),
            };
            match self.store.end_task(&task.id, &end).await {
                Ok(Some(run_id)) => {
                    wake_for_task(&self.store, &run_id, &task.id).await;
                    Ok(())
                }
                // Already ended (marked lost meanwhile), or never recorded: nothing to write.
                Ok(None) | Err(StoreError::NotFound { .. }) => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        })
    }

    fn request_stop<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            self.store
                .request_task_stop(id)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn lookup<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Option<TaskSnapshot>> {
        Box::pin(async move {
            let task = self.store.task(id).await.ok()??;
            Some(TaskSnapshot {
                run_id: task.run_id,
                command: task.command,
                ending: ending_of(task.status),
                detail: task.detail,
                output_tail: task.output_tail,
                output_bytes: u64::try_from(task.output_bytes).unwrap_or(0),
            })
        })
    }
}

/// Wakes `run_id` for its ended task `task_id` if it sleeps; a busy or finished run is left
/// alone (the runtime reports the task at its next step, or nobody needs it).
async fn wake_for_task(store: &Store, run_id: &str, task_id: &str) {
    let resume = NewResume {
        run_id: run_id.to_string(),
        payload: ResumeReason::Task {
            task_id: task_id.to_string(),
        }
        .to_payload(),
        dedupe_key: Some(format!("task:{task_id}")),
        job: JobOptions::default(),
    };
    match store.run(run_id).await {
        Ok(Some(run)) if run.status == nightshift_store::RunStatus::Waiting => {}
        _ => return,
    }
    match store.enqueue_resume(&resume).await {
        Ok(enqueued) if !enqueued.duplicate => {
            tracing::info!(
                run_id,
                task = task_id,
                "woke a sleeping run: its background task ended"
            );
        }
        Ok(_) => {}
        Err(e) => tracing::debug!(run_id, task = task_id, error = %e, "not woken for its task now"),
    }
}

/// The loop keeping task rows true (see the module documentation).
#[derive(Debug)]
pub struct TaskKeeper {
    store: Store,
    owner: String,
    supervisor: TaskSupervisor,
    lost_after: Duration,
}

impl TaskKeeper {
    pub fn new(
        store: Store,
        owner: impl Into<String>,
        supervisor: TaskSupervisor,
        config: &BackgroundConfig,
    ) -> Self {
        Self {
            store,
            owner: owner.into(),
            supervisor,
            lost_after: Duration::from_secs(config.lost_after_seconds),
        }
    }

    /// Runs until `shutdown` fires, then stops every task and returns.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            if let Err(e) = self.tick().await {
                tracing::warn!(error = %e, "background task upkeep failed; retrying");
            }
        }
        self.supervisor.shutdown(SHUTDOWN_GRACE).await;
    }

    /// One round: refresh (stopping what was asked to stop, or ended elsewhere), mark lost,
    /// stop orphans, wake sleepers.
    pub async fn tick(&self) -> nightshift_store::Result<()> {
        let live = self.supervisor.running_ids();
        if !live.is_empty() {
            let rows = self.store.heartbeat_tasks(&self.owner).await?;
            let asked: Vec<String> = rows
                .iter()
                .filter(|beat| beat.stop_requested)
                .map(|beat| beat.id.clone())
                .collect();
            self.supervisor.stop_ids(&asked, StopCause::Asked);
            // A live task whose row no longer runs was marked lost while this daemon was out
            // of touch; the run was told so and may start it again: it must not run on.
            let gone: Vec<String> = live
                .into_iter()
                .filter(|id| !rows.iter().any(|beat| &beat.id == id))
                .collect();
            if !gone.is_empty() {
                tracing::warn!(tasks = ?gone, "killing background tasks another daemon marked lost");
                self.supervisor.stop_ids(&gone, StopCause::MarkedLost);
            }
            // Only tasks running here can be orphans of this daemon.
            let orphaned = self.store.orphaned_tasks(&self.owner).await?;
            if !orphaned.is_empty() {
                tracing::info!(tasks = ?orphaned, "stopping background tasks of finished runs");
                self.supervisor.stop_ids(&orphaned, StopCause::RunEnded);
            }
        }
        let lost = self.store.mark_lost_tasks(self.lost_after).await?;
        if !lost.is_empty() {
            tracing::warn!(tasks = ?lost, "background tasks lost: their daemon stopped");
        }
        for task in self.store.tasks_to_wake(100).await? {
            wake_for_task(&self.store, &task.run_id, &task.task_id).await;
        }
        Ok(())
    }
}

/// A supervisor for this daemon's background commands, writing logs to `dir`.
pub fn supervisor(
    store: &Store,
    owner: &str,
    dir: std::path::PathBuf,
    config: &BackgroundConfig,
) -> TaskSupervisor {
    TaskSupervisor::new(
        dir,
        Arc::new(StoreLedger::new(store.clone(), owner, config)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stored_task_status_maps_to_its_ending_and_back() {
        for status in TaskStatus::ALL {
            match ending_of(*status) {
                None => assert_eq!(*status, TaskStatus::Running),
                Some(ending) => {
                    assert_eq!(status_of(ending), *status);
                    assert_eq!(ending.as_str(), status.as_str());
                }
            }
        }
    }
}
