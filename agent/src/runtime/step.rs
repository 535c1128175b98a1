//! Deciding the next step of a run from its projected state alone — no I/O — so that a run
//! resumed after a crash at any instant takes exactly the step the uninterrupted run would
//! have taken.
//!
//! By the newest reply's stop reason: `end_turn`, `stop_sequence` and `tool_use` (once its
//! calls are answered) finish the run; `max_tokens` gets a cut-off notice (never running its
//! calls: the notice names the complete ones, whose omission the model would not otherwise
//! see, as the history sent back drops calls that have no result), and fails the run after a
//! few in a row; `pause_turn` is resent; `refusal` fails the
//! run; a full context window (`model_context_window_exceeded`) compacts the conversation and
//! then continues with a notice, and fails after a few in a row; any reason this version does
//! not know fails the run, naming it.

use nightshift_llm::{Role, StopReason};
use nightshift_store::RunEnd;

use crate::state::RunState;
use crate::wakeup::ArmedWakeup;

/// Replies cut off at `max_tokens` in a row before the run fails.
const MAX_TOKENS_STREAK_LIMIT: u32 = 3;

/// Replies in a row that filled the context window (each followed by a compaction) before
/// the run fails.
const CONTEXT_FULL_STREAK_LIMIT: u32 = 3;

/// What to do next, decided from the state alone.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Run (or recover) the tool calls of the newest reply.
    RunTools,
    /// Tell the model its reply was cut off, then call it again.
    NoticeCutOff,
    /// Compact the conversation (the newest reply filled the context window).
    Compact,
    /// Call the model.
    CallModel,
    /// Park the run until its wakeup is due.
    Sleep(ArmedWakeup),
    /// End the run.
    Finish(RunEnd),
}

/// The next step for a run in `state`.
pub fn next_step(state: &RunState) -> Step {
    if let Some(ending) = &state.ending {
        return Step::Finish(ending.run_end(|| state.final_text()));
    }
    if !state.pending.is_empty() {
        return Step::RunTools;
    }
    if let Some(w) = &state.wakeup {
        return Step::Sleep(w.clone());
    }
    let Some(last) = state.messages.last() else {
        return Step::CallModel;
    };
    if last.role == Role::User {
        return Step::CallModel;
    }
    let stop = state.last_stop.clone().unwrap_or(StopReason::EndTurn);
    if stop.means_context_full() {
        return if state.context_full_streak >= CONTEXT_FULL_STREAK_LIMIT {
            Step::Finish(RunEnd::Failed {
                error: format!(
                    "the model's context window filled up {} times in a row, even after \
                     compacting; raise the agent's context.window_tokens or lower \
                     context.keep_last",
                    state.context_full_streak
                ),
            })
        } else if state.compacted_since_reply {
            Step::NoticeCutOff
        } else {
            Step::Compact
        };
    }
    match stop {
        StopReason::MaxTokens if state.max_tokens_streak >= MAX_TOKENS_STREAK_LIMIT => {
            Step::Finish(RunEnd::Failed {
                error: format!(
                    "the model's reply was cut off at max_tokens {} times in a row; raise the \
                     agent's max_tokens",
                    state.max_tokens_streak
                ),
            })
        }
        StopReason::MaxTokens => Step::NoticeCutOff,
        StopReason::PauseTurn => Step::CallModel,
        StopReason::Refusal => Step::Finish(RunEnd::Failed {
            error: format!("the model refused: {}", last.text()),
        }),
        StopReason::EndTurn | StopReason::StopSequence | StopReason::ToolUse => {
            Step::Finish(RunEnd::Succeeded {
                result: Some(last.text()),
            })
        }
        other => Step::Finish(RunEnd::Failed {
            error: format!(
                "the model stopped with a stop reason this version of Nightshift does not \
                 know: {}; its reply was kept in the run's events",
                stop_reason_name(&other)
            ),
        }),
    }
}

/// The notice for a cut-off reply (`max_tokens`, or a full context window): why nothing in it
/// ran, and the complete tool calls of the reply (when it is still the newest message) that
/// were not run either, with the start of their input, so the model can call again those it
/// still needs.
pub fn cut_off_notice(state: &RunState) -> String {
    let base = match &state.last_stop {
        Some(stop) if stop.means_context_full() => super::CONTEXT_FULL_NOTICE,
        _ => super::CUT_OFF_NOTICE,
    };
    let skipped: Vec<String> = state
        .messages
        .last()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| {
            m.tool_uses()
                .map(|t| {
                    let input = t.input.to_string();
                    let shown: String = input.chars().take(200).collect();
                    let more = if shown.len() < input.len() { "…" } else { "" };
                    format!("{} {shown}{more}", t.name)
                })
                .collect()
        })
        .unwrap_or_default();
    if skipped.is_empty() {
        return base.to_string();
    }
    format!(
        "{base} These complete tool calls of that reply were not run either: {}. Call again \
         those you still need.",
        skipped.join("; ")
    )
}

