//! The projected state of a run: what the loop needs to build the next request, folded from
//! the run's events in order. A checkpoint is this state at some sequence number; resume is
//! the newest checkpoint plus the events after it, folded with [`RunState::apply`]; an event
//! the state cannot take is a [`StateError`] naming its sequence number.
//!
//! The projection is deterministic: the same events give the same state and so the same
//! request bytes, whether the run was interrupted or not.
//!
//! The fold itself is in `state/fold.rs` (a fork's own first event in `state/forked.rs`), the records of the newest reply's tool round in
//! `state/pending.rs`, how a run ended in `state/ending.rs` and the errors in
//! `state/error.rs`; this module holds the state and what is read from it.

use nightshift_llm::{Message, Role, StopReason, Usage};
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

mod ending;
mod error;
mod fold;
mod forked;
mod pending;

pub use ending::Ending;
pub use error::StateError;
pub use pending::{AwaitingApproval, CallResult, Decision, PendingCall, StartedCall};

/// One item of the agent's todo list (kept by the `todo_write` tool).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Todo {
    pub content: String,
    pub status: String,
}

/// An outage of the model that the run is waiting out (set by `model_unavailable`, cleared
/// by the next reply).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outage {
    /// When the outage began for this run.
    pub since: i64,
    /// How many times the run has waited for it.
    pub deferrals: u32,
    /// The provider's real last error.
    pub last_error: String,
}

/// The projected state of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// The hash of the agent definition the run started with.
    pub agent_hash: Option<String>,
    /// The conversation as the model sees it.
    pub messages: Vec<Message>,
    /// Token totals over every model call of the run.
    pub usage: Usage,
    /// Cost over every model call, in USD.
    pub cost_usd: f64,
    /// Model calls made.
    pub turns: u64,
    /// Tool calls of the newest reply, while any lacks a result.
    pub pending: Vec<PendingCall>,
    /// The agent's todo list.
    pub todos: Vec<Todo>,
    /// Compactions so far.
    pub compactions: u64,
    /// The stop reason of the newest reply.
    pub last_stop: Option<StopReason>,
    /// How many replies in a row were cut off at `max_tokens`.
    pub max_tokens_streak: u32,
    /// Input tokens (incl. cache reads and writes) of the newest model call: how full the
    /// context window is.
    pub last_input_tokens: u64,
    /// Set when the run ended.
    pub ending: Option<Ending>,
    /// A wakeup the run has set and not yet woken from: the run parks until it once the
    /// turn's tool calls are done.
    #[serde(default)]
    pub wakeup: Option<crate::wakeup::ArmedWakeup>,
    /// Wakeups set so far (the per-run budget).
    #[serde(default)]
    pub wakeups_used: u32,
    /// The newest resume job whose reason was delivered (each is delivered once).
    #[serde(default)]
    pub last_resumed_job: Option<i64>,
    /// Messages taken into the run (by their resume jobs' ids): each is taken once.
    #[serde(default)]
    pub taken_messages: BTreeSet<i64>,
    /// Messages taken while tool calls lacked results: they follow the results.
    #[serde(default)]
    pub held_messages: Vec<String>,
    /// The call of the newest reply that waits for a human's decision.
    #[serde(default)]
    pub awaiting_approval: Option<AwaitingApproval>,
    /// Decisions on calls of the newest reply, by call id.
    #[serde(default)]
    pub decisions: std::collections::BTreeMap<String, Decision>,
    /// Background tasks whose ending the conversation holds.
    #[serde(default)]
    pub reported_tasks: std::collections::BTreeSet<String>,
    /// Every tool-call id used so far in the run: ids are unique within a run.
    #[serde(default)]
    pub call_ids: BTreeSet<String>,
    /// The model outage the run is waiting out, if any.
    #[serde(default)]
    pub outage: Option<Outage>,
    /// How many replies in a row stopped because the context window was full.
    #[serde(default)]
    pub context_full_streak: u32,
    /// The commit the run's workspace was checked out at, once it was prepared.
    #[serde(default)]
    pub workspace_commit: Option<String>,
    /// Whether the conversation was compacted since the newest reply.
    #[serde(default)]
    pub compacted_since_reply: bool,
    /// The model a fork was told to answer with, instead of the agent's own (set by
    /// `forked`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The sequence number of a fork's own first event (`forked`), when the run is a fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_at: Option<i64>,
    /// The tools each MCP server offered the run, by server, as last listed (set by
    /// `mcp_tools_listed`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub mcp_tools: std::collections::BTreeMap<String, Vec<nightshift_tools::ToolDefinition>>,
    /// The sequence number of the last event folded in.
    pub through_seq: i64,
}

impl RunState {
    /// Fills [`RunState::call_ids`] from the conversation for a state written before it
    /// existed (a checkpoint of an older version).
    pub(crate) fn seed_call_ids(&mut self) {
        if self.call_ids.is_empty() {
            let ids = self
                .messages
                .iter()
                .flat_map(|m| m.tool_uses())
                .map(|t| t.id);
            self.call_ids = ids.map(str::to_string).collect();
        }
    }

    /// The MCP tool `name` as the run's log lists it, if any.
    pub fn mcp_tool(&self, name: &str) -> Option<&nightshift_tools::ToolDefinition> {
        let (server, _) = nightshift_mcp::split_name(name)?;
        self.mcp_tools.get(server)?.iter().find(|t| t.name == name)
    }

    /// The text of the newest assistant message.
    pub fn final_text(&self) -> Option<String> {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == Role::Assistant)
            .map(Message::text)
    }
}
