//! What makes a conversation valid to send, written once: [`check`] states the rules every
//! provider enforces, and [`normalize`] turns a run's projected messages into a conversation
//! that satisfies them.
//!
//! The rules (the strictest of the Anthropic Messages API and OpenAI chat completions):
//! 1. There is at least one message, and the first is the user's.
//! 2. Roles alternate: never two user or two assistant messages in a row.
//! 3. Every message has content, except an optional final assistant message; no text block is
//!    empty or only whitespace.
//! 4. In a user message, `tool_result` blocks come first, and each answers a `tool_use` of the
//!    assistant message just before it, at most once.
//! 5. Every `tool_use` of an assistant message that is not the last one is answered in the
//!    next message; the last message has no `tool_use` (nothing could answer it).
//! 6. Tool-call ids are 1–40 of `A-Z a-z 0-9 _ -` (OpenAI allows 40 characters, Anthropic
//!    that alphabet) and unique across the whole request.
//! 7. Reasoning blocks (thinking, redacted thinking, `reasoning_content`) are the assistant's
//!    only.
//!
//! Guarantees of [`normalize`]: it is a pure function (the same messages always give the same
//! conversation, so a resumed run sends the same bytes as an uninterrupted one), it only
//! removes or merges, never invents content, and its output passes [`check`] whenever its
//! input starts with a user message and its tool-call ids are well formed and unique — which
//! the agent loop guarantees for every new reply. Concretely it drops empty and
//! whitespace-only text blocks and empty messages (a reply cut off before any content, an
//! empty `pause_turn`, a reply cut off while it was still reasoning — reasoning with nothing
//! after it is not sent back), and keeps every other reasoning block as it is, in place, merges neighbours of the same role (a reminder after tool results, the
//! continuation of a paused turn), drops tool calls that no result answers (the complete calls
//! of a reply cut off at `max_tokens`, which were never run) together with results that answer
//! nothing, and gives a call whose id is malformed or already used earlier in the request a
//! fresh id (`ns_m<message>_<index>`), renaming its result with it — for logs written before
//! the loop made ids unique (an OpenAI-compatible server's `call_0` in every turn).

use std::collections::HashSet;

use crate::message::{ContentBlock, Message, ModelRequest, Role};

/// A rule of the module doc that a request breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("message {index}: {rule}")]
pub struct Violation {
    /// The index of the offending message (0 when the list itself is wrong).
    pub index: usize,
    /// What is wrong, in words.
    pub rule: String,
}

/// Whether `id` is a tool-call id every provider accepts.
pub fn valid_call_id(id: &str) -> bool {
    (1..=40).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks `req.messages` against the rules of the module doc; the first broken rule is the
/// error.
pub fn check(req: &ModelRequest) -> Result<(), Violation> {
    check_messages(&req.messages)
}

/// [`check`] on a bare message list.
pub fn check_messages(messages: &[Message]) -> Result<(), Violation> {
    let Some(first) = messages.first() else {
        return Err(Violation {
            index: 0,
            rule: "the conversation has no messages".into(),
        });
    };
    if first.role != Role::User {
        return Err(Violation {
            index: 0,
            rule: "the first message must be the user's".into(),
        });
    }
    let mut ids = HashSet::new();
    for index in 0..messages.len() {
        check_message(messages, index, &mut ids).map_err(|rule| Violation { index, rule })?;
    }
    Ok(())
}

/// Message `i` of `messages` against the rules: the rule it breaks. `ids` holds the tool_use
/// ids of the messages before it.
fn check_message<'a>(
    messages: &'a [Message],
    i: usize,
    ids: &mut HashSet<&'a str>,
) -> Result<(), String> {
    let m = &messages[i];
    let last = messages.len() - 1;
    if i > 0 && messages[i - 1].role == m.role {
        return Err(format!("two {:?} messages in a row", m.role));
    }
    if m.content.is_empty() && !(i == last && m.role == Role::Assistant) {
        return Err("the message has no content".into());
    }
    let mut block_check = BlockCheck {
        messages,
        i,
        results_done: false,
        answered: HashSet::new(),
    };
    for block in &m.content {
        block_check.check(block, ids)?;
    }
    if m.role == Role::Assistant && i < last {
        let next = &messages[i + 1];
        for id in calls_of(m) {
            if !results_of(next).any(|r| r == id) {
                return Err(format!(
                    "tool_use {id} has no tool_result in the next message"
                ));
            }
        }
    }
    Ok(())
}

/// The blocks of message `i`, checked in order.
struct BlockCheck<'a> {
    messages: &'a [Message],
    i: usize,
    /// Whether content other than tool results came already (results must come first).
    results_done: bool,
    /// The tool_use ids this message answered.
    answered: HashSet<&'a str>,
}

