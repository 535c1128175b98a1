//! A round of tool calls: first a plan, one entry per pending call ([`plan_round`], pure),
//! then the I/O that carries it out ([`AgentRuntime::run_tools`]).
//!
//! The plan says, for each call of the newest reply without a result, in the model's order:
//! refused for its input (arguments that were not JSON, or that break the tool's schema:
//! before anything runs, before a person is asked), answered with a
//! person's denial, waiting for approval (the round stops there), replayed from the
//! write-ahead log (started before a crash: run again with the logged key when read-only or
//! idempotent, reported as interrupted when it has side effects), or started now (its
//! `tool_started` committed first — for every call but a read-only one under the
//! cancel/supersede fence — then run). It is a function of the run's state and of what the tool box says about each call,
//! so a run resumed after a crash plans what the uninterrupted run would have done.

use std::collections::BTreeMap;

use nightshift_telemetry::traces;
use nightshift_tools::ToolClass;

use crate::approval;
use crate::calls;
use crate::config::AgentDef;
use crate::events::RunEvent;
use crate::ports::ToolCall;
use crate::skills;
use crate::state::{Decision, PendingCall, RunState};
use crate::tasks;
use crate::wakeup;

use super::mcp;
use super::metrics;
use super::session::Session;
use super::{AgentRuntime, INTERRUPTED_NOTICE, REFUSED_NOTICE, Stop, ToolsEnd};

/// What the tool box and the agent's config say about one call that has not started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CallFacts {
    /// A control tool the agent enabled (the loop runs it itself; never input-checked).
    pub control: bool,
    /// Why its input breaks the tool's schema, if it does.
    pub input_error: Option<String>,
    /// A person must decide before it starts.
    pub needs_approval: bool,
    pub durability: ToolClass,
}

/// What the round does with one pending call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CallPlan {
    /// Its input is refused: answered with this error, nothing runs.
    RefuseInput(String),
    /// A person denied it: answered with this notice, nothing runs.
    Denied(String),
    /// It waits for a person's decision: ask, and end the round here.
    AskApproval,
    /// Started before a crash, with side effects: reported as interrupted, not run again.
    Interrupted,
    /// Started before a crash and safe to repeat: run again under the logged key.
    Replay { key: String },
    /// Log `tool_started` (under the fence unless read-only), then run it.
    Start { key: String, durability: ToolClass },
}

/// One call of the round and its plan.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Planned {
    pub call: PendingCall,
    pub control: bool,
    pub plan: CallPlan,
}

/// The plan of one call. `key` is the idempotency key a new call starts under; `facts` is
/// read only for a call that has not started.
pub(crate) fn plan_call(
    call: &PendingCall,
    facts: impl FnOnce() -> CallFacts,
    decision: Option<&Decision>,
    key: impl FnOnce() -> String,
) -> (bool, CallPlan) {
    if let Some(started) = &call.started {
        let plan = match started.durability {
            ToolClass::SideEffect => CallPlan::Interrupted,
            _ => CallPlan::Replay {
                key: started.idempotency_key.clone(),
            },
        };
        return (false, plan);
    }
    if let Some(raw) = &call.unparsed {
        return (
            false,
            CallPlan::RefuseInput(calls::unparsed_notice(&call.name, raw)),
        );
    }
    let facts = facts();
    let plan = match (&facts.input_error, facts.needs_approval, decision) {
        (Some(violation), _, _) if !facts.control => CallPlan::RefuseInput(violation.clone()),
        (_, true, Some(d)) if !d.approved => {
            CallPlan::Denied(approval::denied_notice(d.reason.as_deref()))
        }
        (_, true, None) => CallPlan::AskApproval,
        _ => CallPlan::Start {
            key: key(),
            durability: facts.durability,
        },
    };
    (facts.control, plan)
}

