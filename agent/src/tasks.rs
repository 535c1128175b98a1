//! Background commands, as the loop sees them: a run whose agent may call `run_command`
//! can have tasks running while it works, sleeps or ends its turn.
//!
//! What the loop guarantees (see `runtime`):
//! - **Each ending reaches the model once.** Before every model call, the endings the run's
//!   log does not hold yet are logged as `task_ended` events, each a reminder at the bottom
//!   of the conversation; the store row is marked reported afterwards, and the log's own
//!   record of reported ids makes a crash between the two harmless.
//! - **A turn that ends with tasks running does not end the run.** The run parks as
//!   `waiting` (holding no worker) until a task ends, which wakes it; a resume is also armed
//!   a minute past the latest deadline, in case nobody wakes it.
//! - **A start is never forgotten.** A `run_command` call interrupted after its task was
//!   recorded gets a result naming the task (not "outcome unknown"), so the model does not
//!   start it twice.
//! - **A lost task is never a success**: its reminder says it was lost and may not have done
//!   its work.

use std::time::Duration;

use nightshift_store::{Task, TaskStatus};

/// The tool that starts background commands; agents that cannot call it skip the checks.
pub const RUN_COMMAND: &str = "run_command";

/// Whether an agent can start background commands (it may call `run_command`); the loop
/// looks for task endings only for such agents.
pub fn may_start_tasks(agent: &crate::config::AgentConfig) -> bool {
    agent.tools.iter().any(|t| t == RUN_COMMAND)
}

/// How long past the latest task deadline a run waiting for its tasks is resumed anyway.
pub const DEADLINE_SLACK: Duration = Duration::from_secs(60);

/// The result of a `run_command` call that started background task `task_id` and was then
/// interrupted (the worker stopped before the call's result was logged).
pub fn interrupted_start_notice(task_id: &str) -> String {
    format!(
        "This call was interrupted (the worker running it stopped), but it had already started \
         background task {task_id}. Do not start the command again: check it with task_output, \
         and you will get a reminder when it ends (if its worker died with it, the reminder \
         says it was lost)."
    )
}

/// The reminder the model gets when `task` has ended.
pub fn reminder(task: &Task) -> String {
    let took = task
        .ended_at
        .map(|end| format!(" after {:.1} s", (end - task.started_at) as f64 / 1000.0))
        .unwrap_or_default();
    let detail = task.detail.as_deref().unwrap_or("no detail");
    let headline = match task.status {
        TaskStatus::Succeeded => format!("finished{took}: {detail}"),
        TaskStatus::Failed => format!("failed{took}: {detail}"),
        TaskStatus::TimedOut => format!("timed out{took}: {detail}"),
        TaskStatus::Stopped => format!("was stopped{took}: {detail}"),
        TaskStatus::Lost => format!(
            "was LOST{took}: {detail}. It may or may not have done its work; do not assume it \
             succeeded. Check its effects, and run it again if you still need it"
        ),
        TaskStatus::Running => format!("is still running: {detail}"),
    };
    let mut text = format!(
        "[Background task {} (`{}`) {headline}.]",
        task.id, task.command
    );
    let tail = task.output_tail.as_deref().unwrap_or("");
    if tail.trim().is_empty() {
        text.push_str("\n(no output)");
    } else {
        let shown = tail.len() as i64;
        if shown < task.output_bytes {
            text.push_str(&format!(
                "\nLast {shown} of {} bytes of output (task_output shows more):\n",
                task.output_bytes
            ));
        } else {
            text.push_str("\nOutput:\n");
        }
        text.push_str(tail.trim_end());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(status: TaskStatus, tail: &str, bytes: i64) -> Task {
        Task {
            id: "task_0123456789ab".into(),
            run_id: "r".into(),
            call_id: "c".into(),
            command: "make test".into(),
            owner: "host:1:x".into(),
            status,
            exit_code: None,
            detail: Some("exit code 2".into()),
            output_tail: Some(tail.into()),
            output_bytes: bytes,
            started_at: 1_000,
            deadline_at: 10_000,
            heartbeat_at: 1_000,
            ended_at: Some(3_500),
            reported_at: None,
            stop_requested_at: None,
        }
    }

    #[test]
    fn reminders_say_how_the_task_ended_and_show_its_output() {
        let failed = reminder(&task(TaskStatus::Failed, "boom\n", 5));
        assert_eq!(
            failed,
            "[Background task task_0123456789ab (`make test`) failed after 2.5 s: exit code 2.]\nOutput:\nboom"
        );
        let lost = reminder(&task(TaskStatus::Lost, "", 0));
        assert!(lost.contains("was LOST") && lost.contains("do not assume it succeeded"));
        assert!(lost.ends_with("(no output)"));
        let cut = reminder(&task(TaskStatus::Succeeded, "tail", 9000));
        assert!(cut.contains("Last 4 of 9000 bytes"), "{cut}");
    }
}