impl<'a> BlockCheck<'a> {
    fn check(&mut self, block: &'a ContentBlock, ids: &mut HashSet<&'a str>) -> Result<(), String> {
        let (i, role) = (self.i, self.messages[self.i].role);
        let last = self.messages.len() - 1;
        match block {
            ContentBlock::Text { text } => {
                if text.trim().is_empty() {
                    return Err("an empty or whitespace-only text block".into());
                }
                self.results_done = true;
            }
            ContentBlock::ToolUse { id, .. } => {
                if role != Role::Assistant {
                    return Err("a tool_use in a user message".into());
                }
                if i == last {
                    return Err(format!("tool_use {id} in the last message is unanswered"));
                }
                if !valid_call_id(id) {
                    return Err(format!("tool_use id {id:?} is not 1-40 of [A-Za-z0-9_-]"));
                }
                if !ids.insert(id.as_str()) {
                    return Err(format!("tool_use id {id} is used twice"));
                }
            }
            ContentBlock::Thinking { .. }
            | ContentBlock::RedactedThinking { .. }
            | ContentBlock::Reasoning { .. } => {
                if role != Role::Assistant {
                    return Err("reasoning in a user message".into());
                }
            }
            ContentBlock::ToolResult { tool_use_id, .. } => {
                if role != Role::User {
                    return Err("a tool_result in an assistant message".into());
                }
                if self.results_done {
                    return Err("a tool_result after other content".into());
                }
                let asked = i > 0 && calls_of(&self.messages[i - 1]).any(|id| id == tool_use_id);
                if !asked {
                    return Err(format!(
                        "tool_result {tool_use_id} answers no tool_use just before"
                    ));
                }
                if !self.answered.insert(tool_use_id.as_str()) {
                    return Err(format!("tool_use {tool_use_id} is answered twice"));
                }
            }
        }
        Ok(())
    }
}

/// The conversation to send for a run's projected `messages`; see the module doc.
pub fn normalize(messages: &[Message]) -> Vec<Message> {
    let mut out = merge(messages.iter().cloned());
    rename_taken_ids(&mut out);
    // Dropping an unanswered call can empty a message, and dropping that message can make
    // two neighbours of one role meet: repeat until nothing changes (each pass only removes).
    loop {
        let paired = pair_calls_and_results(&out);
        let merged = merge(paired.into_iter());
        if merged == out {
            return out;
        }
        out = merged;
    }
}

/// Drops empty text blocks and empty messages and merges neighbours of the same role; in a
/// merged user message the tool results go first.
fn merge(messages: impl Iterator<Item = Message>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    for mut m in messages {
        m.content
            .retain(|b| !matches!(b, ContentBlock::Text { text } if text.trim().is_empty()));
        if m.content.iter().all(ContentBlock::is_reasoning) {
            continue; // empty, or reasoning that led to nothing
        }
        match out.last_mut() {
            Some(prev) if prev.role == m.role => prev.content.extend(m.content),
            _ => out.push(m),
        }
    }
    for m in out.iter_mut().filter(|m| m.role == Role::User) {
        // A stable partition: results first, in their order, then everything else.
        let (mut results, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut m.content)
            .into_iter()
            .partition(|b| matches!(b, ContentBlock::ToolResult { .. }));
        results.extend(rest);
        m.content = results;
    }
    out
}

/// Gives every tool call whose id is malformed or used earlier in the conversation a fresh id,
/// and the results of the next message that answer it the same id (in order, when one reply
/// used an id twice).
fn rename_taken_ids(messages: &mut [Message]) {
    let mut seen: HashSet<String> = HashSet::new();
    for i in 0..messages.len() {
        if messages[i].role != Role::Assistant {
            continue;
        }
        let mut renamed: Vec<(String, String)> = Vec::new();
        let mut index = 0;
        for block in &mut messages[i].content {
            let ContentBlock::ToolUse { id, .. } = block else {
                continue;
            };
            if !valid_call_id(id) || seen.contains(id.as_str()) {
                let mut fresh = format!("ns_m{i}_{index}");
                while seen.contains(&fresh) {
                    fresh.push('x');
                }
                renamed.push((std::mem::replace(id, fresh.clone()), fresh));
            }
            seen.insert(id.clone());
            index += 1;
        }
        if renamed.is_empty() {
            continue;
        }
        if let Some(next) = messages.get_mut(i + 1) {
            for block in &mut next.content {
                if let ContentBlock::ToolResult { tool_use_id, .. } = block
                    && let Some(at) = renamed.iter().position(|(old, _)| old == tool_use_id)
                {
                    *tool_use_id = renamed.remove(at).1;
                }
            }
        }
    }
}

