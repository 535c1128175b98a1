//! Checkpoints: the projected [`RunState`] as a versioned JSON document, so a resume reads
//! one document plus the events after it.
//!
//! The envelope is `{"format": "nightshift-checkpoint", "version": N, "state": {…}}`. How it
//! is stored is the store's concern: its long strings (the conversation's text, which the
//! events hold already) are kept once, as the run's blobs, and the document comes back byte
//! for byte (`nightshift_store`, `content/`). The loader reads every version this binary has
//! ever written (older ones are migrated forward; the fixtures in `agent/tests/fixtures/`
//! hold it to that), refuses newer ones, and reports a corrupt document as an error naming
//! the run — never a crash.

use serde::{Deserialize, Serialize};

use crate::state::RunState;

/// The checkpoint format this binary writes.
pub const FORMAT_VERSION: i64 = 1;
const FORMAT_NAME: &str = "nightshift-checkpoint";

#[derive(Serialize)]
struct EnvelopeOut<'a> {
    format: &'static str,
    version: i64,
    state: &'a RunState,
}

#[derive(Deserialize)]
struct EnvelopeIn {
    format: String,
    version: i64,
    state: serde_json::Value,
}

/// Why a checkpoint could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CheckpointError {
    #[error("checkpoint is corrupt or truncated: {0}")]
    Corrupt(String),
    #[error(
        "checkpoint format version {found} is newer than this binary reads (up to \
         {FORMAT_VERSION}); upgrade nightshift to resume this run"
    )]
    TooNew { found: i64 },
}

/// `state` as a version-[`FORMAT_VERSION`] checkpoint document.
pub fn encode(state: &RunState) -> String {
    serde_json::to_string(&EnvelopeOut {
        format: FORMAT_NAME,
        version: FORMAT_VERSION,
        state,
    })
    .expect("state serialises")
}

/// Decodes a checkpoint document written by this or any earlier version.
pub fn decode(document: &str) -> Result<RunState, CheckpointError> {
    let envelope: EnvelopeIn = serde_json::from_str(document)
        .map_err(|e| CheckpointError::Corrupt(format!("envelope: {e}")))?;
    if envelope.format != FORMAT_NAME {
        return Err(CheckpointError::Corrupt(format!(
            "format is '{}', not '{FORMAT_NAME}'",
            envelope.format
        )));
    }
    let state = migrate(envelope.version, envelope.state)?;
    let mut state: RunState = nightshift_llm::json::from_value(state)
        .map_err(|e| CheckpointError::Corrupt(format!("state: {e}")))?;
    let mut pending = std::collections::BTreeSet::new();
    if let Some(dup) = state.pending.iter().find(|c| !pending.insert(&c.call_id)) {
        // Written by a version before ids were made unique: running its calls could answer
        // the wrong one, so the run fails instead of repeating work.
        return Err(CheckpointError::Corrupt(format!(
            "two pending tool calls share the id {}",
            dup.call_id
        )));
    }
    state.seed_call_ids();
    Ok(state)
}

