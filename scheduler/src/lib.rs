//! # nightshift-scheduler
//!
//! Everything that creates or re-arms jobs. It never calls a model. In this release it holds
//! the [`intake`]: the one place where a request to start a run (from the CLI now; from the
//! HTTP API and [`hooks`], cron next) is checked and turned into an enqueue. Requests that
//! fail the checks are refused with a message saying what to change, and nothing is enqueued.

pub mod hooks;
pub mod intake;

pub use intake::{IntakeError, ResumeRequest, RunRequest, resume, submit};
