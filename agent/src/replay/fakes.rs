//! The two ports the loop reaches the world through, answered from a recording: the model's
//! replies in order, and each tool call's recorded result by call id. Nothing is run and
//! nothing is sent. Tool specs, durability classes and input checks are the live tool box's
//! (the config's), so a changed tool shows in the replayed requests.
//!
//! A message the run took is sent to it again (on the scratch store) once the model answer
//! it followed is given, so the loop takes it before its next model call, as it did.
//!
//! The first place the loop leaves the recording is kept in the [`Tape`]; from then on every
//! model call fails (the run ends), so a divergence never hangs the replay.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use nightshift_llm::{ModelRequest, ModelResponse, ToolSpec};
use nightshift_store::{JobOptions, ManualClock, NewResume, ResumeReason, Store};
use tokio_util::sync::CancellationToken;

use super::compare::compare;
use super::divergence::{Divergence, DivergenceKind};
use super::file::{CallPurpose, RecordedCall};
use super::script::{Answer, Script};
use crate::config::AgentDef;
use crate::events::EndStatus;
use crate::ports::{ModelFailure, ModelGateway, ToolBox, ToolCall};
use crate::runtime::SUMMARY_REQUEST;
use nightshift_tools::{ToolClass, ToolOutput};

/// What the fakes share with the driver.
#[derive(Debug)]
pub(super) struct Tape {
    pub script: Script,
    /// The requests to compare against (compare mode), or `None` (record mode).
    pub expected: Option<Vec<RecordedCall>>,
    /// The calls the loop made, with their requests.
    pub made: Vec<RecordedCall>,
    pub tool_calls: usize,
    /// Conversation turns answered so far.
    pub turns: u64,
    pub divergence: Option<Divergence>,
}

impl Tape {
    /// Keeps `kind` as the divergence, unless one was found before.
    pub(super) fn diverge(&mut self, kind: DivergenceKind) {
        if self.divergence.is_none() {
            self.divergence = Some(Divergence {
                call: self.made.len() + 1,
                turn: self.turns + 1,
                kind,
            });
        }
    }
}

/// The failure a model call gets once the replay has diverged: the run ends.
fn stopped() -> ModelFailure {
    ModelFailure::Fatal("the replay diverged from the recording".into())
}

/// The model, answered from the recording.
pub(super) struct RecordedModel {
    pub tape: Arc<Mutex<Tape>>,
    pub clock: ManualClock,
    /// The scratch store and the replayed run, to send it the recorded messages.
    pub store: Store,
    pub run_id: String,
}

impl ModelGateway for RecordedModel {
    fn call<'a>(
        &'a self,
        _agent: &'a AgentDef,
        req: &'a ModelRequest,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelFailure>> {
        let made = || self.tape.lock().expect("replay tape").made.len();
        let before = made();
        let answer = self.answer(req);
        let answered = made();
        Box::pin(async move {
            // The messages the run took after this answer (before the next call) are sent
            // now: the loop takes them where it takes messages, as it did.
            if answered > before
                && let Err(e) = send_messages(&self.store, &self.run_id, &self.tape, answered).await
            {
                self.tape
                    .lock()
                    .expect("replay tape")
                    .diverge(DivergenceKind::Stopped {
                        error: format!("sending a recorded message to the run failed: {e}"),
                    });
                return Err(stopped());
            }
            answer
        })
    }
}

/// Sends run `run_id` the recorded messages taken after `answers` model answers.
pub(super) async fn send_messages(
    store: &Store,
    run_id: &str,
    tape: &Mutex<Tape>,
    answers: usize,
) -> nightshift_store::Result<()> {
    let texts: Vec<String> = tape
        .lock()
        .expect("replay tape")
        .script
        .messages
        .iter()
        .filter(|(after, _)| *after == answers)
        .map(|(_, text)| text.clone())
        .collect();
    for text in texts {
        store
            .enqueue_resume(&NewResume {
                run_id: run_id.to_string(),
                payload: ResumeReason::Message { text }.to_payload(),
                dedupe_key: None,
                job: JobOptions::default(),
            })
            .await?;
    }
    Ok(())
}

impl RecordedModel {
    fn answer(&self, req: &ModelRequest) -> Result<ModelResponse, ModelFailure> {
        let mut tape = self.tape.lock().expect("replay tape");
        let Some((purpose, answer)) = checked(&mut tape, req) else {
            return Err(stopped());
        };
        let turn = tape.turns + 1;
        tape.made.push(RecordedCall {
            turn,
            purpose,
            request: req.clone(),
        });
        let Some(answer) = answer else {
            // The call the run ended at: it fails as the run did.
            return Err(match tape.script.ended.clone() {
                Some((EndStatus::Cancelled | EndStatus::Superseded, _)) => ModelFailure::Cancelled,
                Some((_, detail)) => ModelFailure::Fatal(detail.unwrap_or_default()),
                None => stopped(),
            });
        };
        if purpose == CallPurpose::Turn {
            tape.turns += 1;
        }
        let now = answer.clock_after;
        self.clock.set(now);
        match (answer.response, answer.unavailable) {
            (Some(response), _) => Ok(response),
            (None, Some((error, until))) => {
                let retry_in = u64::try_from(until - now).unwrap_or(0);
                Err(ModelFailure::Unavailable {
                    error,
                    retry_in: Some(std::time::Duration::from_millis(retry_in)),
                })
            }
            (None, None) => Err(stopped()),
        }
    }
}

