//! # nightshift-scheduler
//!
//! Everything that creates or re-arms jobs. It never calls a model. It holds the [`intake`]:
//! the one place where a request to start or resume a run (from the CLI, the HTTP API,
//! [`hooks`] and [`cron`] schedules) is checked and turned into an enqueue. Requests that fail
//! the checks are refused with a message saying what to change, and nothing is enqueued.

pub mod cron;
pub mod hooks;
pub mod intake;

pub use intake::{DEFAULT_BATCH_LIMIT, Intake, IntakeError, ResumeRequest, RunRequest, StartAt};
