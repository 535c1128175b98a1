//! The agent runtime: the worker's job handler. For each leased job it loads the run
//! (newest checkpoint plus the events after it), recovers interrupted tool calls, and runs
//! the loop — guards, model call, tools — logging every step under the job's lease.
//!
//! The next step is always decided from the projected state alone ([`next_step`]), so a run
//! resumed after a crash at any instant takes exactly the step the uninterrupted run would
//! have taken, and builds the same request bytes.

use std::collections::HashMap;
use std::sync::Arc;

use nightshift_tools::Redactor;

use nightshift_llm::{Message, conversation};
use nightshift_store::{Error as StoreError, ResumeReason, RunEnd};
use nightshift_worker::{Handler, JobContext, JobOutcome};

use crate::calls;
use crate::config::AgentDef;
use crate::events::RunEvent;
use crate::ports::{ModelFailure, ModelGateway, ToolBox};
use crate::state::RunState;
use crate::tasks;
use crate::wakeup;

mod approvals;
mod background;
mod compaction;
mod inbox;
mod mcp;
mod metrics;
mod opening;
mod outage;
pub(crate) mod redact;
mod session;
mod step;
mod tool_round;
mod traces;

use session::Session;

pub use compaction::{SUMMARY_REQUEST, SummaryRejected, accepted_summary};
pub use step::{Step, next_step};

/// Tells the metrics and the traces of `run`, whose end the store decided (a cancel or
/// supersession while no job of it ran, a retry or park that ended it, a rescue:
/// `Store::on_run_ended_by_store`): `nightshift_runs_ended_total` and the run's duration
/// under its agent (`unknown` unless `configured`), and its run span. Runs a job ended
/// (`Done`) are told of by the runtime itself.
pub fn run_ended_by_store(run: &nightshift_store::Run, configured: bool) {
    metrics::run_ended_by_store(run, configured);
    traces::run_ended_by_store(run);
    // The one `run ended` line of a run no job of which ended it (a job's end logs its own).
    let started = run.started_at.unwrap_or(run.created_at);
    let duration_ms = run.finished_at.unwrap_or(started).saturating_sub(started);
    let detail = run.error.as_deref().and_then(|e| e.lines().next());
    tracing::info!(
        run_id = %run.id,
        agent = %run.agent,
        status = run.status.as_str(),
        duration_ms,
        turns = run.turns,
        cost_usd = run.cost_usd,
        detail,
        "run ended"
    );
}

use background::TaskCheck;

/// Steps a job may take without calling the model. A tool round, a notice and a report of
/// ended tasks take one each; more than this means the loop is not making progress (a bug),
/// and the run is stopped rather than left to repeat work.
const MAX_STEPS_WITHOUT_MODEL_CALL: u32 = 16;

/// What the model is told when its reply stopped because the context window was full.
pub const CONTEXT_FULL_NOTICE: &str = "Your previous reply stopped because the context window \
    was full, so any tool call in it was not run. The conversation has been compacted; \
    continue from where you stopped.";

/// What the model is told when its reply was cut off.
pub const CUT_OFF_NOTICE: &str = "Your previous reply was cut off by the max_tokens limit, so \
    any tool call in it was not run. Continue from where you stopped, in shorter replies.";

/// What the model is told about a side-effect call whose outcome a crash made unknown.
pub const INTERRUPTED_NOTICE: &str = "This tool call was interrupted (the worker running it \
    stopped) and its outcome is unknown: it may or may not have taken effect. It was not run \
    again. Check the current state before deciding whether to repeat it.";

/// What the model is told about a side-effect call refused because the run was cancelled or
/// superseded before it started.
pub const REFUSED_NOTICE: &str = "This tool call was not made: the run was cancelled or \
    superseded by a newer run before it started, so no side effect may start any more.";

/// Runs agents for the worker pool.
pub struct AgentRuntime {
    agents: HashMap<String, Arc<AgentDef>>,
    models: Arc<dyn ModelGateway>,
    tools: Arc<dyn ToolBox>,
    redactor: Redactor,
}

impl std::fmt::Debug for AgentRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentRuntime")
            .field("agents", &self.agents.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl AgentRuntime {
    pub fn new(
        agents: impl IntoIterator<Item = AgentDef>,
        models: Arc<dyn ModelGateway>,
        tools: Arc<dyn ToolBox>,
    ) -> Self {
        Self {
            agents: agents
                .into_iter()
                .map(|a| (a.config.name.clone(), Arc::new(a)))
                .collect(),
            models,
            tools,
            redactor: Redactor::default(),
        }
    }

    /// Redacts, with `redactor`, every event before it is logged (so the state, the
    /// checkpoints and every later request hold only redacted text: the model's own text and
    /// tool inputs, tool results, provider errors) and every outcome's text (the run's
    /// result and error, the job's last error).
    pub fn with_redactor(mut self, redactor: Redactor) -> Self {
        self.redactor = redactor;
        self
    }

    /// The configured agent names, sorted.
    pub fn agent_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.agents.keys().cloned().collect();
        names.sort();
        names
    }
}