/// The wire name of a stop reason (`end_turn`, or the unknown name as received).
fn stop_reason_name(stop: &StopReason) -> String {
    match serde_json::to_value(stop) {
        Ok(serde_json::Value::String(name)) => name,
        _ => format!("{stop:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::RunEvent;
    use crate::runtime::CONTEXT_FULL_NOTICE;
    use nightshift_llm::{ContentBlock, Message, Usage};

    fn fold(events: &[RunEvent]) -> RunState {
        let mut state = RunState::default();
        for (i, e) in events.iter().enumerate() {
            state.apply(i as i64 + 1, e).unwrap();
        }
        state
    }

    fn prompt() -> RunEvent {
        RunEvent::UserMessage {
            message: Message::user_text("go"),
        }
    }

    fn reply(text: &str, stop: StopReason) -> RunEvent {
        let content = if text.is_empty() {
            vec![]
        } else {
            vec![ContentBlock::Text { text: text.into() }]
        };
        RunEvent::AssistantMessage {
            message: Message {
                role: Role::Assistant,
                content,
            },
            stop_reason: stop,
            usage: Usage::default(),
            model: "m".into(),
            cost_usd: 0.0,
            latency_ms: None,
            retries: 0,
        }
    }

    fn compacted() -> RunEvent {
        RunEvent::Compacted {
            summary: "summary".into(),
            kept_from: 1,
            usage: Usage::default(),
            cost_usd: 0.0,
        }
    }

    fn context_full() -> StopReason {
        StopReason::ModelContextWindowExceeded
    }

    #[test]
    fn an_unknown_stop_reason_fails_the_run_naming_it() {
        let state = fold(&[
            prompt(),
            reply("hm", StopReason::Other("weird_new_reason".into())),
        ]);
        match next_step(&state) {
            Step::Finish(RunEnd::Failed { error }) => {
                assert!(error.contains("weird_new_reason"), "{error}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_full_context_window_compacts_then_continues_with_a_notice() {
        let mut events = vec![prompt(), reply("long answer", context_full())];
        assert_eq!(next_step(&fold(&events)), Step::Compact);
        events.push(compacted());
        assert_eq!(next_step(&fold(&events)), Step::NoticeCutOff);
        events.push(RunEvent::UserMessage {
            message: Message::user_text(CONTEXT_FULL_NOTICE),
        });
        assert_eq!(next_step(&fold(&events)), Step::CallModel);
        events.push(reply("done", StopReason::EndTurn));
        assert!(matches!(
            next_step(&fold(&events)),
            Step::Finish(RunEnd::Succeeded { .. })
        ));
    }

    #[test]
    fn a_context_window_full_again_and_again_fails_the_run() {
        let mut events = vec![prompt()];
        for _ in 0..CONTEXT_FULL_STREAK_LIMIT {
            events.push(reply("x", context_full()));
            events.push(compacted());
            events.push(RunEvent::UserMessage {
                message: Message::user_text(CONTEXT_FULL_NOTICE),
            });
        }
        events.truncate(events.len() - 2); // the last reply, not yet compacted
        match next_step(&fold(&events)) {
            Step::Finish(RunEnd::Failed { error }) => {
                assert!(error.contains("context window"), "{error}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_empty_cut_off_reply_gets_the_notice_and_an_empty_pause_is_resent() {
        let cut = fold(&[prompt(), reply("", StopReason::MaxTokens)]);
        assert_eq!(next_step(&cut), Step::NoticeCutOff);
        let paused = fold(&[prompt(), reply("", StopReason::PauseTurn)]);
        assert_eq!(next_step(&paused), Step::CallModel);
    }

    #[test]
    fn the_cut_off_notice_names_the_complete_calls_that_did_not_run() {
        let mut cut = reply("let me", StopReason::MaxTokens);
        if let RunEvent::AssistantMessage { message, .. } = &mut cut {
            message.content.push(ContentBlock::ToolUse {
                id: "c1".into(),
                name: "read_file".into(),
                input: serde_json::json!({"path": "a.txt"}),
                unparsed: None,
            });
        }
        let state = fold(&[prompt(), cut]);
        assert_eq!(next_step(&state), Step::NoticeCutOff);
        let notice = cut_off_notice(&state);
        assert!(
            notice.starts_with(crate::runtime::CUT_OFF_NOTICE)
                && notice.contains(r#"read_file {"path":"a.txt"}"#)
                && notice.contains("not run either"),
            "{notice}"
        );
        let plain = fold(&[prompt(), reply("let me", StopReason::MaxTokens)]);
        assert_eq!(cut_off_notice(&plain), crate::runtime::CUT_OFF_NOTICE);
    }

    #[test]
    fn tool_use_without_calls_ends_the_turn() {
        let state = fold(&[prompt(), reply("all done", StopReason::ToolUse)]);
        assert_eq!(
            next_step(&state),
            Step::Finish(RunEnd::Succeeded {
                result: Some("all done".into())
            })
        );
    }
}