/// The next model call, checked against the recording: what it is for and its recorded
/// answer (`None` for the call a run that did not succeed ended at), or `None` once the
/// replay has diverged (here, or before).
fn checked(tape: &mut Tape, req: &ModelRequest) -> Option<(CallPurpose, Option<Answer>)> {
    if tape.divergence.is_some() {
        return None;
    }
    let i = tape.made.len();
    if let Some(u) = tape.script.unreplayable.clone()
        && i >= u.after_answers
    {
        tape.divergence = Some(Divergence {
            call: i + 1,
            turn: u.turn,
            kind: DivergenceKind::Unreplayable { what: u.what },
        });
        return None;
    }
    let answer = tape.script.answers.get(i).cloned();
    let failed = |t: &Tape| {
        t.script
            .ended
            .as_ref()
            .is_some_and(|(s, _)| *s != EndStatus::Succeeded)
    };
    let purpose = match &answer {
        Some(a) => a.purpose,
        None if failed(tape) => CallPurpose::Unanswered,
        None => {
            let recorded = tape.script.answers.len();
            tape.diverge(DivergenceKind::ExtraModelCall { recorded });
            return None;
        }
    };
    let asked = if asks_for_summary(req) {
        CallPurpose::Summary
    } else {
        CallPurpose::Turn
    };
    if !matches!(purpose, CallPurpose::Unavailable | CallPurpose::Unanswered) && purpose != asked {
        tape.diverge(DivergenceKind::OtherCall {
            asked,
            recorded: purpose,
        });
        return None;
    }
    if let Some(expected) = tape.expected.as_ref().map(|e| e.get(i).cloned()) {
        let Some(expected) = expected else {
            tape.diverge(DivergenceKind::ExtraModelCall { recorded: i });
            return None;
        };
        if let Some(difference) = compare(&expected.request, req) {
            tape.diverge(DivergenceKind::Request {
                purpose: expected.purpose,
                difference,
            });
            return None;
        }
    }
    Some((purpose, answer))
}

/// Whether `req` asks for a compaction's summary (its last message is the request).
fn asks_for_summary(req: &ModelRequest) -> bool {
    req.messages
        .last()
        .is_some_and(|m| m.text().contains(SUMMARY_REQUEST))
}

/// The tools: the live tool box's specs, classes and checks; results from the recording.
pub(super) struct RecordedTools {
    pub tape: Arc<Mutex<Tape>>,
    pub live: Arc<dyn ToolBox>,
}

impl ToolBox for RecordedTools {
    /// The MCP servers as the recording lists them: no server is started.
    fn mcp_listings<'a>(
        &'a self,
        _agent: &'a AgentDef,
        _run: crate::ports::RunStart<'a>,
        listed: Vec<String>,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Vec<crate::ports::McpListing>, crate::ports::PrepareError>> {
        let tape = self.tape.lock().expect("replay tape");
        let due = tape
            .script
            .mcp
            .iter()
            .filter(|l| !listed.contains(&l.server))
            .cloned()
            .collect();
        Box::pin(async move { Ok(due) })
    }

    fn specs(&self, agent: &AgentDef) -> Vec<ToolSpec> {
        self.live.specs(agent)
    }

    fn durability(&self, agent: &AgentDef, name: &str, input: &serde_json::Value) -> ToolClass {
        self.live.durability(agent, name, input)
    }

    fn check_input(
        &self,
        agent: &AgentDef,
        name: &str,
        input: &serde_json::Value,
    ) -> Result<(), String> {
        self.live.check_input(agent, name, input)
    }

    fn call<'a>(
        &'a self,
        _agent: &'a AgentDef,
        call: ToolCall<'a>,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ToolOutput> {
        let output = self.answer(call.call_id, call.name);
        Box::pin(async move { output })
    }
}

impl RecordedTools {
    fn answer(&self, call_id: &str, name: &str) -> ToolOutput {
        let mut tape = self.tape.lock().expect("replay tape");
        tape.tool_calls += 1;
        let recorded = tape.script.tools.get(call_id).cloned();
        match recorded {
            Some(t) if t.name == name && t.content.is_some() => {
                let (content, is_error) = t.content.expect("checked");
                if is_error {
                    ToolOutput::error(content)
                } else {
                    ToolOutput::ok(content)
                }
            }
            _ => {
                if tape.divergence.is_none() {
                    // The call belongs to the turn whose reply asked for it.
                    tape.divergence = Some(Divergence {
                        call: tape.made.len(),
                        turn: tape.turns.max(1),
                        kind: DivergenceKind::UnrecordedToolCall {
                            name: name.to_string(),
                            call_id: call_id.to_string(),
                        },
                    });
                }
                ToolOutput::error("replay: this call is not in the recording; nothing was run")
            }
        }
    }
}
