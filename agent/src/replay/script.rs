//! What the recording says the world answered, read from a run's events alone — pure: the
//! model's answers in order (a reply, a compaction's summary, an outage), each call's tool
//! result by call id, how each park ended (a wakeup's time, an approval's decision), the
//! messages sent to the run, and the first event replay cannot reproduce.

use std::collections::{HashMap, VecDeque};

use nightshift_llm::{ModelResponse, StopReason, Usage};

use super::file::{CallPurpose, RecordedEvent};
use crate::events::{EndStatus, RunEvent};

/// The prefix the loop puts before a compaction's summary.
const SUMMARY_PREFIX: &str = "[Summary of the earlier conversation]\n";

/// One answer of the model, as recorded.
#[derive(Debug, Clone)]
pub(super) struct Answer {
    pub purpose: CallPurpose,
    /// What the model said (`None` for an outage).
    pub response: Option<ModelResponse>,
    /// An outage: the provider's error and when the run was told to try again.
    pub unavailable: Option<(String, i64)>,
    /// The store's time once this answer was logged (and its wakeup, if any, armed).
    pub clock_after: i64,
}

/// How a park ended, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Resume {
    /// A wakeup: the run was resumed at `now` (its reminder's time).
    Wakeup { now: i64 },
    /// A decision on a call that waited for approval.
    Approval {
        call_id: String,
        approved: bool,
        reason: Option<String>,
        timed_out: bool,
    },
}

/// A recorded tool call: its name and its result.
#[derive(Debug, Clone)]
pub(super) struct ToolRecord {
    pub name: String,
    pub content: Option<(String, bool)>,
}

/// Something replay cannot reproduce, and where it is.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Unreplayable {
    /// How many model answers come before it.
    pub after_answers: usize,
    pub turn: u64,
    pub what: String,
}

/// Everything the fakes answer from.
#[derive(Debug, Clone, Default)]
pub(super) struct Script {
    pub answers: Vec<Answer>,
    pub tools: HashMap<String, ToolRecord>,
    pub resumes: VecDeque<Resume>,
    /// The messages sent to the run, each with how many model answers came before it was
    /// taken, as sent (without what the loop adds when one cuts a wakeup short).
    pub messages: Vec<(usize, String)>,
    pub unreplayable: Option<Unreplayable>,
    /// How the run ended, when it did: its status and detail.
    pub ended: Option<(EndStatus, Option<String>)>,
    /// The time of the first event.
    pub start: i64,
    /// What each MCP server offered the run, as first listed (the replay lists it so again).
    pub mcp: Vec<crate::ports::McpListing>,
    /// When the newest wakeup was armed (its `scheduled_at`).
    slept_at: Option<i64>,
}

impl Script {
    pub(super) fn from_events(events: &[RecordedEvent], model: &str) -> Script {
        let mut s = Script {
            start: events.first().map_or(0, |e| e.at),
            ..Script::default()
        };
        let mut turns = 0u64;
        for e in events {
            s.read(e, model, &mut turns);
        }
        s
    }

