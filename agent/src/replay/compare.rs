//! Which part of a model request differs from the recorded one — pure, so it is tested
//! without a store or a model.
//!
//! The parts are compared in the order a person changes them: the model, the system prompt,
//! the tools (by name, then by description and schema), the messages (the first index that
//! differs, or a conversation shorter or longer than the recorded one), then `max_tokens`,
//! the stop sequences, thinking and effort. Two requests whose parts are all equal but whose
//! canonical bytes differ (it should not happen) are still reported, as `request bytes`.

use std::fmt;

use nightshift_llm::{ModelRequest, ScriptedProvider};
use serde::Serialize;

/// How many characters of each side an excerpt shows.
const EXCERPT_CHARS: usize = 120;

/// The part of a request that differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "part", rename_all = "snake_case")]
pub enum Part {
    Model,
    SystemPrompt,
    /// The tool list: a tool added, removed or renamed.
    ToolNames,
    /// The description or the input schema of the tool of this name.
    Tool {
        name: String,
    },
    /// The message at this index (0 is the first, normally the prompt).
    Message {
        index: usize,
    },
    /// One conversation is a prefix of the other: the message counts differ.
    MessageCount,
    MaxTokens,
    StopSequences,
    Thinking,
    Effort,
    /// Every part above is equal, but the canonical bytes are not.
    RequestBytes,
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Part::Model => f.write_str("the model"),
            Part::SystemPrompt => f.write_str("the system prompt"),
            Part::ToolNames => f.write_str("the list of tools"),
            Part::Tool { name } => write!(f, "the tool {name} (its description or schema)"),
            Part::Message { index } => write!(f, "message {index} of the conversation"),
            Part::MessageCount => f.write_str("the number of messages"),
            Part::MaxTokens => f.write_str("max_tokens"),
            Part::StopSequences => f.write_str("the stop sequences"),
            Part::Thinking => f.write_str("the thinking setting"),
            Part::Effort => f.write_str("the effort setting"),
            Part::RequestBytes => f.write_str("the request's bytes"),
        }
    }
}

/// A difference between a recorded request and the one the loop built again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    #[serde(flatten)]
    pub part: Part,
    /// The recorded side around the first differing character.
    pub recorded: String,
    /// The replayed side around the same place.
    pub replayed: String,
}

/// The first part of `replayed` that differs from `recorded`, or `None` when the two
/// requests are the same bytes.
pub fn compare(recorded: &ModelRequest, replayed: &ModelRequest) -> Option<Difference> {
    if ScriptedProvider::request_bytes(recorded) == ScriptedProvider::request_bytes(replayed) {
        return None;
    }
    let differs = |part: Part, a: String, b: String| -> Option<Difference> {
        (a != b).then(|| excerpts(part, &a, &b))
    };
    differs(Part::Model, recorded.model.clone(), replayed.model.clone())
        .or_else(|| {
            differs(
                Part::SystemPrompt,
                recorded.system.clone(),
                replayed.system.clone(),
            )
        })
        .or_else(|| tools(recorded, replayed))
        .or_else(|| messages(recorded, replayed))
        .or_else(|| {
            differs(
                Part::MaxTokens,
                recorded.max_tokens.to_string(),
                replayed.max_tokens.to_string(),
            )
        })
        .or_else(|| {
            differs(
                Part::StopSequences,
                json(&recorded.stop_sequences),
                json(&replayed.stop_sequences),
            )
        })
        .or_else(|| {
            differs(
                Part::Thinking,
                json(&recorded.thinking),
                json(&replayed.thinking),
            )
        })
        .or_else(|| differs(Part::Effort, json(&recorded.effort), json(&replayed.effort)))
        .or_else(|| {
            let (a, b) = (
                String::from_utf8_lossy(&ScriptedProvider::request_bytes(recorded)).into_owned(),
                String::from_utf8_lossy(&ScriptedProvider::request_bytes(replayed)).into_owned(),
            );
            Some(excerpts(Part::RequestBytes, &a, &b))
        })
}

