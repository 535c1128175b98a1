//! Why the task supervisor said no: a task that did not start ([`StartRefused`]), or a task
//! it cannot show or stop for the run that asked ([`TaskError`]). Each `Display` is the
//! error result the model gets, saying what to do.

use crate::process::StartError;

/// Why [`TaskSupervisor::start`](super::TaskSupervisor::start) started nothing.
#[derive(Debug, thiserror::Error)]
pub enum StartRefused {
    /// The daemon is shutting down: no task starts any more.
    #[error("the daemon is shutting down; start the command again once it has restarted")]
    ShuttingDown,
    /// The ledger did not record the task; its message says why (too many running tasks).
    #[error("{0}")]
    NotRecorded(String),
    /// The task's log or its process could not be made (it is recorded as failed).
    #[error("failed to start the background command: {0}")]
    Spawn(#[source] std::io::Error),
    /// The command could not be put in its sandbox (it is recorded as failed).
    #[error(transparent)]
    Process(#[from] StartError),
}

/// Why a task could not be shown or stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    /// No task of this id belongs to the run.
    #[error(
        "no background task `{0}` in this run; task ids look like task_0123456789ab and come \
         from run_command with background: true"
    )]
    NoSuchTask(String),
    /// It runs on another daemon, and the ledger could not pass the request on.
    #[error("cannot stop {id}: {reason}")]
    CannotStop { id: String, reason: String },
}
