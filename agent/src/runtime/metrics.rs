//! What the runtime tells the metrics (`nightshift_telemetry`) about jobs, runs and tool
//! calls. The choices — which outcome a job had, whether its run ended and how, which label a
//! tool gets — are pure functions here; the call sites are one line each.

use std::time::Duration;

use nightshift_store::{Millis, Run};
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

/// The status the run ends with when its job has `outcome`, if the job ends it: its `Done`.
/// A retry, deferral or park may end the run too (the last attempt failed, a cancel was
/// pending), but only the store knows, once it wrote it: it tells of those ends itself
/// (`Store::on_run_ended_by_store`, [`run_ended_by_store`]).
pub(super) fn run_end(outcome: &JobOutcome) -> Option<&'static str> {
    match outcome {
        JobOutcome::Done(end) => Some(end.run_status().as_str()),
        _ => None,
    }
}

/// Counts a job of `kind` whose outcome was `outcome` ([`outcome_name`]) and, when its run
/// `ended` (with that status: [`run_end`], a cancellation told apart from a supersession),
/// the run's end and duration.
pub(super) fn job_ended(
    seen: &Seen,
    kind: &'static str,
    outcome: &'static str,
    ended: Option<&'static str>,
    now: Millis,
) {
    let agent = seen.agent.as_str();
    nightshift_telemetry::job_outcome(agent, kind, outcome);
    if let Some(status) = ended {
        let ran = u64::try_from(now - seen.started_at).unwrap_or(0);
        nightshift_telemetry::run_ended(agent, status, Some(Duration::from_millis(ran)));
    }
}

/// Counts the end of `run`, which the store decided (a cancellation or supersession while no
/// job of it ran, a retry that dead-lettered its job, a rescue: see
/// `Store::on_run_ended_by_store`), and its duration from its start (its creation, when it
/// never started) to its end.
pub(super) fn run_ended_by_store(run: &Run, configured: bool) {
    let agent = labels::configured(&run.agent, configured);
    let started = run.started_at.unwrap_or(run.created_at);
    let ran = u64::try_from(run.finished_at.unwrap_or(started) - started).unwrap_or(0);
    nightshift_telemetry::run_ended(agent, run.status.as_str(), Some(Duration::from_millis(ran)));
}

/// The label of a tool the model called: its name when the agent was given it, else
/// `unknown` (a name the model invented is not a bounded label).
pub(super) fn tool_label<'a>(agent: &AgentDef, name: &'a str) -> &'a str {
    // An MCP tool counts under its server (`mcp__<server>`): the tools a server lists are
    // its own to choose, the servers are the config's.
    if let Some((server, _)) = nightshift_mcp::split_name(name)
        && agent.config.mcp.iter().any(|s| s.name == server)
    {
        return &name[..nightshift_mcp::catalog::PREFIX.len() + server.len()];
    }
    let skill_tool = name == crate::skills::LOAD_SKILL && !agent.skills.is_empty();
    labels::configured(
        name,
        skill_tool || agent.config.tools.iter().any(|t| t == name),
    )
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
    use nightshift_store::RunEnd;

    use super::*;

    #[test]
    fn only_a_done_job_ends_its_run_here() {
        let done = JobOutcome::Done(RunEnd::Succeeded { result: None });
        assert_eq!(outcome_name(&done), "done");
        assert_eq!(run_end(&done), Some("succeeded"));
        let cancelled = JobOutcome::Done(RunEnd::Cancelled);
        assert_eq!(run_end(&cancelled), Some("cancelled"));
        // Even a last attempt's retry: the store tells of the run's end once it is written.
        let retry = JobOutcome::retry("boom");
        assert_eq!(outcome_name(&retry), "retry");
        assert_eq!(run_end(&retry), None);
        let park = JobOutcome::Park {
            until: 9,
            payload: String::new(),
        };
        assert_eq!((outcome_name(&park), run_end(&park)), ("park", None));
    }

    #[test]
    fn an_mcp_tool_counts_under_its_configured_server() {
        let config: crate::AgentConfig = serde_json::from_value(serde_json::json!({
            "name": "a", "provider": "p", "model": "m", "tools": ["read_file"],
            "mcp": [{"name": "notes", "command": "x"}]
        }))
        .unwrap();
        let agent = config.resolve(std::path::Path::new(".")).unwrap();
        assert_eq!(tool_label(&agent, "mcp__notes__add_note"), "mcp__notes");
        assert_eq!(tool_label(&agent, "mcp__other__add_note"), labels::UNKNOWN);
        assert_eq!(tool_label(&agent, "read_file"), "read_file");
        assert_eq!(tool_label(&agent, "rm_rf"), labels::UNKNOWN);
    }
}