/// Keeps a tool call only when the next message answers it, and a result only when it answers
/// a call of the message before (the first result per call).
fn pair_calls_and_results(messages: &[Message]) -> Vec<Message> {
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let content = match m.role {
            Role::Assistant => {
                let next = messages.get(i + 1);
                m.content
                    .iter()
                    .filter(|b| match b {
                        ContentBlock::ToolUse { id, .. } => {
                            next.is_some_and(|n| results_of(n).any(|r| r == id))
                        }
                        _ => true,
                    })
                    .cloned()
                    .collect()
            }
            Role::User => {
                let asked: Vec<&str> = match i.checked_sub(1).map(|p| &messages[p]) {
                    Some(prev) if prev.role == Role::Assistant => calls_of(prev).collect(),
                    _ => Vec::new(),
                };
                let mut seen = HashSet::new();
                m.content
                    .iter()
                    .filter(|b| match b {
                        ContentBlock::ToolResult { tool_use_id, .. } => {
                            asked.contains(&tool_use_id.as_str())
                                && seen.insert(tool_use_id.as_str())
                        }
                        _ => true,
                    })
                    .cloned()
                    .collect()
            }
        };
        out.push(Message {
            role: m.role,
            content,
        });
    }
    out
}

fn calls_of(m: &Message) -> impl Iterator<Item = &str> {
    m.content.iter().filter_map(|b| match b {
        ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
        _ => None,
    })
}

