//! The tool round of the newest reply as the state holds it: each call the reply made
//! ([`PendingCall`]), what its `tool_started` and `tool_result` events recorded, the call that
//! waits for a human and the decisions taken. These are plain records: the fold
//! (`state/fold.rs`) is what fills them in, only from the log, so they always say what the log
//! says.

use nightshift_tools::ToolClass;
use serde::{Deserialize, Serialize};

/// A tool call of the newest assistant reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingCall {
    pub call_id: String,
    pub name: String,
    pub input: serde_json::Value,
    /// Set once its `tool_started` event is logged.
    pub started: Option<StartedCall>,
    /// Set once its `tool_result` event is logged.
    pub result: Option<CallResult>,
    /// The arguments as the model wrote them, when they were not valid JSON: the call is
    /// answered with an error, never run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unparsed: Option<String>,
}

/// What `tool_started` recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedCall {
    pub durability: ToolClass,
    pub idempotency_key: String,
}

/// What `tool_result` recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallResult {
    pub content: String,
    pub is_error: bool,
}

/// A call waiting for approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AwaitingApproval {
    pub call_id: String,
    pub expires_at: i64,
}

/// A decision on a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub approved: bool,
    pub reason: Option<String>,
}