/// The plan of a round over `pending`, in order: calls with a result are left out, and
/// nothing after a call that must wait for approval is planned.
pub(crate) fn plan_round(
    pending: &[PendingCall],
    facts: impl Fn(&PendingCall) -> CallFacts,
    decisions: &BTreeMap<String, Decision>,
    key: impl Fn(&PendingCall) -> String,
) -> Vec<Planned> {
    let mut round = Vec::new();
    for call in pending.iter().filter(|c| c.result.is_none()) {
        let (control, plan) = plan_call(
            call,
            || facts(call),
            decisions.get(&call.call_id),
            || key(call),
        );
        let stop = plan == CallPlan::AskApproval;
        round.push(Planned {
            call: call.clone(),
            control,
            plan,
        });
        if stop {
            break;
        }
    }
    round
}

impl AgentRuntime {
    /// Runs every pending call of the newest reply by the plan of [`plan_round`], in the order
    /// the model gave them: `tool_started` is committed before a tool runs; a side-effect or
    /// idempotent call is started only while the run is neither cancelled nor superseded (one
    /// guarded write),
    /// and when one is refused so, the round ends [`ToolsEnd::Refused`] and the run must stop.
    /// A call that needs approval and has no decision ends the round until one is made. A
    /// cancelled job stops between calls.
    pub(super) async fn run_tools(&self, s: &mut Session<'_>) -> Result<ToolsEnd, Stop> {
        let round = plan_round(
            &s.state.pending,
            |call| self.facts(s.agent, &s.state, call),
            &s.state.decisions,
            |call| calls::idempotency_key(&s.run_id, s.state.turns, &call.call_id),
        );
        for planned in round {
            if s.ctx.cancel.is_cancelled() {
                return Ok(ToolsEnd::Done);
            }
            if let Some(end) = self.carry_out(s, planned).await? {
                return Ok(end);
            }
        }
        Ok(ToolsEnd::Done)
    }

    /// Carries out one call's plan. Returns how the round ends, when this call ends it.
    async fn carry_out(
        &self,
        s: &mut Session<'_>,
        planned: Planned,
    ) -> Result<Option<ToolsEnd>, Stop> {
        let call = &planned.call;
        let class = self.durability(s.agent, &s.state, &call.name, &call.input);
        let span = traces::tool_call_span(
            metrics::tool_label(s.agent, &call.name),
            &call.call_id,
            class.as_str(),
        );
        let count = |outcome, ran_for| {
            metrics::tool_call(s.agent, &call.name, class, outcome, ran_for);
            traces::record_tool_outcome(&span, outcome);
        };
        let key = match planned.plan {
            CallPlan::RefuseInput(violation) => {
                s.log_result(&call.call_id, violation, true).await?;
                count("refused_input", None);
                return Ok(None);
            }
            CallPlan::Denied(content) => {
                s.log(tool_error(&call.call_id, content, false)).await?;
                count("denied", None);
                return Ok(None);
            }
            CallPlan::AskApproval => {
                traces::record_tool_outcome(&span, "await_approval");
                let until = s.request_approval(call).await?;
                return Ok(Some(ToolsEnd::AwaitApproval {
                    call_id: call.call_id.clone(),
                    until,
                }));
            }
            CallPlan::Interrupted => {
                let content = match s.task_started_by(&call.call_id).await? {
                    Some(task_id) => tasks::interrupted_start_notice(&task_id),
                    None => INTERRUPTED_NOTICE.to_string(),
                };
                s.log(tool_error(&call.call_id, content, true)).await?;
                count("interrupted", None);
                return Ok(None);
            }
            CallPlan::Replay { key } => key,
            CallPlan::Start { key, durability } => {
                if !start(s, call, &key, durability).await? {
                    count("refused", None);
                    return Ok(Some(ToolsEnd::Refused));
                }
                key
            }
        };
        let began = std::time::Instant::now();
        let ran = if planned.control {
            let failed = span
                .wrap(self.run_control_tool(s, &call.call_id, &call.name, &call.input))
                .await?;
            if failed { Ran::Error } else { Ran::Ok }
        } else {
            span.wrap(self.run_tool(s, call, &key, class)).await?
        };
        let outcome = match &ran {
            Ran::Ok => "ok",
            Ran::Error => "error",
            Ran::Unresolved(_) => "unresolved",
        };
        count(outcome, Some(began.elapsed()));
        Ok(match ran {
            Ran::Unresolved(why) => Some(ToolsEnd::Unresolved {
                error: format!(
                    "the outcome of {} call {} is not known yet: {why}",
                    call.name, call.call_id
                ),
            }),
            Ran::Ok | Ran::Error => None,
        })
    }

