//! A provider that replays model turns from a script, for the demo and for tests.
//!
//! The script is a JSON array of turns:
//!
//! ```json
//! [
//!   {"content": [{"type": "text", "text": "Let me look."},
//!                {"type": "tool_use", "id": "toolu_1", "name": "read_file",
//!                 "input": {"path": "README.md"}}],
//!    "stop_reason": "tool_use",
//!    "usage": {"input_tokens": 120, "output_tokens": 30},
//!    "delay_ms": 200},
//!   {"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn"}
//! ]
//! ```
//!
//! `content` uses the canonical [`ContentBlock`] shape; `usage` and `delay_ms` are optional;
//! unknown fields are errors.
//!
//! Guarantees:
//! - The turn answered is the number of assistant messages already in the request (0 for a
//!   fresh conversation), so a conversation resumed after a crash gets the same next turn.
//! - A script that runs out, or a file that cannot be read or parsed, is a clear error naming
//!   the file and what is wrong (with line and column for bad JSON).
//! - Every request received is recorded as its exact serialised bytes ([`ScriptedProvider::requests`]),
//!   including ones that failed; `delay_ms` waits are cancellable.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::message::{
    ContentBlock, ModelRequest, ModelResponse, RateLimits, Role, StopReason, Usage,
};
use crate::provider::{Provider, ProviderError, with_cancel};

/// One model turn of a script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedTurn {
    pub content: Vec<ContentBlock>,
    pub stop_reason: StopReason,
    #[serde(default)]
    pub usage: Usage,
    /// Wait this long before answering (to make a slow model).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delay_ms: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl ScriptedTurn {
    /// A turn with one text block that ends the conversation.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![ContentBlock::Text { text: text.into() }],
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
            delay_ms: 0,
        }
    }

    /// A turn that calls one tool.
    pub fn tool_use(id: &str, name: &str, input: serde_json::Value) -> Self {
        Self {
            content: vec![ContentBlock::ToolUse {
                id: id.into(),
                name: name.into(),
                input,
                unparsed: None,
            }],
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
            delay_ms: 0,
        }
    }
}

/// Why a script file could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    #[error("cannot read script {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("script {path} is not a valid list of turns (line {line}, column {column}): {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("script {path} has no turns")]
    Empty { path: PathBuf },
}

/// Replays [`ScriptedTurn`]s.
#[derive(Debug)]
pub struct ScriptedProvider {
    source_name: String,
    turns: Vec<ScriptedTurn>,
    requests: Mutex<Vec<Vec<u8>>>,
}

impl ScriptedProvider {
    /// Loads the script at `path`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ScriptError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let turns: Vec<ScriptedTurn> =
            serde_json::from_str(&text).map_err(|e| ScriptError::Parse {
                path: path.to_path_buf(),
                line: e.line(),
                column: e.column(),
                message: e.to_string(),
            })?;
        if turns.is_empty() {
            return Err(ScriptError::Empty {
                path: path.to_path_buf(),
            });
        }
        Ok(Self::named(path.display().to_string(), turns))
    }

    /// A script held in memory (tests).
    pub fn new(turns: Vec<ScriptedTurn>) -> Self {
        Self::named("(in memory)".to_string(), turns)
    }

    fn named(source_name: String, turns: Vec<ScriptedTurn>) -> Self {
        Self {
            source_name,
            turns,
            requests: Mutex::new(Vec::new()),
        }
    }

    /// The turns of the script.
    pub fn turns(&self) -> &[ScriptedTurn] {
        &self.turns
    }

    /// Every request received so far, as the exact bytes `serde_json` gives for it.
    pub fn requests(&self) -> Vec<Vec<u8>> {
        self.requests.lock().expect("not poisoned").clone()
    }

    /// The exact bytes recorded for `req` (its canonical serialisation).
    pub fn request_bytes(req: &ModelRequest) -> Vec<u8> {
        let value = serde_json::to_value(req).expect("a request serialises");
        crate::http::canonical_bytes(&value)
    }

    async fn answer(&self, req: &ModelRequest) -> Result<ModelResponse, ProviderError> {
        self.requests
            .lock()
            .expect("not poisoned")
            .push(Self::request_bytes(req));
        let index = req
            .messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count();
        let turn = self.turns.get(index).ok_or_else(|| ProviderError::Script {
            source_name: self.source_name.clone(),
            message: format!(
                "ran out of turns: the request already has {index} assistant message(s) but the \
                 script has only {} turn(s)",
                self.turns.len()
            ),
        })?;
        if turn.delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(turn.delay_ms)).await;
        }
        Ok(ModelResponse {
            id: format!("scripted-{index}"),
            model: req.model.clone(),
            content: turn.content.clone(),
            stop_reason: turn.stop_reason.clone(),
            usage: turn.usage,
            rate_limits: RateLimits::default(),
            retries: 0,
        })
    }
}

impl Provider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    fn send<'a>(
        &'a self,
        req: &'a ModelRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ModelResponse, ProviderError>> {
        Box::pin(with_cancel(cancel, self.answer(req)))
    }
}