    fn read(&mut self, e: &RecordedEvent, model: &str, turns: &mut u64) {
        let at = e.at;
        match &e.event {
            RunEvent::AssistantMessage {
                message,
                stop_reason,
                usage,
                model,
                retries,
                ..
            } => {
                *turns += 1;
                self.answers.push(Answer {
                    purpose: CallPurpose::Turn,
                    response: Some(response(
                        message.content.clone(),
                        stop_reason.clone(),
                        *usage,
                        model,
                        *retries,
                    )),
                    unavailable: None,
                    clock_after: at,
                });
            }
            RunEvent::Compacted { summary, usage, .. } => {
                let text = summary.strip_prefix(SUMMARY_PREFIX).unwrap_or(summary);
                let content = vec![nightshift_llm::ContentBlock::Text { text: text.into() }];
                self.answers.push(Answer {
                    purpose: CallPurpose::Summary,
                    response: Some(response(content, StopReason::EndTurn, *usage, model, 0)),
                    unavailable: None,
                    clock_after: at,
                });
            }
            RunEvent::ModelUnavailable { error, until, .. } => self.answers.push(Answer {
                purpose: CallPurpose::Unavailable,
                response: None,
                unavailable: Some((error.clone(), *until)),
                clock_after: at,
            }),
            RunEvent::ToolStarted { call_id, name, .. } => {
                self.tools.entry(call_id.clone()).or_insert(ToolRecord {
                    name: name.clone(),
                    content: None,
                });
            }
            RunEvent::ToolResult {
                call_id,
                content,
                is_error,
                ..
            } => {
                if let Some(t) = self.tools.get_mut(call_id) {
                    t.content = Some((content.clone(), *is_error));
                }
            }
            RunEvent::WakeupScheduled { scheduled_at, .. } => {
                // The loop reads the clock when it arms the wakeup, after the reply.
                if let Some(last) = self.answers.last_mut() {
                    last.clock_after = last.clock_after.max(*scheduled_at);
                }
                self.slept_at = Some(*scheduled_at);
            }
            RunEvent::Resumed { reminder, .. } => match wakeup_time(reminder, at, self.slept_at) {
                Some(now) => self.resumes.push_back(Resume::Wakeup { now }),
                None => self.cannot(
                    *turns,
                    "a resume that was not a wakeup (a background task's end woke the run)",
                ),
            },
            RunEvent::ApprovalDecided {
                call_id,
                approved,
                reason,
                by,
            } => self.resumes.push_back(Resume::Approval {
                call_id: call_id.clone(),
                approved: *approved,
                reason: reason.clone(),
                timed_out: by == "timeout",
            }),
            RunEvent::MessageReceived { text, .. } => self
                .messages
                .push((self.answers.len(), sent_text(text).to_string())),
            RunEvent::TaskEnded { .. } => {
                self.cannot(*turns, "a background task's end (task_ended)")
            }
            // What a fork changed at its fork point (a replaced result, a prompt, a model) is
            // the operator's, not the loop's: the requests up to it are the parent's.
            RunEvent::Forked { .. } => self.cannot(
                *turns,
                "the point where this run was forked from its parent (forked): replay the \
                 parent for the turns before it",
            ),
            RunEvent::McpToolsListed {
                server,
                tools,
                left_out,
            } => {
                if self.mcp.iter().any(|l| &l.server == server) {
                    self.cannot(
                        *turns,
                        "an MCP server's tools listed again after it said its list changed \
                         (mcp_tools_listed)",
                    );
                } else {
                    self.mcp.push(crate::ports::McpListing {
                        server: server.clone(),
                        tools: tools.clone(),
                        left_out: left_out.clone(),
                    });
                }
            }
            RunEvent::Finished { status, detail } => {
                self.ended = Some((status.clone(), detail.clone()));
            }
            RunEvent::RunStarted { .. }
            | RunEvent::UserMessage { .. }
            | RunEvent::ApprovalRequested { .. }
            | RunEvent::WorkspacePrepared { .. } => {}
        }
    }

    fn cannot(&mut self, turns: u64, what: &str) {
        if self.unreplayable.is_none() {
            self.unreplayable = Some(Unreplayable {
                after_answers: self.answers.len(),
                turn: turns + 1,
                what: what.to_string(),
            });
        }
    }
}

/// What the loop appends to a message that woke the run early from a wakeup
/// (`runtime::opening::message_text`).
const EARLY_MESSAGE_NOTE: &str = "\n\n[This message woke you early from a wakeup due at ";

/// A message as it was sent: `text` without the note the loop appends when it woke the run
/// early from a wakeup (the loop appends it again when it takes the message).
fn sent_text(text: &str) -> &str {
    text.rsplit_once(EARLY_MESSAGE_NOTE)
        .map_or(text, |(sent, _)| sent)
}