    /// Runs a call on the tool box and logs its result — unless the outcome is not known
    /// yet and the call is safe to run again ([`keeps_open`]): then nothing is logged, and
    /// the call stays open for the job's next try.
    async fn run_tool(
        &self,
        s: &mut Session<'_>,
        call: &PendingCall,
        key: &str,
        class: ToolClass,
    ) -> Result<Ran, Stop> {
        let reply = self
            .tools
            .call(
                s.agent,
                ToolCall {
                    run_id: &s.run_id,
                    call_id: &call.call_id,
                    name: &call.name,
                    input: &call.input,
                    idempotency_key: key,
                    context: s.context.as_ref(),
                    store: s.ctx.lease.store(),
                },
                &s.ctx.cancel,
            )
            .await;
        if keeps_open(reply.unresolved, class) {
            return Ok(Ran::Unresolved(reply.content));
        }
        let failed = reply.is_error;
        s.log_result(&call.call_id, reply.content, failed).await?;
        Ok(if failed { Ran::Error } else { Ran::Ok })
    }

    /// What the agent's config and the tool box say about a call.
    fn facts(&self, agent: &AgentDef, state: &RunState, call: &PendingCall) -> CallFacts {
        let control = self.is_control(agent, &call.name);
        CallFacts {
            control,
            input_error: if control {
                None
            } else if mcp::is_mcp(&call.name) {
                mcp::check_input(agent, state, &call.name, &call.input).err()
            } else {
                self.tools.check_input(agent, &call.name, &call.input).err()
            },
            needs_approval: self.needs_approval(agent, &call.name, &call.input),
            durability: self.durability(agent, state, &call.name, &call.input),
        }
    }

    /// True when a call must wait for a human's decision.
    fn needs_approval(&self, agent: &AgentDef, name: &str, input: &serde_json::Value) -> bool {
        let marked = agent
            .config
            .tool_overrides
            .get(name)
            .and_then(|o| o.approval)
            == Some(nightshift_tools::Approval::Required);
        marked || agent.config.approvals.matches(name, input)
    }

    /// True for a control tool the agent has enabled (the loop runs it itself).
    pub(super) fn is_control(&self, agent: &AgentDef, name: &str) -> bool {
        (wakeup::is_control_tool(name) && agent.config.tools.iter().any(|t| t == name))
            || (name == skills::LOAD_SKILL && !agent.skills.is_empty())
    }

    fn durability(
        &self,
        agent: &AgentDef,
        state: &RunState,
        name: &str,
        input: &serde_json::Value,
    ) -> ToolClass {
        if self.is_control(agent, name) {
            // `load_skill` only reads; `schedule_wakeup` arms its wakeup once per call.
            if name == skills::LOAD_SKILL {
                ToolClass::ReadOnly
            } else {
                ToolClass::Idempotent
            }
        } else if mcp::is_mcp(name) {
            mcp::class(agent, state, name)
        } else {
            self.tools.durability(agent, name, input)
        }
    }

