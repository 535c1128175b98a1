//! Turning the blocks a provider sent into the content of a [`crate::ModelResponse`], with one
//! rule for tool calls that every provider shares.
//!
//! Guarantees:
//! - A tool call is returned only with complete, parsed JSON input.
//! - In a `max_tokens` reply, the tool call the model was writing when the limit hit is
//!   **dropped** (not marked): that is the trailing block if it is a tool call, and any tool
//!   call whose input did not arrive complete. Complete calls before it and all text are kept,
//!   and `stop_reason` stays `MaxTokens`, so the loop never runs a cut-off call and the
//!   conversation stays valid to send again (no `tool_use` without its input).
//! - In any other reply, a tool call whose input is not valid JSON is a
//!   [`ProviderError::Malformed`] error.
//! - Empty text blocks are dropped (the Messages API rejects them when sent back).

use serde_json::Value;

use crate::message::{ContentBlock, StopReason};
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
}

/// Applies the rules in the module doc.
pub(crate) fn finalize(
    drafts: Vec<Draft>,
    stop: &StopReason,
) -> Result<Vec<ContentBlock>, ProviderError> {
    let cut_off = *stop == StopReason::MaxTokens;
    let last = drafts.len().saturating_sub(1);
    let mut out = Vec::with_capacity(drafts.len());
    for (i, draft) in drafts.into_iter().enumerate() {
        let trailing = i == last;
        match draft {
            Draft::Text(text) => {
                if !text.is_empty() {
                    out.push(ContentBlock::Text { text });
                }
            }
            Draft::ParsedTool { id, name, input } => {
                if cut_off && trailing {
                    dropped(&name);
                    continue;
                }
                out.push(ContentBlock::ToolUse { id, name, input });
            }
            Draft::Tool {
                id,
                name,
                raw,
                complete,
            } => {
                let parsed = if raw.trim().is_empty() {
                    Ok(Value::Object(Default::default()))
                } else {
                    serde_json::from_str::<Value>(&raw)
                };
                match parsed {
                    Ok(input) if complete && !(cut_off && trailing) => {
                        out.push(ContentBlock::ToolUse { id, name, input });
                    }
                    _ if cut_off => dropped(&name),
                    Ok(_) => {
                        return Err(ProviderError::Malformed(format!(
                            "tool call {name} ({id}) was never finished"
                        )));
                    }
                    Err(e) => {
                        return Err(ProviderError::Malformed(format!(
                            "tool call {name} ({id}) has input that is not valid JSON ({e}): {}",
                            crate::http::truncate(&raw, 200)
                        )));
                    }
                }
            }
        }
    }
    Ok(out)
}

fn dropped(name: &str) {
    tracing::warn!(
        tool = name,
        "dropped a tool call cut off by max_tokens; it will not run"
    );
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
    fn broken_input_outside_max_tokens_is_malformed() {
        let err = finalize(vec![tool("{\"p\":", true)], &StopReason::ToolUse).unwrap_err();
        assert!(matches!(err, ProviderError::Malformed(m) if m.contains("not valid JSON")));
        let err = finalize(vec![tool("{}", false)], &StopReason::ToolUse).unwrap_err();
        assert!(matches!(err, ProviderError::Malformed(m) if m.contains("never finished")));
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
    }
}
