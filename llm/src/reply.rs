//! Turning the blocks a provider sent into the content of a [`crate::ModelResponse`], with one
//! rule for tool calls that every provider shares.
//!
//! Guarantees:
//! - A tool call is returned only with complete, parsed JSON input.
//! - In a cut-off reply (`max_tokens`, or `model_context_window_exceeded`: see
//!   [`StopReason::is_cut_off`]), the tool call the model was writing when it stopped is
//!   **dropped** (not marked): that is the trailing block if it is a tool call, and any tool
//!   call whose input did not arrive complete. Complete calls before it and all text are kept,
//!   and `stop_reason` stays as sent, so the loop never runs a cut-off call and the
//!   conversation stays valid to send again (no `tool_use` without its input).
//! - In any other reply, a tool call that never finished is a [`ProviderError::Malformed`]
//!   error (retryable: the next attempt may be whole). One whose input is complete but not
//!   valid JSON is kept with `input: {}` and the arguments as written in `unparsed`: the
//!   model wrote them, so another sample would cost as much as telling it, and the loop
//!   answers such a call with an error the model can correct instead of running it.
//! - Reasoning is kept verbatim and in place: Anthropic `thinking` (text and signature, even
//!   when the text is empty) and `redacted_thinking` blocks, an OpenAI-compatible server's
//!   `reasoning_content`. Only a thinking block cut off before it closed (so without its
//!   signature) in a cut-off reply is dropped: it could not be sent back.
//! - A reply that says `end_turn` or `stop_sequence` but carries complete tool calls is
//!   `ToolUse` ([`settle_stop`]): the calls are there, so the loop must answer them.
//! - Tool-call ids are passed through as the provider sent them; a missing id is left empty
//!   (`""`), never invented, and duplicates are kept. Ids in a reply are not unique: the
//!   caller assigns its own (see [`crate::ContentBlock::ToolUse`]).
//! - Empty text blocks are dropped (the Messages API rejects them when sent back).

use serde_json::Value;

use crate::message::{ContentBlock, ModelResponse, RateLimits, StopReason, Usage};
use crate::provider::ProviderError;

/// A block as received, before the tool-call rule is applied.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Draft {
    Text(String),
    Tool {
        id: String,
        name: String,
        /// The raw JSON text of the input as received.
        raw: String,
        /// Whether the provider said the block was finished.
        complete: bool,
    },
    /// A tool call whose input already arrived parsed (non-streaming replies).
    ParsedTool {
        id: String,
        name: String,
        input: Value,
    },
    /// Anthropic thinking; `complete` once its block closed.
    Thinking {
        thinking: String,
        signature: String,
        complete: bool,
    },
    RedactedThinking(String),
    /// An OpenAI-compatible server's reasoning, and the field it came in.
    Reasoning {
        text: String,
        field: String,
        details: Option<Value>,
    },
}

/// Applies the rules in the module doc.
pub(crate) fn finalize(
    drafts: Vec<Draft>,
    stop: &StopReason,
) -> Result<Vec<ContentBlock>, ProviderError> {
    let last = drafts.len().saturating_sub(1);
    let mut out = Vec::with_capacity(drafts.len());
    for (i, draft) in drafts.into_iter().enumerate() {
        if let Some(block) = finish(draft, stop, i == last)? {
            out.push(block);
        }
    }
    Ok(out)
}

/// The block `draft` becomes (`None`: dropped); `trailing` when it is the reply's last.
fn finish(
    draft: Draft,
    stop: &StopReason,
    trailing: bool,
) -> Result<Option<ContentBlock>, ProviderError> {
    let cut_off = stop.is_cut_off();
    Ok(match draft {
        Draft::Text(text) => (!text.is_empty()).then_some(ContentBlock::Text { text }),
        Draft::ParsedTool { id, name, input } => {
            if cut_off && trailing {
                dropped(&name, stop);
                return Ok(None);
            }
            Some(tool_use(id, name, input))
        }
        Draft::Thinking {
            thinking,
            signature,
            complete,
        } => {
            if cut_off && !complete {
                tracing::warn!(?stop, "dropped a thinking block cut off before it closed");
                return Ok(None);
            }
            Some(ContentBlock::Thinking {
                thinking,
                signature,
            })
        }
        Draft::RedactedThinking(data) => Some(ContentBlock::RedactedThinking { data }),
        Draft::Reasoning {
            text,
            field,
            details,
        } => Some(ContentBlock::Reasoning {
            text,
            field,
            details,
        }),
        Draft::Tool {
            id,
            name,
            raw,
            complete,
        } => finish_tool(id, name, raw, complete, stop, trailing)?,
    })
}

