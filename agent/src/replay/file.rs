//! The replay file: one run, self-contained — its events as the store holds them (already
//! redacted), and the request of each model call the loop made, as `nightshift runs export`
//! recorded them by running the loop against those events.
//!
//! The file is versioned ([`FORMAT`], [`VERSION`]); [`Recording::parse`] reads the format
//! and version before anything else, so a file of another version, or not a replay file at
//! all, is an error that says which, and what to do.

use nightshift_llm::ModelRequest;
use serde::{Deserialize, Serialize};

use crate::events::RunEvent;

/// The `format` field of every replay file.
pub const FORMAT: &str = "nightshift-replay";

/// The version of the file this build writes and reads.
pub const VERSION: u32 = 1;

/// One run, recorded for replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recording {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`] when written by this build.
    pub version: u32,
    /// The Nightshift version that exported it.
    pub exported_by: String,
    /// When it was exported, epoch milliseconds.
    pub exported_at: i64,
    pub run_id: String,
    pub agent: String,
    /// The hash of the agent's definition the requests were recorded with (the exporter's
    /// config).
    pub agent_hash: String,
    /// The hash the run started with (its `run_started` event), when it has one.
    #[serde(default)]
    pub run_agent_hash: Option<String>,
    /// The run's input (its prompt).
    pub input: String,
    /// The run's events, in order, as stored.
    pub events: Vec<RecordedEvent>,
    /// Every model call the loop made, in order, with the request it built.
    pub model_calls: Vec<RecordedCall>,
    /// Tool calls the loop made (answered from the events' results).
    pub tool_calls: usize,
}

/// One stored event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedEvent {
    pub seq: i64,
    /// When it was stored, epoch milliseconds.
    pub at: i64,
    pub event: RunEvent,
}

/// What a model call was for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallPurpose {
    /// A turn of the conversation (answered by an `assistant_message`).
    Turn,
    /// The summary of a compaction (answered by a `compacted` event).
    Summary,
    /// A call the model did not answer (a `model_unavailable` event).
    Unavailable,
    /// The call a run that did not succeed ended at: the model failed it, or the run was
    /// cancelled during it (no event answers it; its `finished` event says how).
    Unanswered,
}

/// One model call and the request the loop built for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordedCall {
    /// The turn the call was made in (1 is the first model call).
    pub turn: u64,
    pub purpose: CallPurpose,
    pub request: ModelRequest,
}

/// Why a file is not a replay file this build can read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("the file is not JSON ({0}); a replay file is what `nightshift runs export` writes")]
    NotJson(serde_json::Error),
    #[error(
        "the file is not a Nightshift replay file (its \"format\" is {found}, not \
         \"{FORMAT}\"); export the run with `nightshift runs export RUN_ID > FILE`"
    )]
    NotAReplayFile { found: String },
    #[error(
        "the file is a replay file of version {found}, and this Nightshift ({}) reads version \
         {VERSION}; export the run again with this version (`nightshift runs export RUN_ID`)",
        env!("CARGO_PKG_VERSION")
    )]
    Version { found: String },
    #[error("the replay file is damaged or incomplete: {0}; export the run again")]
    Malformed(serde_json::Error),
}

impl Recording {
    /// Reads a replay file: the format and version first, then the rest.
    pub fn parse(text: &str) -> Result<Recording, FileError> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(FileError::NotJson)?;
        let shown = |v: Option<&serde_json::Value>| v.map_or("missing".into(), |v| v.to_string());
        if value.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
            return Err(FileError::NotAReplayFile {
                found: shown(value.get("format")),
            });
        }
        if value.get("version").and_then(|v| v.as_u64()) != Some(u64::from(VERSION)) {
            return Err(FileError::Version {
                found: shown(value.get("version")),
            });
        }
        nightshift_llm::json::from_value(value).map_err(FileError::Malformed)
    }

    /// The file's text: pretty JSON, ending with a newline.
    pub fn to_text(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a recording serialises");
        text.push('\n');
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recording() -> Recording {
        Recording {
            format: FORMAT.into(),
            version: VERSION,
            exported_by: "test".into(),
            exported_at: 1,
            run_id: "r".into(),
            agent: "a".into(),
            agent_hash: "h".into(),
            run_agent_hash: Some("h".into()),
            input: "go".into(),
            events: vec![RecordedEvent {
                seq: 1,
                at: 5,
                event: RunEvent::RunStarted {
                    agent: "a".into(),
                    agent_hash: "h".into(),
                },
            }],
            model_calls: Vec::new(),
            tool_calls: 0,
        }
    }

    #[test]
    fn a_recording_reads_back_as_written() {
        let r = recording();
        assert_eq!(Recording::parse(&r.to_text()).unwrap(), r);
    }

    #[test]
    fn another_version_another_format_and_broken_json_are_told_apart() {
        let mut v = serde_json::to_value(recording()).unwrap();
        v["version"] = 2.into();
        let e = Recording::parse(&v.to_string()).unwrap_err();
        assert!(matches!(e, FileError::Version { .. }), "{e}");
        assert!(e.to_string().contains("version 2"), "{e}");
        v["format"] = "something-else".into();
        let e = Recording::parse(&v.to_string()).unwrap_err();
        assert!(
            e.to_string().contains("not a Nightshift replay file"),
            "{e}"
        );
        let e = Recording::parse("{\"format\": ").unwrap_err();
        assert!(matches!(e, FileError::NotJson(_)), "{e}");
        let mut v = serde_json::to_value(recording()).unwrap();
        v["events"] = "no".into();
        let e = Recording::parse(&v.to_string()).unwrap_err();
        assert!(matches!(e, FileError::Malformed(_)), "{e}");
    }
}
