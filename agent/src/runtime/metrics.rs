//! What the runtime tells the metrics (`nightshift_telemetry`) about jobs, runs and tool
//! calls. The choices — which outcome a job had, whether its run ended and how, which label a
//! tool gets — are pure functions here; the call sites are one line each.

use std::time::Duration;

use nightshift_store::{Job, Millis, Run};
use nightshift_telemetry::labels;
use nightshift_tools::ToolClass;
use nightshift_worker::JobOutcome;

use crate::config::AgentDef;

/// The run a job belongs to, as the metrics label it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Seen {
    /// The run's agent, or `unknown` when it is not configured.
    pub agent: String,
    /// When the run started (its creation, before it has started).
    pub started_at: Millis,
}

impl Seen {
    pub(super) fn of(run: &Run, configured: bool) -> Seen {
        Seen {
            agent: labels::configured(&run.agent, configured).to_string(),
            started_at: run.started_at.unwrap_or(run.created_at),
        }
    }
}

/// The name of what a handler made of a job.
pub(super) fn outcome_name(outcome: &JobOutcome) -> &'static str {
    match outcome {
        JobOutcome::Done(_) => "done",
        JobOutcome::Retry { .. } => "retry",
        JobOutcome::Defer { .. } => "defer",
        JobOutcome::Park { .. } => "park",
        JobOutcome::AwaitApproval { .. } => "await_approval",
    }
}

/// The status the run ends with when `job` has `outcome`, if it ends: its end, or a retry
/// that cannot happen (the last attempt: failed; cancelled meanwhile: cancelled).
pub(super) fn run_end(job: &Job, outcome: &JobOutcome) -> Option<&'static str> {
    match outcome {
        JobOutcome::Done(end) => Some(end.run_status().as_str()),
        JobOutcome::Retry { .. } if job.cancel_requested_at.is_some() => Some("cancelled"),
        JobOutcome::Retry { .. } if job.attempts >= job.max_attempts => Some("failed"),
        _ => None,
    }
}

/// Counts the job's outcome and, when its run `ended` (with that status: [`run_end`], a
/// cancellation told apart from a supersession), the run's end and duration.
pub(super) fn job_ended(
    seen: &Seen,
    job: &Job,
    outcome: &JobOutcome,
    ended: Option<&'static str>,
    now: Millis,
) {
    let agent = seen.agent.as_str();
    nightshift_telemetry::job_outcome(agent, job.kind.as_str(), outcome_name(outcome));
    if let Some(status) = ended {
        let ran = u64::try_from(now - seen.started_at).unwrap_or(0);
        nightshift_telemetry::run_ended(agent, status, Some(Duration::from_millis(ran)));
    }
}

/// Counts the end of `run`, which ended while no job of it ran (the store ended it: a
/// cancellation or a supersession while it was queued or asleep), and its duration from its
/// start (its creation, when it never started) to its end.
pub(super) fn run_ended_without_job(run: &Run, configured: bool) {
    let agent = labels::configured(&run.agent, configured);
    let started = run.started_at.unwrap_or(run.created_at);
    let ran = u64::try_from(run.finished_at.unwrap_or(started) - started).unwrap_or(0);
    nightshift_telemetry::run_ended(agent, run.status.as_str(), Some(Duration::from_millis(ran)));
}

/// The label of a tool the model called: its name when the agent was given it, else
/// `unknown` (a name the model invented is not a bounded label).
pub(super) fn tool_label<'a>(agent: &AgentDef, name: &'a str) -> &'a str {
    labels::configured(name, agent.config.tools.iter().any(|t| t == name))
}

/// Counts one tool call of `agent`.
pub(super) fn tool_call(
    agent: &AgentDef,
    name: &str,
    class: ToolClass,
    outcome: &'static str,
    ran_for: Option<Duration>,
) {
    nightshift_telemetry::tool_call(tool_label(agent, name), class.as_str(), outcome, ran_for);
}

#[cfg(test)]
mod tests {
    use nightshift_store::{JobKind, JobState, RunEnd};

    use super::*;

    fn job(attempts: i64, cancel_requested_at: Option<Millis>) -> Job {
        Job {
            id: 1,
            run_id: "r".into(),
            kind: JobKind::Start,
            lane: "default".into(),
            priority: 0,
            payload: String::new(),
            run_at: 0,
            attempts,
            max_attempts: 3,
            dedupe_key: None,
            status: JobState::Running,
            lease_owner: None,
            lease_token: 1,
            lease_expires_at: None,
            cancel_requested_at,
            last_error: None,
            created_at: 0,
            updated_at: 0,
            finished_at: None,
            concurrency_key: None,
        }
    }

    #[test]
    fn a_run_ends_with_its_end_or_a_retry_that_cannot_happen() {
        let done = JobOutcome::Done(RunEnd::Succeeded { result: None });
        assert_eq!(outcome_name(&done), "done");
        assert_eq!(run_end(&job(1, None), &done), Some("succeeded"));
        let retry = JobOutcome::retry("boom");
        assert_eq!(outcome_name(&retry), "retry");
        assert_eq!(run_end(&job(1, None), &retry), None);
        assert_eq!(run_end(&job(3, None), &retry), Some("failed"));
        assert_eq!(run_end(&job(1, Some(5)), &retry), Some("cancelled"));
        let park = JobOutcome::Park {
            until: 9,
            payload: String::new(),
        };
        assert_eq!(
            (outcome_name(&park), run_end(&job(1, None), &park)),
            ("park", None)
        );
    }
}