/// A streamed tool call: run when its arguments parse and it was finished (and not the
/// trailing call of a cut-off reply); dropped when the reply was cut off; an error when it
/// was never finished otherwise; answered with an error (its raw arguments kept) when they
/// are not JSON.
fn finish_tool(
    id: String,
    name: String,
    raw: String,
    complete: bool,
    stop: &StopReason,
    trailing: bool,
) -> Result<Option<ContentBlock>, ProviderError> {
    let cut_off = stop.is_cut_off();
    let parsed = if raw.trim().is_empty() {
        Ok(Value::Object(Default::default()))
    } else {
        serde_json::from_str::<Value>(&raw)
    };
    Ok(match parsed {
        Ok(input) if complete && !(cut_off && trailing) => Some(tool_use(id, name, input)),
        _ if cut_off => {
            dropped(&name, stop);
            None
        }
        _ if !complete => {
            return Err(ProviderError::Malformed(format!(
                "tool call {name} ({}) was never finished",
                shown_id(&id)
            )));
        }
        Ok(input) => Some(tool_use(id, name, input)),
        Err(e) => {
            tracing::warn!(tool = %name, error = %e,
                "the model wrote tool-call arguments that are not valid JSON; the call is answered with an error");
            Some(ContentBlock::ToolUse {
                id,
                name,
                input: Value::Object(Default::default()),
                unparsed: Some(raw),
            })
        }
    })
}

fn tool_use(id: String, name: String, input: Value) -> ContentBlock {
    ContentBlock::ToolUse {
        id,
        name,
        input,
        unparsed: None,
    }
}

fn shown_id(id: &str) -> &str {
    if id.is_empty() { "no id" } else { id }
}

fn dropped(name: &str, stop: &StopReason) {
    tracing::warn!(
        tool = name,
        ?stop,
        "dropped a tool call cut off before it was complete; it will not run"
    );
}

/// The stop reason the loop should act on, given the finished content: `end_turn` or
/// `stop_sequence` with complete tool calls in it is `ToolUse`.
pub(crate) fn settle_stop(stop: StopReason, content: &[ContentBlock]) -> StopReason {
    let has_calls = content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolUse { .. }));
    match stop {
        StopReason::EndTurn | StopReason::StopSequence if has_calls => StopReason::ToolUse,
        other => other,
    }
}

/// The reply made of `drafts`: the rules in the module doc applied ([`finalize`]) and the stop
/// reason settled on the content ([`settle_stop`]). Rate limits are the caller's to add.
pub(crate) fn response(
    id: String,
    model: String,
    drafts: Vec<Draft>,
    stop: StopReason,
    usage: Usage,
) -> Result<ModelResponse, ProviderError> {
    let content = finalize(drafts, &stop)?;
    Ok(ModelResponse {
        id,
        model,
        stop_reason: settle_stop(stop, &content),
        content,
        usage,
        rate_limits: RateLimits::default(),
        retries: 0,
    })
}