/// Brings a state document of `version` up to [`FORMAT_VERSION`]. Each future format change
/// adds one step here (`1 => v1_to_v2(state)`, …) and a fixture of the old version in
/// `agent/tests/fixtures/`.
fn migrate(version: i64, state: serde_json::Value) -> Result<serde_json::Value, CheckpointError> {
    match version {
        v if v > FORMAT_VERSION => Err(CheckpointError::TooNew { found: v }),
        1 => Ok(state),
        v => Err(CheckpointError::Corrupt(format!(
            "unknown format version {v}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nightshift_llm::Message;

    #[test]
    fn round_trips_and_refuses_damage() {
        let mut state = RunState::default();
        state
            .messages
            .push(Message::user_text("hello ".repeat(100)));
        state.through_seq = 7;
        let doc = encode(&state);
        assert_eq!(decode(&doc).unwrap(), state);
        let truncated = &doc[..doc.len() / 2];
        assert!(matches!(
            decode(truncated),
            Err(CheckpointError::Corrupt(_))
        ));
        assert!(matches!(
            decode("not json"),
            Err(CheckpointError::Corrupt(_))
        ));
        let newer = r#"{"format":"nightshift-checkpoint","version":99,"state":{}}"#;
        assert_eq!(decode(newer), Err(CheckpointError::TooNew { found: 99 }));
    }

    /// Reasoning of both providers and a call whose arguments were not JSON survive the event
    /// log and a checkpoint byte for byte, so a resumed run sends them back as they came.
    #[test]
    fn reasoning_and_unparsed_arguments_round_trip_through_events_and_checkpoints() {
        use crate::events::RunEvent;
        use nightshift_llm::{ContentBlock, Role, StopReason, Usage};
        let reply = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "plan \"a\"\nü".into(),
                    signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3h+/==".into(),
                },
                ContentBlock::RedactedThinking {
                    data: "EmwKAhgBEgy3va==".into(),
                },
                ContentBlock::Reasoning {
                    text: "think".into(),
                    field: "reasoning".into(),
                    details: Some(serde_json::json!([{"id": "rs_1", "type": "reasoning.text"}])),
                },
                ContentBlock::ToolUse {
                    id: "toolu_1".into(),
                    name: "pay".into(),
                    input: serde_json::json!({}),
                    unparsed: Some("{\"amount\": 5,".into()),
                },
            ],
        };
        let event = RunEvent::AssistantMessage {
            message: reply.clone(),
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
            model: "m".into(),
            cost_usd: 0.25,
            latency_ms: None,
            retries: 0,
        };
        let parsed = RunEvent::parse(event.kind(), &event.payload()).unwrap();
        assert_eq!(parsed, event);
        assert_eq!(parsed.payload(), event.payload(), "the same bytes again");
        let mut state = RunState::default();
        state
            .apply(
                1,
                &RunEvent::UserMessage {
                    message: Message::user_text("go"),
                },
            )
            .unwrap();
        state.apply(2, &parsed).unwrap();
        assert_eq!(
            state.pending[0].unparsed.as_deref(),
            Some("{\"amount\": 5,"),
            "the call is known to be unparsed after a resume too"
        );
        let decoded = decode(&encode(&state)).unwrap();
        assert_eq!(decoded, state);
        assert_eq!(decoded.messages[1], reply);
        // A message logged before any of this (no `unparsed`, no reasoning) reads as before.
        let old = r#"{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"n","input":{"a":1}}]}"#;
        let m: Message = serde_json::from_str(old).unwrap();
        assert_eq!(serde_json::to_string(&m).unwrap(), old);
    }

    fn with_call(state: &mut RunState, id: &str) {
        state.messages.push(Message {
            role: nightshift_llm::Role::Assistant,
            content: vec![nightshift_llm::ContentBlock::ToolUse {
                id: id.into(),
                name: "send".into(),
                input: serde_json::json!({}),
                unparsed: None,
            }],
        });
    }

    #[test]
    fn an_older_checkpoint_gets_its_call_ids_from_the_conversation() {
        let mut state = RunState::default();
        state.messages.push(Message::user_text("go"));
        with_call(&mut state, "toolu_a");
        assert!(state.call_ids.is_empty(), "as an older version wrote it");
        let decoded = decode(&encode(&state)).unwrap();
        assert_eq!(decoded.call_ids, ["toolu_a".to_string()].into());
    }

    #[test]
    fn a_checkpoint_whose_pending_calls_share_an_id_is_refused() {
        let mut state = RunState::default();
        let call = crate::state::PendingCall {
            call_id: "dup".into(),
            name: "send".into(),
            input: serde_json::json!({}),
            started: None,
            result: None,
            unparsed: None,
        };
        state.pending = vec![call.clone(), call];
        let err = decode(&encode(&state)).unwrap_err();
        assert!(
            matches!(&err, CheckpointError::Corrupt(m) if m.contains("share the id dup")),
            "{err:?}"
        );
    }
}