fn response(
    content: Vec<nightshift_llm::ContentBlock>,
    stop_reason: StopReason,
    usage: Usage,
    model: &str,
    retries: u32,
) -> ModelResponse {
    ModelResponse {
        id: "msg_replay".into(),
        model: model.to_string(),
        content,
        stop_reason,
        usage,
        rate_limits: Default::default(),
        retries,
    }
}

/// The time a wakeup's reminder was written at, as close to it as the reminder tells: its
/// "It is now …" (to the second) and, for a sleep under two minutes, its "(N s later)" after
/// `slept_at`; within that, the millisecond the event was stored (the reminder was made just
/// before), else the nearest end of the window. `None` when `reminder` is not a wakeup's.
fn wakeup_time(reminder: &str, stored_at: i64, slept_at: Option<i64>) -> Option<i64> {
    let rest = reminder.strip_prefix("[Wakeup] It is now ")?;
    let stamp = rest.split(". ").next()?;
    let second = chrono::DateTime::parse_from_rfc3339(stamp)
        .ok()?
        .timestamp_millis();
    let (mut lo, mut hi) = (second, second + 999);
    let later = rest
        .split_once(" (")
        .and_then(|(_, after)| after.split_once(" s later)"))
        .and_then(|(n, _)| n.parse::<i64>().ok());
    if let (Some(n), Some(slept)) = (later, slept_at) {
        lo = lo.max(slept + n * 1000);
        hi = hi.min(slept + n * 1000 + 999);
    }
    Some(if lo > hi { lo } else { stored_at.clamp(lo, hi) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nightshift_llm::Message;

    fn ev(seq: i64, at: i64, event: RunEvent) -> RecordedEvent {
        RecordedEvent { seq, at, event }
    }

    #[test]
    fn a_wakeups_time_comes_from_its_reminder_and_the_store() {
        let r = "[Wakeup] It is now 2026-01-01T00:00:10Z. You went to sleep at …";
        let second = 1_767_225_610_000;
        assert_eq!(wakeup_time(r, second + 250, None), Some(second + 250));
        assert_eq!(wakeup_time(r, second + 1_250, None), Some(second + 999));
        assert_eq!(
            wakeup_time("[A background task ended …", second, None),
            None
        );
        // Slept at …:00.700 and woken 9 s later: now is in [.700 of :09, .699 of :10].
        let r = "[Wakeup] It is now 2026-01-01T00:00:10Z. You went to sleep at \
                 2026-01-01T00:00:00Z (9 s later) waiting for: x.";
        let slept = second - 10_000 + 700;
        assert_eq!(
            wakeup_time(r, second + 800, Some(slept)),
            Some(second + 699)
        );
        assert_eq!(
            wakeup_time(r, second + 300, Some(slept)),
            Some(second + 300)
        );
    }

    #[test]
    fn answers_results_and_what_cannot_be_replayed_are_read_in_order() {
        let events = vec![
            ev(
                1,
                10,
                RunEvent::UserMessage {
                    message: Message::user_text("go"),
                },
            ),
            ev(
                2,
                20,
                RunEvent::Compacted {
                    summary: format!("{SUMMARY_PREFIX}the gist"),
                    kept_from: 1,
                    usage: Usage::default(),
                    cost_usd: 0.0,
                },
            ),
            ev(
                3,
                30,
                RunEvent::MessageReceived {
                    job_id: 4,
                    text: "hi".into(),
                },
            ),
        ];
        let s = Script::from_events(&events, "m");
        assert_eq!(s.start, 10);
        assert_eq!(s.answers.len(), 1);
        assert_eq!(s.answers[0].purpose, CallPurpose::Summary);
        let text = s.answers[0].response.as_ref().unwrap().message().text();
        assert_eq!(text, "the gist");
        assert_eq!(s.messages, vec![(1, "hi".to_string())]);
        assert_eq!(s.unreplayable, None);
        let woke = format!("look{}2026-01-01T00:00:00Z: nap]", EARLY_MESSAGE_NOTE);
        assert_eq!(sent_text(&woke), "look");
    }
}
