//! The loop's side of background tasks (see `crate::tasks`): the endings a run's log does
//! not hold yet are logged once each, a run whose turn ended while tasks run parks until one
//! ends, and a `run_command` interrupted after it recorded its task can name that task.

use nightshift_store::ResumeReason;
use nightshift_worker::JobOutcome;

use super::{Session, Stop};
use crate::events::RunEvent;
use crate::tasks;

/// What the run's background tasks need from the loop.
pub(super) enum TaskCheck {
    /// Nothing: no task ended unreported, none runs.
    Quiet,
    /// Endings were logged; the model should hear them.
    Reported,
    /// Tasks still run; the latest deadline among them, and that task.
    Running { deadline: i64, task_id: String },
}

impl Session<'_> {
    /// Logs the endings of the run's background tasks that its log does not hold yet (each
    /// once, also across crashes), and says what is still running.
    pub(super) async fn report_ended_tasks(&mut self) -> Result<TaskCheck, Stop> {
        let store = self.ctx.lease.store().clone();
        let mut reported = false;
        let mut running: Option<(i64, String)> = None;
        for task in store.unreported_tasks(&self.run_id).await? {
            if task.status == nightshift_store::TaskStatus::Running {
                if running.as_ref().is_none_or(|(d, _)| task.deadline_at > *d) {
                    running = Some((task.deadline_at, task.id.clone()));
                }
                continue;
            }
            if !self.state.reported_tasks.contains(&task.id) {
                self.log(RunEvent::TaskEnded {
                    task_id: task.id.clone(),
                    status: task.status.to_string(),
                    reminder: tasks::reminder(&task),
                })
                .await?;
                reported = true;
            }
            store.mark_task_reported(&task.id).await?;
        }
        Ok(match (reported, running) {
            (true, _) => TaskCheck::Reported,
            (false, Some((deadline, task_id))) => TaskCheck::Running { deadline, task_id },
            (false, None) => TaskCheck::Quiet,
        })
    }

    /// The background task that call `call_id` of this run started, if any (a `run_command`
    /// with `background: true` that was interrupted after the task was recorded).
    pub(super) async fn task_started_by(&self, call_id: &str) -> Result<Option<String>, Stop> {
        if !tasks::may_start_tasks(&self.agent.config) {
            return Ok(None);
        }
        let tasks = self.ctx.lease.store().tasks_of_run(&self.run_id).await?;
        Ok(tasks
            .into_iter()
            .rev()
            .find(|t| t.call_id == call_id)
            .map(|t| t.id))
    }

    /// Parks the run until one of its tasks ends (which wakes it), or a minute past the
    /// latest deadline at the latest.
    pub(super) async fn wait_for_tasks(
        &mut self,
        deadline: i64,
        task_id: String,
    ) -> Result<JobOutcome, Stop> {
        self.checkpoint().await?;
        let slack = i64::try_from(tasks::DEADLINE_SLACK.as_millis()).unwrap_or(i64::MAX);
        let now = self.ctx.lease.store().now();
        Ok(JobOutcome::Park {
            until: deadline.max(now).saturating_add(slack),
            payload: ResumeReason::Task { task_id }.to_payload(),
        })
    }
}