impl Handler for AgentRuntime {
    async fn handle(&self, ctx: JobContext) -> JobOutcome {
        let (mut seen, mut trace) = (None, None);
        let outcome = self.outcome(&ctx, &mut seen, &mut trace).await;
        if seen.is_none() && trace.is_none() {
            // The run had already ended (or could not be read): its end was told of by
            // whoever ended it, and nothing of this job is counted.
            return redact::outcome(&self.redactor, outcome);
        }
        if matches!(outcome, JobOutcome::Done(_)) {
            self.tools.run_ended(&ctx.lease.job().run_id).await;
        }
        let ended = metrics::run_end(&outcome);
        let run_span = trace.and_then(|trace| trace.close(&outcome, ended));
        count_once_written(&ctx, seen, &outcome, ended, run_span);
        redact::outcome(&self.redactor, outcome)
    }
}

/// Counts the job's outcome (and the run's end, with its span, when the job `ended` it)
/// once the pool wrote it ([`JobContext::when_outcome_written`]); nothing when it was not
/// written — a worker that lost its job's lease (frozen past it, say) leaves the counting to
/// whichever worker writes that job's outcome.
fn count_once_written(
    ctx: &JobContext,
    seen: Option<metrics::Seen>,
    outcome: &JobOutcome,
    ended: Option<&'static str>,
    run_span: Option<traces::RunSpan>,
) {
    if seen.is_none() && run_span.is_none() {
        return;
    }
    let (kind, outcome, now) = (
        ctx.lease.job().kind.as_str(),
        metrics::outcome_name(outcome),
        ctx.lease.store().now(),
    );
    ctx.when_outcome_written(move |written| {
        if !written {
            return;
        }
        if let Some(seen) = seen {
            metrics::job_ended(&seen, kind, outcome, ended, now);
        }
        if let Some(span) = run_span {
            span.write();
        }
    });
}

impl AgentRuntime {
    /// The job's outcome; `seen` is set to the run's agent and start once the run was read,
    /// `trace` to the job's span once its agent is known.
    async fn outcome(
        &self,
        ctx: &JobContext,
        seen: &mut Option<metrics::Seen>,
        trace: &mut Option<traces::JobTrace>,
    ) -> JobOutcome {
        match self.run_job(ctx, seen, trace).await {
            Ok(outcome) => outcome,
            Err(Stop::Store(e)) if e.is_lease_lost() => {
                // Nothing more can be written; the pool drops whatever we return.
                JobOutcome::retry(e.to_string())
            }
            Err(Stop::Store(e)) if e.is_transient() => JobOutcome::retry(e.to_string()),
            Err(Stop::Store(e)) => JobOutcome::failed(format!("store error: {e}")),
            Err(Stop::Corrupt(e)) => JobOutcome::failed(e),
        }
    }
}

/// How running the tools of a reply ended.
enum ToolsEnd {
    /// Every call that could run has its result.
    Done,
    /// A side-effect or idempotent call was refused: the run was cancelled or superseded.
    Refused,
    /// A call waits for a human's decision until `until`.
    AwaitApproval { call_id: String, until: i64 },
    /// A call's outcome is not known yet (a request may have reached the other side and
    /// could not be looked up): it stays open, and the job is tried again later.
    Unresolved { error: String },
}

/// The job's outcome when a call's outcome is not known yet: tried again after the pool's
/// backoff (an attempt is spent, so a side that never answers ends the run in the end).
fn unresolved(error: String) -> JobOutcome {
    tracing::warn!(%error, "a tool call's outcome is not known yet; the job tries again later");
    JobOutcome::Retry { error, after: None }
}

/// Why the loop stopped without an outcome of its own.
enum Stop {
    Store(StoreError),
    /// The run's log or checkpoint cannot be read: failing the run beats a crash loop.
    Corrupt(String),
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        Stop::Store(e)
    }
}

impl AgentRuntime {
    async fn run_job(
        &self,
        ctx: &JobContext,
        seen: &mut Option<metrics::Seen>,
        trace: &mut Option<traces::JobTrace>,
    ) -> Result<JobOutcome, Stop> {
        let store = ctx.lease.store();
        let run_id = &ctx.lease.job().run_id;
        let run = store
            .run(run_id)
            .await?
            .ok_or_else(|| Stop::Corrupt(format!("run {run_id} is missing")))?;
        if run.status.is_terminal() && !inbox::ends_its_run(ctx).await? {
            // A job of a run that ended while it was queued: the run ended once, by another.
            return inbox::leftover(&ctx.lease, &run).await;
        }
        *seen = Some(metrics::Seen::of(
            &run,
            self.agents.contains_key(&run.agent),
        ));
        // The pool's job span leaves the agent to whoever reads the run.
        tracing::Span::current().record("agent", run.agent.as_str());
        let Some(agent) = self.agents.get(&run.agent) else {
            return Ok(JobOutcome::failed(format!(
                "agent '{}' is not configured; configured agents: {}",
                run.agent,
                self.agent_names().join(", ")
            )));
        };
        let trace = trace.insert(traces::JobTrace::open(&run, ctx.lease.job()));
        trace.span().wrap(self.run_agent(ctx, agent, &run)).await
    }