/// Parses a provider's stop reason (`end_turn`, `tool_use`, …; unknown ones kept verbatim).
pub(crate) fn stop_reason(s: &str) -> StopReason {
    serde_json::from_value(Value::String(s.to_string()))
        .unwrap_or_else(|_| StopReason::Other(s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(raw: &str, complete: bool) -> Draft {
        Draft::Tool {
            id: "t1".into(),
            name: "read".into(),
            raw: raw.into(),
            complete,
        }
    }

    #[test]
    fn complete_tool_calls_are_parsed_and_empty_input_is_an_empty_object() {
        let got = finalize(
            vec![
                Draft::Text("hi".into()),
                tool(r#"{"p":1}"#, true),
                tool("", true),
            ],
            &StopReason::ToolUse,
        )
        .unwrap();
        assert_eq!(got.len(), 3);
        assert!(matches!(&got[1], ContentBlock::ToolUse { input, .. } if *input == json!({"p":1})));
        assert!(matches!(&got[2], ContentBlock::ToolUse { input, .. } if *input == json!({})));
    }

    #[test]
    fn max_tokens_drops_the_cut_off_call_and_keeps_the_rest() {
        let got = finalize(
            vec![
                Draft::Text("a".into()),
                tool(r#"{"p":1}"#, true),
                tool(r#"{"p":"unfinis"#, true),
            ],
            &StopReason::MaxTokens,
        )
        .unwrap();
        assert_eq!(got.len(), 2);
        assert!(matches!(&got[1], ContentBlock::ToolUse { input, .. } if *input == json!({"p":1})));

        let trailing_parsed = finalize(
            vec![Draft::ParsedTool {
                id: "t".into(),
                name: "n".into(),
                input: json!({}),
            }],
            &StopReason::MaxTokens,
        )
        .unwrap();
        assert!(trailing_parsed.is_empty());
    }

    #[test]
    fn a_call_that_never_finished_is_malformed_and_invalid_json_is_kept_unparsed() {
        let got = finalize(vec![tool("{\"p\":", true)], &StopReason::ToolUse).unwrap();
        assert_eq!(
            got,
            vec![ContentBlock::ToolUse {
                id: "t1".into(),
                name: "read".into(),
                input: json!({}),
                unparsed: Some("{\"p\":".into()),
            }],
            "the arguments as written, for the loop to answer with an error"
        );
        let err = finalize(vec![tool("{}", false)], &StopReason::ToolUse).unwrap_err();
        assert!(matches!(err, ProviderError::Malformed(m) if m.contains("never finished")));
    }

    #[test]
    fn reasoning_is_kept_in_place_and_an_unclosed_thinking_block_only_in_a_cut_off_reply_goes() {
        let thinking = |complete| Draft::Thinking {
            thinking: String::new(),
            signature: "sig".into(),
            complete,
        };
        let drafts = vec![
            thinking(true),
            Draft::RedactedThinking("opaque".into()),
            Draft::Reasoning {
                text: "hm".into(),
                field: "reasoning".into(),
                details: None,
            },
            Draft::Text("a".into()),
        ];
        let got = finalize(drafts.clone(), &StopReason::EndTurn).unwrap();
        assert_eq!(got.len(), 4);
        assert_eq!(
            got[0],
            ContentBlock::Thinking {
                thinking: String::new(),
                signature: "sig".into()
            },
            "an empty thinking text with its signature is kept"
        );
        assert!(got[..3].iter().all(ContentBlock::is_reasoning));
        let cut = finalize(
            vec![thinking(true), thinking(false)],
            &StopReason::MaxTokens,
        )
        .unwrap();
        assert_eq!(
            cut.len(),
            1,
            "the unclosed one has no signature to send back"
        );
    }

    #[test]
    fn empty_text_is_dropped_and_stop_reasons_parse() {
        assert!(
            finalize(vec![Draft::Text(String::new())], &StopReason::EndTurn)
                .unwrap()
                .is_empty()
        );
        assert_eq!(stop_reason("pause_turn"), StopReason::PauseTurn);
        assert_eq!(stop_reason("new_one"), StopReason::Other("new_one".into()));
        let full = stop_reason("model_context_window_exceeded");
        assert_eq!(full, StopReason::ModelContextWindowExceeded);
        assert!(full.means_context_full() && full.is_cut_off());
        assert!(StopReason::MaxTokens.is_cut_off());
        assert!(!StopReason::MaxTokens.means_context_full());
        assert!(!StopReason::Other("new_one".into()).means_context_full());
        assert_eq!(
            serde_json::to_string(&full).unwrap(),
            "\"model_context_window_exceeded\""
        );
    }

    #[test]
    fn a_full_context_window_drops_the_call_being_written_like_max_tokens() {
        let got = finalize(
            vec![
                tool(r#"{"p":1}"#, true),
                Draft::Text("and now".into()),
                tool(r#"{"p":"#, false),
            ],
            &StopReason::ModelContextWindowExceeded,
        )
        .unwrap();
        assert_eq!(got.len(), 2);
        assert!(matches!(&got[0], ContentBlock::ToolUse { input, .. } if *input == json!({"p":1})));
        assert!(matches!(&got[1], ContentBlock::Text { .. }));
    }

    #[test]
    fn end_turn_with_complete_tool_calls_is_tool_use() {
        let call = ContentBlock::ToolUse {
            id: String::new(),
            name: "n".into(),
            input: json!({}),
            unparsed: None,
        };
        let text = ContentBlock::Text { text: "t".into() };
        let with_call = [text.clone(), call];
        assert_eq!(
            settle_stop(StopReason::EndTurn, &with_call),
            StopReason::ToolUse
        );
        assert_eq!(
            settle_stop(StopReason::StopSequence, &with_call),
            StopReason::ToolUse
        );
        assert_eq!(
            settle_stop(StopReason::EndTurn, &[text]),
            StopReason::EndTurn
        );
        assert_eq!(
            settle_stop(StopReason::MaxTokens, &with_call),
            StopReason::MaxTokens
        );
    }

    #[test]
    fn missing_and_duplicate_ids_are_kept_as_sent() {
        let got = finalize(
            vec![
                Draft::Tool {
                    id: String::new(),
                    name: "a".into(),
                    raw: "{}".into(),
                    complete: true,
                },
                Draft::ParsedTool {
                    id: "dup".into(),
                    name: "b".into(),
                    input: json!({}),
                },
                Draft::ParsedTool {
                    id: "dup".into(),
                    name: "c".into(),
                    input: json!({}),
                },
            ],
            &StopReason::ToolUse,
        )
        .unwrap();
        let ids: Vec<&str> = got
            .iter()
            .map(|b| match b {
                ContentBlock::ToolUse { id, .. } => id.as_str(),
                _ => panic!("only calls"),
            })
            .collect();
        assert_eq!(ids, ["", "dup", "dup"]);
        let err = finalize(
            vec![Draft::Tool {
                id: String::new(),
                name: "a".into(),
                raw: "{".into(),
                complete: false,
            }],
            &StopReason::EndTurn,
        )
        .unwrap_err();
        assert!(err.to_string().contains("tool call a (no id)"), "{err}");
        assert!(err.is_retryable());
    }
}