    /// `load_skill`: the skill's text, read here (nothing runs). True when its result is an
    /// error.
    async fn run_load_skill(
        &self,
        s: &mut Session<'_>,
        call_id: &str,
        input: &serde_json::Value,
    ) -> Result<bool, Stop> {
        let skills = s.agent.skills.clone();
        let input = input.clone();
        let read = tokio::task::spawn_blocking(move || skills::read(&skills, &input))
            .await
            .unwrap_or_else(|e| Err(format!("reading the skill failed: {e}")));
        let (content, is_error) = match read {
            Ok(text) => (text, false),
            Err(why) => (why, true),
        };
        s.log_result(call_id, content, is_error).await?;
        Ok(is_error)
    }

    /// `schedule_wakeup`: arms the wakeup (once per call, also when re-run after a crash);
    /// `load_skill` reads a skill. True when its result is an error.
    async fn run_control_tool(
        &self,
        s: &mut Session<'_>,
        call_id: &str,
        name: &str,
        input: &serde_json::Value,
    ) -> Result<bool, Stop> {
        if name == skills::LOAD_SKILL {
            return self.run_load_skill(s, call_id, input).await;
        }
        let armed = s.state.wakeup.clone().filter(|w| w.call_id == call_id);
        let planned = match armed {
            Some(w) => Ok(w),
            None => wakeup::plan(
                call_id,
                input,
                s.ctx.lease.store().now(),
                &s.agent.config.wakeups,
                s.state.wakeups_used,
            ),
        };
        let (content, is_error) = match planned {
            Ok(w) => {
                if s.state.wakeup.as_ref().map(|a| a.call_id.as_str()) != Some(call_id) {
                    s.log(RunEvent::WakeupScheduled {
                        call_id: call_id.to_string(),
                        due_at: w.due_at,
                        reason: w.reason.clone(),
                        scheduled_at: w.scheduled_at,
                    })
                    .await?;
                }
                (wakeup::confirmation(&w), false)
            }
            Err(refused) => (refused.to_string(), true),
        };
        s.log(RunEvent::ToolResult {
            call_id: call_id.to_string(),
            content,
            is_error,
            interrupted: false,
        })
        .await?;
        Ok(is_error)
    }
}

/// How running one call went.
enum Ran {
    Ok,
    Error,
    /// No result was logged: the outcome is not known yet (why).
    Unresolved(String),
}

/// Whether a call whose tool answered `unresolved` stays open (no result; the job tries
/// again later and the call is run again under its key): only when running it again is
/// safe. A side-effect call is never run again, so its "unresolved" answer is its result.
pub(crate) fn keeps_open(unresolved: bool, class: ToolClass) -> bool {
    unresolved && class.rerun_on_recovery()
}

/// Logs a new call's `tool_started`; a side-effect or idempotent call only while the run is
/// neither cancelled nor superseded. False when the fence refused it (its result then says so).
async fn start(
    s: &mut Session<'_>,
    call: &PendingCall,
    key: &str,
    durability: ToolClass,
) -> Result<bool, Stop> {
    let started = RunEvent::ToolStarted {
        call_id: call.call_id.clone(),
        name: call.name.clone(),
        input: call.input.clone(),
        durability,
        idempotency_key: key.to_string(),
    };
    // A read-only call changes nothing: no fence. An idempotent call may still change the
    // world (a comment updated in place, a review posted once): it is fenced like a side
    // effect, so a cancelled or superseded run starts neither.
    if durability == ToolClass::ReadOnly {
        s.log(started).await?;
        return Ok(true);
    }
    if s.log_unless_cancelled(started).await? {
        return Ok(true);
    }
    s.log(tool_error(&call.call_id, REFUSED_NOTICE.to_string(), false))
        .await?;
    Ok(false)
}

/// A `tool_result` that is an error the loop wrote (not the tool).
fn tool_error(call_id: &str, content: String, interrupted: bool) -> RunEvent {
    RunEvent::ToolResult {
        call_id: call_id.to_string(),
        content,
        is_error: true,
        interrupted,
    }
}

#[cfg(test)]
#[path = "tool_round_tests.rs"]
mod tests;