    /// The job of `run`, an agent's: its state loaded, then the loop.
    async fn run_agent(
        &self,
        ctx: &JobContext,
        agent: &Arc<AgentDef>,
        run: &nightshift_store::Run,
    ) -> Result<JobOutcome, Stop> {
        let store = ctx.lease.store();
        let run_id = &run.id;
        let mut s = Session {
            ctx,
            agent,
            run_id: run.id.clone(),
            started_at: run.started_at,
            state: opening::load_state(store, run_id).await?,
            compacted_for_overflow: false,
            inbox_closed: false,
            redactor: &self.redactor,
            context: run
                .context
                .as_deref()
                .and_then(|c| serde_json::from_str(c).ok()),
            stop_request: None,
        };
        if let Some(ended) = s.begin(run).await? {
            return Ok(ended);
        }
        if let Some(ended) = self.prepare(&mut s, run.notify).await? {
            return Ok(ended);
        }
        if let Some(ended) = self.deliver_resume(&mut s).await? {
            return Ok(ended);
        }
        s.apply_decision().await?;
        self.drive(&mut s).await
    }

    /// The loop: one step at a time until the run ends or must wait.
    async fn drive(&self, s: &mut Session<'_>) -> Result<JobOutcome, Stop> {
        let mut steps_without_model_call = 0;
        loop {
            let step = next_step(&s.state);
            if matches!(step, Step::CallModel | Step::Compact) {
                steps_without_model_call = 0;
            } else {
                steps_without_model_call += 1;
            }
            if steps_without_model_call > MAX_STEPS_WITHOUT_MODEL_CALL {
                return s
                    .finish(RunEnd::Failed {
                        error: no_progress_error(&step, &s.state),
                    })
                    .await;
            }
            if let Step::Finish(end) = step {
                if matches!(end, RunEnd::Succeeded { .. })
                    && s.state.ending.is_none()
                    && !s.ctx.cancel.is_cancelled()
                    && s.take_messages().await?
                {
                    continue; // the model answers them first
                }
                match self.end_turn(s, end).await? {
                    Some(outcome) => return Ok(outcome),
                    None => continue,
                }
            }
            if s.ctx.cancel.is_cancelled() {
                return s.finish(RunEnd::Cancelled).await;
            }
            if let Some(outcome) = self.take_step(s, step).await? {
                return Ok(outcome);
            }
        }
    }

    /// `Step::Finish`: ends the run with `end`, but a turn that succeeded does not end while
    /// its tasks run: those that ended are reported (`None`: the loop goes on, the model
    /// answers them), or the run waits for the rest.
    async fn end_turn(&self, s: &mut Session<'_>, end: RunEnd) -> Result<Option<JobOutcome>, Stop> {
        if s.state.ending.is_none()
            && matches!(end, RunEnd::Succeeded { .. })
            && tasks::may_start_tasks(&s.agent.config)
        {
            match s.report_ended_tasks().await? {
                TaskCheck::Reported => return Ok(None),
                TaskCheck::Running { deadline, task_id } => {
                    return s.wait_for_tasks(deadline, task_id).await.map(Some);
                }
                TaskCheck::Quiet => {}
            }
        }
        if s.state.ending.is_none()
            && matches!(end, RunEnd::Succeeded { .. })
            && !s.close_inbox_for_success().await?
        {
            return Ok(None); // a message came meanwhile: the loop takes it
        }
        s.finish(end).await.map(Some)
    }