fn results_of(m: &Message) -> impl Iterator<Item = &str> {
    m.content.iter().filter_map(|b| match b {
        ContentBlock::ToolResult { tool_use_id, .. } => Some(tool_use_id.as_str()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn user(text: &str) -> Message {
        Message::user_text(text)
    }

    fn assistant(blocks: Vec<ContentBlock>) -> Message {
        Message {
            role: Role::Assistant,
            content: blocks,
        }
    }

    fn text(t: &str) -> ContentBlock {
        ContentBlock::Text { text: t.into() }
    }

    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "read_file".into(),
            input: json!({}),
            unparsed: None,
        }
    }

    fn result(id: &str) -> ContentBlock {
        ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: "ok".into(),
            is_error: false,
        }
    }

    fn results(ids: &[&str]) -> Message {
        Message {
            role: Role::User,
            content: ids.iter().map(|id| result(id)).collect(),
        }
    }

    #[test]
    fn a_well_formed_tool_round_passes() {
        let msgs = vec![
            user("go"),
            assistant(vec![text("reading"), call("a"), call("b")]),
            results(&["a", "b"]),
            assistant(vec![text("done")]),
        ];
        assert_eq!(check_messages(&msgs), Ok(()));
        assert_eq!(
            normalize(&msgs),
            msgs,
            "a valid conversation is left as it is"
        );
    }

    #[test]
    fn each_rule_is_checked() {
        let cases: Vec<(Vec<Message>, &str)> = vec![
            (vec![], "no messages"),
            (vec![assistant(vec![text("hi")])], "first message"),
            (vec![user("a"), user("b")], "in a row"),
            (
                vec![user("a"), assistant(vec![]), user("b")],
                "has no content",
            ),
            (vec![user("")], "whitespace-only text block"),
            (
                vec![user("a"), assistant(vec![call("x")])],
                "in the last message is unanswered",
            ),
            (
                vec![user("a"), assistant(vec![call("x")]), user("b")],
                "has no tool_result",
            ),
            (
                vec![user("a"), assistant(vec![call("x y")]), results(&["x y"])],
                "is not 1-40",
            ),
            (
                vec![
                    user("a"),
                    assistant(vec![call("x"), call("x")]),
                    results(&["x"]),
                ],
                "used twice",
            ),
            (
                vec![user("a"), assistant(vec![call("x")]), results(&["x", "x"])],
                "answered twice",
            ),
            (
                vec![user("a"), assistant(vec![call("x")]), results(&["y", "x"])],
                "answers no tool_use",
            ),
            (
                vec![
                    user("a"),
                    assistant(vec![call("x")]),
                    Message {
                        role: Role::User,
                        content: vec![text("note"), result("x")],
                    },
                ],
                "after other content",
            ),
        ];
        for (msgs, want) in cases {
            let err = check_messages(&msgs).expect_err(want);
            assert!(err.to_string().contains(want), "{err} (wanted {want})");
        }
        // The optional final assistant message may be empty (a prefill or a paused turn).
        assert_eq!(check_messages(&[user("a"), assistant(vec![])]), Ok(()));
    }

    #[test]
    fn empty_replies_vanish_and_neighbours_merge() {
        // An empty max_tokens reply followed by the cut-off notice; two empty pause_turns.
        let msgs = vec![
            user("go"),
            assistant(vec![]),
            user("you were cut off"),
            assistant(vec![text("")]),
            assistant(vec![]),
        ];
        let got = normalize(&msgs);
        assert_eq!(
            got,
            vec![Message {
                role: Role::User,
                content: vec![text("go"), text("you were cut off")],
            }]
        );
        assert_eq!(check_messages(&got), Ok(()));
    }

    #[test]
    fn unanswered_calls_of_a_cut_off_reply_are_dropped() {
        // A max_tokens reply kept a complete call it never ran; the notice follows.
        let msgs = vec![
            user("go"),
            assistant(vec![text("let me"), call("a")]),
            user("you were cut off"),
            assistant(vec![call("b")]), // only a call, never answered: vanishes whole
            user("again"),
        ];
        let got = normalize(&msgs);
        assert_eq!(
            got,
            vec![
                user("go"),
                assistant(vec![text("let me")]),
                Message {
                    role: Role::User,
                    content: vec![text("you were cut off"), text("again")],
                },
            ]
        );
        assert_eq!(check_messages(&got), Ok(()));
    }

    #[test]
    fn a_reminder_after_results_joins_them_and_a_paused_turn_continues() {
        let msgs = vec![
            user("go"),
            assistant(vec![call("a")]),
            results(&["a"]),
            user("[woken up]"),
            assistant(vec![text("part one")]),
            assistant(vec![text("part two")]),
        ];
        let got = normalize(&msgs);
        assert_eq!(got.len(), 4);
        assert_eq!(got[2].content, vec![result("a"), text("[woken up]")]);
        assert_eq!(got[3].content, vec![text("part one"), text("part two")]);
        assert_eq!(check_messages(&got), Ok(()));
    }

    #[test]
    fn stray_and_repeated_results_are_dropped() {
        let msgs = vec![
            user("go"),
            assistant(vec![call("a")]),
            results(&["a", "a", "zzz"]),
        ];
        let got = normalize(&msgs);
        assert_eq!(got[2], results(&["a"]));
        assert_eq!(check_messages(&got), Ok(()));
    }

    #[test]
    fn call_ids_are_checked_for_shape() {
        assert!(valid_call_id("toolu_01A-b"));
        assert!(!valid_call_id(""));
        assert!(!valid_call_id("call 1"));
        assert!(valid_call_id(&"x".repeat(40)));
        assert!(!valid_call_id(&"x".repeat(41)));
    }

    #[test]
    fn an_old_log_with_one_id_in_every_turn_gets_fresh_ids_with_their_results() {
        // What an OpenAI-compatible server without ids left in logs of older versions.
        let msgs = vec![
            user("go"),
            assistant(vec![call("call_0")]),
            results(&["call_0"]),
            assistant(vec![call("call_0"), call("bad id")]),
            results(&["call_0", "bad id"]),
            assistant(vec![text("done")]),
        ];
        let got = normalize(&msgs);
        assert_eq!(check_messages(&got), Ok(()), "{got:?}");
        assert_eq!(got[1], msgs[1], "the first use keeps its id");
        assert_eq!(got[3].content, vec![call("ns_m3_0"), call("ns_m3_1")]);
        assert_eq!(got[4], results(&["ns_m3_0", "ns_m3_1"]));
        assert_eq!(normalize(&got), got, "normalising again changes nothing");
    }

    #[test]
    fn reasoning_stays_in_place_and_reasoning_alone_is_dropped() {
        let thinking = ContentBlock::Thinking {
            thinking: "plan".into(),
            signature: "sig".into(),
        };
        let reasoning = ContentBlock::Reasoning {
            text: "hm".into(),
            field: "reasoning_content".into(),
            details: None,
        };
        let msgs = vec![
            user("go"),
            assistant(vec![thinking.clone(), text("reading"), call("a")]),
            results(&["a"]),
            assistant(vec![reasoning.clone()]), // cut off while reasoning
            user("you were cut off"),
        ];
        let got = normalize(&msgs);
        assert_eq!(check_messages(&got), Ok(()), "{got:?}");
        assert_eq!(
            got[1], msgs[1],
            "thinking is kept before the call, unchanged"
        );
        assert_eq!(got.len(), 3);
        assert_eq!(got[2].content.len(), 2, "the reasoning-only reply is gone");
        let err = check_messages(&[Message {
            role: Role::User,
            content: vec![reasoning],
        }])
        .unwrap_err();
        assert!(
            err.to_string().contains("reasoning in a user message"),
            "{err}"
        );
    }

    #[test]
    fn whitespace_only_text_is_dropped_and_refused() {
        let got = normalize(&[user("go"), assistant(vec![text(" \n")]), user("on")]);
        assert_eq!(got.len(), 1);
        let err = check_messages(&[user("  ")]).unwrap_err();
        assert!(err.to_string().contains("whitespace-only"), "{err}");
    }
}
