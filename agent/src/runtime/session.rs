//! One job's view of a run, and the writes it makes: every event is appended under the job's
//! lease and folded into the state at once (a log the state disagrees with stops the job),
//! results are checked to answer their call, checkpoints and progress are written under the
//! lease, and the request for the next call is built from the state alone (normalised, so it
//! keeps the rules every provider enforces).

use nightshift_llm::{Message, ModelRequest, ModelResponse, conversation};
use nightshift_store::{RunEnd, RunProgress, StopRequest};
use nightshift_worker::{CancelReason, JobContext, JobOutcome};

use super::{Stop, outage};
use crate::checkpoint;
use crate::config::AgentDef;
use crate::events::RunEvent;
use crate::state::{Ending, RunState};

/// One job's view of a run.
pub(super) struct Session<'a> {
    pub(super) ctx: &'a JobContext,
    pub(super) agent: &'a AgentDef,
    pub(super) run_id: String,
    pub(super) started_at: Option<i64>,
    pub(super) state: RunState,
    pub(super) compacted_for_overflow: bool,
    /// Whether this job closed the run's inbox (it is ending; see `inbox.rs`).
    pub(super) inbox_closed: bool,
    /// Every event is redacted with it before it is logged or folded into the state.
    pub(super) redactor: &'a nightshift_tools::Redactor,
    /// The run's stored context (what started it), for its tools.
    pub(super) context: Option<serde_json::Value>,
    /// What stopped the run, when a guarded write was refused for it.
    pub(super) stop_request: Option<StopRequest>,
}