/// A part as JSON text, for comparison and excerpts.
fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn tools(recorded: &ModelRequest, replayed: &ModelRequest) -> Option<Difference> {
    let names = |r: &ModelRequest| {
        r.tools
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (a, b) = (names(recorded), names(replayed));
    if a != b {
        return Some(excerpts(Part::ToolNames, &a, &b));
    }
    recorded
        .tools
        .iter()
        .zip(&replayed.tools)
        .find_map(|(a, b)| {
            let (ja, jb) = (
                serde_json::to_string(a).unwrap_or_default(),
                serde_json::to_string(b).unwrap_or_default(),
            );
            (ja != jb).then(|| {
                excerpts(
                    Part::Tool {
                        name: a.name.clone(),
                    },
                    &ja,
                    &jb,
                )
            })
        })
}

fn messages(recorded: &ModelRequest, replayed: &ModelRequest) -> Option<Difference> {
    let text = |m: &nightshift_llm::Message| serde_json::to_string(m).unwrap_or_default();
    for (index, (a, b)) in recorded.messages.iter().zip(&replayed.messages).enumerate() {
        let (ja, jb) = (text(a), text(b));
        if ja != jb {
            return Some(excerpts(Part::Message { index }, &ja, &jb));
        }
    }
    let (n, m) = (recorded.messages.len(), replayed.messages.len());
    (n != m).then(|| Difference {
        part: Part::MessageCount,
        recorded: format!("{n} messages"),
        replayed: format!("{m} messages"),
    })
}

/// The two sides around their first differing character, each at most [`EXCERPT_CHARS`].
fn excerpts(part: Part, a: &str, b: &str) -> Difference {
    let first = a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count();
    let start = first.saturating_sub(EXCERPT_CHARS / 3);
    let cut = |s: &str| {
        let total = s.chars().count();
        let shown: String = s.chars().skip(start).take(EXCERPT_CHARS).collect();
        let before = if start > 0 { "…" } else { "" };
        let after = if start + EXCERPT_CHARS < total {
            "…"
        } else {
            ""
        };
        format!("{before}{shown}{after}")
    };
    Difference {
        part,
        recorded: cut(a),
        replayed: cut(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nightshift_llm::{Message, ToolSpec};
    use serde_json::json;

    fn request() -> ModelRequest {
        ModelRequest {
            model: "m".into(),
            system: "You review pull requests. Be brief.".into(),
            messages: vec![Message::user_text("Review PR 7.")],
            tools: vec![
                ToolSpec {
                    name: "read_file".into(),
                    description: "Reads a file.".into(),
                    input_schema: json!({"type": "object"}),
                },
                ToolSpec {
                    name: "run_command".into(),
                    description: "Runs a command.".into(),
                    input_schema: json!({"type": "object"}),
                },
            ],
            max_tokens: 1024,
            stop_sequences: Vec::new(),
            thinking: None,
            effort: None,
        }
    }

    #[test]
    fn the_same_request_has_no_difference() {
        assert_eq!(compare(&request(), &request()), None);
    }

    #[test]
    fn a_changed_system_prompt_is_named_with_an_excerpt_of_both_sides() {
        let mut changed = request();
        changed.system = "You review pull requests. Be thorough.".into();
        let d = compare(&request(), &changed).unwrap();
        assert_eq!(d.part, Part::SystemPrompt);
        assert!(d.recorded.contains("Be brief."), "{d:?}");
        assert!(d.replayed.contains("Be thorough."), "{d:?}");
        assert_eq!(d.part.to_string(), "the system prompt");
    }

    #[test]
    fn the_model_is_compared_before_anything_else() {
        let mut changed = request();
        changed.model = "other".into();
        changed.system = "x".into();
        assert_eq!(compare(&request(), &changed).unwrap().part, Part::Model);
    }

    #[test]
    fn a_removed_tool_is_a_change_of_the_list_and_a_changed_schema_names_the_tool() {
        let mut fewer = request();
        fewer.tools.pop();
        let d = compare(&request(), &fewer).unwrap();
        assert_eq!(d.part, Part::ToolNames);
        assert_eq!(d.recorded, "read_file, run_command");
        assert_eq!(d.replayed, "read_file");
        let mut schema = request();
        schema.tools[1].input_schema = json!({"type": "object", "required": ["command"]});
        assert_eq!(
            compare(&request(), &schema).unwrap().part,
            Part::Tool {
                name: "run_command".into()
            }
        );
    }

    #[test]
    fn the_first_differing_message_is_named_by_its_index() {
        let mut a = request();
        a.messages.push(Message::user_text("and then"));
        let mut b = a.clone();
        b.messages[1] = Message::user_text("and now");
        let d = compare(&a, &b).unwrap();
        assert_eq!(d.part, Part::Message { index: 1 });
        assert!(d.recorded.contains("and then") && d.replayed.contains("and now"));
        let d = compare(&a, &request()).unwrap();
        assert_eq!(d.part, Part::MessageCount);
        assert_eq!(
            (d.recorded.as_str(), d.replayed.as_str()),
            ("2 messages", "1 messages")
        );
    }

    #[test]
    fn max_tokens_thinking_and_stop_sequences_are_told_apart() {
        let mut b = request();
        b.max_tokens = 2048;
        assert_eq!(compare(&request(), &b).unwrap().part, Part::MaxTokens);
        let mut b = request();
        b.stop_sequences = vec!["END".into()];
        assert_eq!(compare(&request(), &b).unwrap().part, Part::StopSequences);
        let mut b = request();
        b.thinking = Some(nightshift_llm::Thinking {
            kind: nightshift_llm::ThinkingKind::Adaptive,
            budget_tokens: None,
        });
        assert_eq!(compare(&request(), &b).unwrap().part, Part::Thinking);
    }

    #[test]
    fn an_excerpt_starts_shortly_before_the_first_difference_of_a_long_text() {
        let mut a = request();
        a.system = format!("{}A tail", "x".repeat(1000));
        let mut b = request();
        b.system = format!("{}B tail", "x".repeat(1000));
        let d = compare(&a, &b).unwrap();
        assert!(
            d.recorded.starts_with('…') && d.recorded.contains("A tail"),
            "{d:?}"
        );
        assert!(d.replayed.contains("B tail"), "{d:?}");
        assert!(d.recorded.chars().count() <= EXCERPT_CHARS + 2);
    }
}