    /// Takes one step other than `Finish`. Returns an outcome when the run must stop or wait.
    async fn take_step(&self, s: &mut Session<'_>, step: Step) -> Result<Option<JobOutcome>, Stop> {
        match step {
            Step::RunTools => match self.run_tools(s).await? {
                ToolsEnd::Refused => return s.finish(RunEnd::Cancelled).await.map(Some),
                ToolsEnd::AwaitApproval { call_id, until } => {
                    return s.await_approval(call_id, until).await.map(Some);
                }
                ToolsEnd::Unresolved { error } => return Ok(Some(unresolved(error))),
                ToolsEnd::Done => {
                    if s.state.pending.is_empty() {
                        s.checkpoint().await?; // a turn ended
                    }
                }
            },
            Step::Sleep(w) => {
                if s.take_messages().await? {
                    return Ok(None); // a message cut the sleep short
                }
                s.checkpoint().await?;
                return Ok(Some(JobOutcome::Park {
                    until: w.due_at,
                    payload: ResumeReason::Wakeup {
                        reason: w.reason,
                        slept_at: w.scheduled_at,
                        due_at: w.due_at,
                    }
                    .to_payload(),
                }));
            }
            Step::NoticeCutOff => {
                s.log(RunEvent::UserMessage {
                    message: Message::user_text(step::cut_off_notice(&s.state)),
                })
                .await?;
            }
            Step::Compact => {
                if let Some(end) = s.over_budget() {
                    return s.finish(end).await.map(Some);
                }
                return self.compact(s).await;
            }
            Step::CallModel => return self.model_step(s).await,
            Step::Finish(_) => unreachable!("drive ends the turn itself"),
        }
        Ok(None)
    }

    /// `Step::CallModel`: ended tasks reported, budgets checked, the conversation compacted
    /// when it must be, then the call.
    async fn model_step(&self, s: &mut Session<'_>) -> Result<Option<JobOutcome>, Stop> {
        s.take_messages().await?;
        if let Some(outcome) = self.list_mcp(s).await? {
            return Ok(Some(outcome));
        }
        if tasks::may_start_tasks(&s.agent.config) {
            s.report_ended_tasks().await?;
        }
        if let Some(end) = s.over_budget() {
            return s.finish(end).await.map(Some);
        }
        if s.needs_compaction()
            && let Some(outcome) = self.compact(s).await?
        {
            return Ok(Some(outcome));
        }
        self.call_model(s).await
    }

    /// One model call. Returns an outcome when the run must stop or wait.
    async fn call_model(&self, s: &mut Session<'_>) -> Result<Option<JobOutcome>, Stop> {
        let req = s.request(self.specs(s.agent, &s.state), None);
        if let Err(violation) = conversation::check(&req) {
            return s.finish(invalid_request(violation)).await.map(Some);
        }
        let started = std::time::Instant::now();
        match self.models.call(s.agent, &req, &s.ctx.cancel).await {
            Ok(mut resp) => {
                let replaced =
                    calls::assign_ids(&mut resp.content, s.state.turns + 1, &s.state.call_ids);
                if replaced > 0 {
                    tracing::info!(run_id = %s.run_id, replaced, "gave tool calls of the reply runtime ids (the provider's were missing, malformed or already used)");
                }
                s.log_reply(&resp, started.elapsed()).await?;
                Ok(None)
            }
            Err(ModelFailure::Cancelled) => s.finish(RunEnd::Cancelled).await.map(Some),
            Err(ModelFailure::ContextTooLong(msg)) if !s.compacted_for_overflow => {
                tracing::info!(run_id = %s.run_id, error = %msg, "context too long; compacting once");
                s.compacted_for_overflow = true;
                self.compact(s).await
            }
            Err(ModelFailure::ContextTooLong(msg)) | Err(ModelFailure::Fatal(msg)) => s
                .finish(RunEnd::Failed {
                    error: format!("model call failed: {msg}"),
                })
                .await
                .map(Some),
            Err(ModelFailure::Unavailable { error, retry_in }) => {
                s.wait_out_outage(error, retry_in).await.map(Some)
            }
        }
    }
}

/// The end of a run whose next request would break the rules every provider enforces.
fn invalid_request(violation: conversation::Violation) -> RunEnd {
    RunEnd::Failed {
        error: format!(
            "Nightshift built a request that no provider would accept ({violation}); this is \
             a bug in Nightshift, and the run was stopped instead of sending it"
        ),
    }
}

/// Why the loop stopped for taking too many steps without a model call.
fn no_progress_error(step: &Step, state: &RunState) -> String {
    format!(
        "the agent loop took {MAX_STEPS_WITHOUT_MODEL_CALL} steps without calling the model \
         (next step {step:?}, {} tool call(s) pending); this is a bug in Nightshift, and the \
         run was stopped so that no work is repeated",
        state.pending.len()
    )
}

impl AgentRuntime {
    /// The tools the agent may call: its tool box's, the control tools it enabled and the
    /// MCP tools the run's log lists, sorted by name (stable bytes for the prompt cache).
    fn specs(&self, agent: &AgentDef, state: &RunState) -> Vec<nightshift_llm::ToolSpec> {
        let mut specs = self.tools.specs(agent);
        if self.is_control(agent, wakeup::SCHEDULE_WAKEUP) {
            specs.push(wakeup::spec());
        }
        if !agent.skills.is_empty() {
            specs.push(crate::skills::spec(&agent.skills));
        }
        specs.extend(mcp::specs(agent, state));
        specs.sort_by(|a, b| a.name.cmp(&b.name));
        specs
    }
}