impl Session<'_> {
    /// Appends an event unless the run was cancelled or superseded (see
    /// `LeasedJob::append_event_unless_stopped`); false when it was refused (and which stop
    /// refused it is kept for the run's end).
    pub(super) async fn log_unless_cancelled(&mut self, event: RunEvent) -> Result<bool, Stop> {
        let event = self.redacted(event)?;
        let appended = self
            .ctx
            .lease
            .append_event_unless_stopped(event.kind(), &event.payload())
            .await?;
        match appended {
            Ok(seq) => {
                self.fold(seq, &event)?;
                Ok(true)
            }
            Err(stop) => {
                self.stop_request = Some(stop);
                Ok(false)
            }
        }
    }

    /// `end`, a cancellation told apart from a supersession by what stopped the job: the
    /// heartbeat's word or a refused write's.
    fn as_stopped(&self, end: RunEnd) -> RunEnd {
        let superseded = self.stop_request == Some(StopRequest::Supersede)
            || self.ctx.stop_reason() == Some(CancelReason::Superseded);
        match end {
            RunEnd::Cancelled if superseded => RunEnd::Superseded,
            end => end,
        }
    }

    /// Appends an event under the lease and folds it into the state.
    pub(super) async fn log(&mut self, event: RunEvent) -> Result<(), Stop> {
        let event = self.redacted(event)?;
        let seq = self
            .ctx
            .lease
            .append_event(event.kind(), &event.payload())
            .await?;
        self.fold(seq, &event)
    }

    /// `event` with every secret redacted, as it is logged.
    pub(super) fn redacted(&self, event: RunEvent) -> Result<RunEvent, Stop> {
        super::redact::event(self.redactor, event).map_err(|e| Stop::Corrupt(e.to_string()))
    }

    /// Folds `event`, logged as `seq`, into the state; a log the state disagrees with stops
    /// the job.
    pub(super) fn fold(&mut self, seq: i64, event: &RunEvent) -> Result<(), Stop> {
        self.state.apply(seq, event).map_err(|e| {
            Stop::Corrupt(format!("run {}: the event log disagrees: {e}", self.run_id))
        })
    }

    pub(super) async fn checkpoint(&self) -> Result<(), Stop> {
        let document = checkpoint::encode(&self.state);
        self.ctx
            .lease
            .write_checkpoint(
                self.state.through_seq,
                checkpoint::FORMAT_VERSION,
                &document,
            )
            .await?;
        Ok(())
    }

    pub(super) async fn record_progress(&self) -> Result<(), Stop> {
        let u = &self.state.usage;
        let to_i = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.ctx
            .lease
            .record_progress(&RunProgress {
                turns: to_i(self.state.turns),
                input_tokens: to_i(u.input_tokens),
                output_tokens: to_i(u.output_tokens),
                cache_read_tokens: to_i(u.cache_read_input_tokens),
                cache_write_tokens: to_i(u.cache_creation_input_tokens),
                cost_usd: self.state.cost_usd,
                agent_hash: self.state.agent_hash.clone(),
            })
            .await?;
        Ok(())
    }

    /// Logs the end, checkpoints, and returns the outcome that completes the run.
    pub(super) async fn finish(&mut self, end: RunEnd) -> Result<JobOutcome, Stop> {
        let end = self.as_stopped(end);
        if self.state.ending.is_none() {
            self.close_inbox().await?;
            self.log(Ending::of(&end).event()).await?;
        }
        self.checkpoint().await?;
        self.record_progress().await?;
        self.log_end(&end);
        Ok(JobOutcome::Done(end))
    }

    /// The one line an operator reads when a run ends (the job's span adds the run, job,
    /// agent and attempt).
    fn log_end(&self, end: &RunEnd) {
        let duration_ms = self
            .started_at
            .map(|started| self.ctx.lease.store().now() - started);
        let st = &self.state;
        // The logged ending (a status this version may not know) wins.
        let status = match &self.state.ending {
            Some(ending) => ending.status.as_str(),
            None => end.run_status().as_str(),
        };
        let (input_tokens, output_tokens) = (st.usage.input_tokens, st.usage.output_tokens);
        let detail = match end {
            RunEnd::Succeeded { .. } | RunEnd::Cancelled | RunEnd::Superseded => None,
            RunEnd::Failed { error: d }
            | RunEnd::BudgetExhausted { detail: d }
            | RunEnd::MaxRounds { detail: d } => d.lines().next(),
        };
        tracing::info!(
            status,
            duration_ms,
            turns = st.turns,
            input_tokens,
            output_tokens,
            cache_read_tokens = st.usage.cache_read_input_tokens,
            cache_write_tokens = st.usage.cache_creation_input_tokens,
            cost_usd = st.cost_usd,
            detail,
            "run ended"
        );
    }

    /// The request for the next call, with `extra` appended at the bottom: the same state
    /// always gives the same request, and it keeps the rules of [`conversation`].
    pub(super) fn request(
        &self,
        tools: Vec<nightshift_llm::ToolSpec>,
        extra: Option<Message>,
    ) -> ModelRequest {
        self.request_over(&self.state.messages, tools, extra)
    }

    /// [`Session::request`] over `messages` instead of the whole conversation.
    pub(super) fn request_over(
        &self,
        messages: &[Message],
        tools: Vec<nightshift_llm::ToolSpec>,
        extra: Option<Message>,
    ) -> ModelRequest {
        let messages = match extra {
            Some(m) => {
                let mut all = messages.to_vec();
                all.push(m);
                conversation::normalize(&all)
            }
            None => conversation::normalize(messages),
        };
        ModelRequest {
            // A fork may have been told to answer with another model.
            model: self
                .state
                .model
                .clone()
                .unwrap_or_else(|| self.agent.config.model.clone()),
            system: self.agent.system.clone(),
            messages,
            tools,
            max_tokens: self.agent.config.max_tokens,
            stop_sequences: Vec::new(),
            thinking: self.agent.config.thinking,
            effort: self.agent.config.effort,
        }
    }

    /// Logs a model reply (its tool calls already carry run-unique ids), its usage and how
    /// long it took.
    pub(super) async fn log_reply(
        &mut self,
        resp: &ModelResponse,
        latency: std::time::Duration,
    ) -> Result<(), Stop> {
        let cost_usd = self.agent.prices.cost(&resp.model, &resp.usage);
        self.log(RunEvent::AssistantMessage {
            message: resp.message(),
            stop_reason: resp.stop_reason.clone(),
            usage: resp.usage,
            model: resp.model.clone(),
            cost_usd,
            latency_ms: Some(u64::try_from(latency.as_millis()).unwrap_or(u64::MAX)),
            retries: resp.retries,
        })
        .await?;
        self.record_progress().await
    }

    /// Logs the result of pending call `call_id`, and checks that it answered that call: a
    /// result that registers nowhere would let the loop run the call again.
    pub(super) async fn log_result(
        &mut self,
        call_id: &str,
        content: String,
        is_error: bool,
    ) -> Result<(), Stop> {
        self.log(RunEvent::ToolResult {
            call_id: call_id.to_string(),
            content,
            is_error,
            interrupted: false,
        })
        .await?;
        // A logged result is progress: a crash after it does not count the attempt.
        self.ctx.lease.mark_progress().await?;
        let unanswered = self
            .state
            .pending
            .iter()
            .any(|c| c.call_id == call_id && c.result.is_none());
        if unanswered {
            return Err(Stop::Corrupt(format!(
                "run {}: the result of tool call {call_id} did not register; the run was \
                 stopped so that the call is not run again",
                self.run_id
            )));
        }
        Ok(())
    }

    /// The model is unreachable: wait (holding no slot, spending no attempt) until it is
    /// expected back, or fail the run once the outage has lasted past the agent's limit.
    pub(super) async fn wait_out_outage(
        &mut self,
        error: String,
        retry_in: Option<std::time::Duration>,
    ) -> Result<JobOutcome, Stop> {
        let now = self.ctx.lease.store().now();
        let limit_ms = i64::try_from(self.agent.config.outage_limit_seconds.saturating_mul(1000))
            .unwrap_or(i64::MAX);
        let plan = outage::plan(self.state.outage.as_ref(), now, limit_ms, retry_in);
        match plan {
            outage::Plan::Fail { lasted_ms } => {
                self.finish(RunEnd::Failed {
                    error: format!(
                        "the model was unreachable for {}s, past the agent's outage limit of \
                         {}s (outage_limit_seconds); last error: {error}",
                        lasted_ms / 1000,
                        self.agent.config.outage_limit_seconds
                    ),
                })
                .await
            }
            outage::Plan::Wait { since, until } => {
                tracing::warn!(run_id = %self.run_id, %error, wait_ms = until - now,
                    "the model is unreachable; the run waits without spending an attempt");
                self.log(RunEvent::ModelUnavailable {
                    error: error.clone(),
                    since,
                    until,
                })
                .await?;
                self.checkpoint().await?;
                Ok(JobOutcome::Defer {
                    until,
                    error: format!("waiting for the model: {error}"),
                })
            }
        }
    }

    /// The first budget the run has used up, checked before every model call.
    pub(super) fn over_budget(&self) -> Option<RunEnd> {
        let b = &self.agent.config.budgets;
        let st = &self.state;
        if st.turns >= b.max_turns {
            return Some(RunEnd::MaxRounds {
                detail: format!("reached the round cap of {} model calls", b.max_turns),
            });
        }
        let tokens = st.usage.input_tokens + st.usage.output_tokens;
        if let Some(max) = b.max_tokens
            && tokens >= max
        {
            return Some(RunEnd::BudgetExhausted {
                detail: format!("used {tokens} tokens of a budget of {max}"),
            });
        }
        if let Some(max) = b.max_cost_usd
            && st.cost_usd >= max
        {
            return Some(RunEnd::BudgetExhausted {
                detail: format!("spent ${:.4} of a budget of ${max:.4}", st.cost_usd),
            });
        }
        if let (Some(max), Some(started)) = (b.max_wall_seconds, self.started_at) {
            let elapsed_ms = self.ctx.lease.store().now() - started;
            if elapsed_ms >= i64::try_from(max.saturating_mul(1000)).unwrap_or(i64::MAX) {
                return Some(RunEnd::BudgetExhausted {
                    detail: format!(
                        "ran for {}s of a wall-clock budget of {max}s",
                        elapsed_ms / 1000
                    ),
                });
            }
        }
        None
    }

    /// True when the newest reply's input nears the configured share of the window.
    pub(super) fn needs_compaction(&self) -> bool {
        let policy = &self.agent.config.context;
        let last_input = self.last_input_tokens();
        last_input as f64 >= policy.window_tokens as f64 * policy.compact_at
            && self.state.messages.len() > policy.keep_last
    }

    pub(super) fn last_input_tokens(&self) -> u64 {
        self.state.last_input_tokens
    }
}
