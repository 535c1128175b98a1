//! What the runtime tells the traces (`nightshift_telemetry::traces`) about a job: its span,
//! a child of its run's span (the run's trace is decided from what is stored, so a job on
//! another daemon after a crash joins the same trace), current while the job runs so the
//! model and tool calls under it become its children; and, when the job ends its run, the run
//! span itself.

use nightshift_store::{Job, Run};
use nightshift_telemetry::traces::{self, RunEnded, RunTrace, TraceSpan};
use nightshift_worker::JobOutcome;

use super::metrics::outcome_name;

/// Writes the span of `run`, whose end the store decided (see
/// [`super::run_ended_by_store`]).
pub(super) fn run_ended_by_store(run: &Run) {
    traces::run_ended(
        &RunTrace::of(&run.id, run.trace_parent.as_deref()),
        &RunEnded {
            run_id: &run.id,
            agent: &run.agent,
            trigger: run.trigger_kind.as_str(),
            status: run.status.as_str(),
            created_at_ms: run.created_at,
        },
    );
}

/// A job's span and what its run's span needs when the job ends the run.
pub(super) struct JobTrace {
    span: TraceSpan,
    run: RunTrace,
    run_id: String,
    agent: String,
    trigger: &'static str,
    created_at: i64,
}

impl JobTrace {
    /// The span of `job` of `run` (not yet entered).
    pub(super) fn open(run: &Run, job: &Job) -> JobTrace {
        let trace = RunTrace::of(&run.id, run.trace_parent.as_deref());
        JobTrace {
            span: traces::job_span(
                &trace,
                &run.id,
                job.id,
                job.attempts,
                job.kind.as_str(),
                &run.agent,
            ),
            run: trace,
            run_id: run.id.clone(),
            agent: run.agent.clone(),
            trigger: run.trigger_kind.as_str(),
            created_at: run.created_at,
        }
    }

    /// The span to run the job in.
    pub(super) fn span(&self) -> &TraceSpan {
        &self.span
    }

    /// Records the job's outcome on its span and ends it; when the job `ends` the run (with
    /// that status), returns the run's span to write once that end is written.
    pub(super) fn close(self, outcome: &JobOutcome, ends: Option<&'static str>) -> Option<RunSpan> {
        let failed = matches!(ends, Some("failed")) || matches!(outcome, JobOutcome::Retry { .. });
        traces::record_job_outcome(&self.span, outcome_name(outcome), failed);
        self.span.end();
        Some(RunSpan {
            status: ends?,
            run: self.run,
            run_id: self.run_id,
            agent: self.agent,
            trigger: self.trigger,
            created_at: self.created_at,
        })
    }
}

/// The span of a run a job ended, to write once the end is ([`JobTrace::close`]).
pub(super) struct RunSpan {
    status: &'static str,
    run: RunTrace,
    run_id: String,
    agent: String,
    trigger: &'static str,
    created_at: i64,
}

impl RunSpan {
    /// Writes the run's span.
    pub(super) fn write(self) {
        traces::run_ended(
            &self.run,
            &RunEnded {
                run_id: &self.run_id,
                agent: &self.agent,
                trigger: self.trigger,
                status: self.status,
                created_at_ms: self.created_at,
            },
        );
    }
}
