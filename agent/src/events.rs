//! The write-ahead log of a run: every event the loop appends, as it is stored (`type` plus
//! a JSON payload). The model's context is a projection of these events
//! ([`crate::state::RunState`]); a tool call is logged as `tool_started` — committed before
//! the tool runs — and `tool_result` after.
//!
//! A run's end is named by [`EndStatus`], whose wire names are the run statuses the store
//! writes (`succeeded`, `failed`, …); a name this version does not know still decodes, as
//! [`EndStatus::Other`], so an event already in a database always loads. A stored event that
//! cannot be read is an [`EventError`].

use std::fmt;

use nightshift_llm::{Message, StopReason, Usage};
use nightshift_store::RunStatus;
use nightshift_tools::{ToolClass, ToolDefinition};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A stored event [`RunEvent::parse`] cannot read.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// The payload is not JSON of a known event type (or its fields are wrong).
    #[error("event of type {kind} does not parse: {source}")]
    BadPayload {
        kind: String,
        #[source]
        source: serde_json::Error,
    },
    /// The payload is an event of another type than the one it is stored as.
    #[error("event stored as {stored} holds a {payload} payload")]
    KindMismatch {
        stored: String,
        payload: &'static str,
    },
}

/// One event of a run's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    /// The run began: the agent definition's hash (resumes compare it).
    RunStarted { agent: String, agent_hash: String },
    /// A user-side message: the prompt, or a reminder appended later (never edits history).
    UserMessage { message: Message },
    /// A complete model reply, with the usage it cost and the model that answered.
    AssistantMessage {
        message: Message,
        stop_reason: StopReason,
        usage: Usage,
        model: String,
        cost_usd: f64,
        /// How long the call took, from the loop's request to the whole reply, retries and
        /// fallbacks included (absent in events written before it was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        latency_ms: Option<u64>,
        /// Failed attempts at the answering model before this reply.
        #[serde(default, skip_serializing_if = "is_zero")]
        retries: u32,
    },
    /// A tool call is about to run. Committed before the tool starts.
    ToolStarted {
        call_id: String,
        name: String,
        input: serde_json::Value,
        durability: ToolClass,
        idempotency_key: String,
    },
    /// A tool call's result (real, or synthesised by recovery).
    ToolResult {
        call_id: String,
        content: String,
        is_error: bool,
        /// True when recovery wrote this result for an interrupted side-effect call.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        interrupted: bool,
    },
    /// The conversation was compacted: `summary` replaces every message before
    /// `kept_from` (an index into the message list at the time). The summary call's usage
    /// counts toward the run's budgets.
    Compacted {
        summary: String,
        kept_from: usize,
        usage: Usage,
        cost_usd: f64,
    },
    /// The agent set a wakeup (logged just before the call's result): once the turn's tool
    /// calls are done, the run parks until `due_at`.
    WakeupScheduled {
        call_id: String,
        due_at: i64,
        reason: String,
        scheduled_at: i64,
    },
    /// A resume job delivered its reason (a wakeup, a message): `reminder` is appended to
    /// the conversation as a user message. At most once per job.
    Resumed { job_id: i64, reminder: String },
    /// A message sent to the run (a webhook `resume` route) was taken into its log: by its own
    /// resume job, or by the job already running the run (`job_id` is the message's job,
    /// which ended in the same transaction). `text` goes to the model as a user message at
    /// once, or, while tool calls lack results, right after their results. Once per message.
    MessageReceived { job_id: i64, text: String },
    /// A background task of the run ended: `reminder` (how, and its last output) is
    /// appended to the conversation as a user message. Once per task.
    TaskEnded {
        task_id: String,
        status: String,
        reminder: String,
    },
    /// A call needs a human's approval: the run parks until a decision or `expires_at`.
    ApprovalRequested {
        call_id: String,
        name: String,
        input_hash: String,
        expires_at: i64,
    },
    /// The decision on a call, applied once: approved calls run, denied ones get a `denied`
    /// result. `by` is `operator` or `timeout`.
    ApprovalDecided {
        call_id: String,
        approved: bool,
        reason: Option<String>,
        by: String,
    },
    /// The model could not be reached (retries used up, or its circuit is open): the job
    /// waits until `until` without spending an attempt. `error` is the provider's real last
    /// error (status, type, message); `since` is when the outage began for this run.
    ModelUnavailable {
        error: String,
        since: i64,
        until: i64,
    },
    /// The run's workspace was prepared before its first model call: `repo` checked out at
    /// `commit` (what `ref` named then), then the `setup` commands run. Every later job of the
    /// run, on any daemon, checks out this same commit.
    WorkspacePrepared {
        repo: String,
        #[serde(rename = "ref")]
        git_ref: String,
        commit: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        setup: Vec<String>,
    },
    /// The run is a fork of `parent` (its first own event; the parent's events before it
    /// are the fork's history, read through the parent's rows): it goes on from the parent's
    /// state after `from_turn` model calls, with `tool_results` replacing the recorded
    /// results of those calls, `model` (when set) answering from now on and `prompt` (when
    /// set) appended as a user message, on the parent's workspace commit. Usage and cost
    /// start again from zero: the parent paid for what they share.
    Forked {
        parent: String,
        from_turn: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        tool_results: std::collections::BTreeMap<String, String>,
        /// The commit the parent's workspace was checked out at, when the shared history
        /// ends before it was (a fork from turn 0): the fork checks out the same one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workspace_commit: Option<String>,
    },
    /// What MCP server `server` offered the run, as listed (at the run's first model call,
    /// and again when the server said its list changed): its tools as the model sees them,
    /// sorted, each with its class, and those left out with why. Every later request, on any
    /// daemon, offers these same tools byte for byte, and an interrupted call's class is read
    /// from here without starting the server.
    McpToolsListed {
        server: String,
        tools: Vec<ToolDefinition>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        left_out: Vec<LeftOutTool>,
    },
    /// The run ended (its final state is also on the run row).
    Finished {
        status: EndStatus,
        detail: Option<String>,
    },
}

/// A tool an MCP server listed that is not offered, and why (a name no provider takes, a
/// schema that is not an object's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOutTool {
    pub tool: String,
    pub reason: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// How a run ended, as `finished` events and checkpoints spell it: the terminal
/// [`RunStatus`] names, plus any other name an older event may hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EndStatus {
    Succeeded,
    Failed,
    Cancelled,
    /// Replaced by a newer run with the same concurrency key (ends the loop like a cancel).
    Superseded,
    BudgetExhausted,
    MaxRounds,
    /// A name this version does not know, kept as it was written; it ends the run as failed.
    Other(String),
}

impl EndStatus {
    /// The known statuses, in the order of [`RunStatus::ALL`].
    pub const KNOWN: [EndStatus; 6] = [
        EndStatus::Succeeded,
        EndStatus::Failed,
        EndStatus::Cancelled,
        EndStatus::BudgetExhausted,
        EndStatus::MaxRounds,
        EndStatus::Superseded,
    ];

    /// The wire name (the run status name for a known status).
    pub fn as_str(&self) -> &str {
        match self {
            EndStatus::Other(name) => name,
            known => known.run_status().as_str(),
        }
    }

    /// The status of the run this end leaves behind; an unknown name counts as failed.
    pub fn run_status(&self) -> RunStatus {
        match self {
            EndStatus::Succeeded => RunStatus::Succeeded,
            EndStatus::Failed | EndStatus::Other(_) => RunStatus::Failed,
            EndStatus::Cancelled => RunStatus::Cancelled,
            EndStatus::Superseded => RunStatus::Superseded,
            EndStatus::BudgetExhausted => RunStatus::BudgetExhausted,
            EndStatus::MaxRounds => RunStatus::MaxRounds,
        }
    }

    /// The status named `name`: a known one, or [`EndStatus::Other`].
    pub fn named(name: &str) -> EndStatus {
        EndStatus::KNOWN
            .into_iter()
            .find(|s| s.as_str() == name)
            .unwrap_or_else(|| EndStatus::Other(name.to_string()))
    }
}

impl fmt::Display for EndStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for EndStatus {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EndStatus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(|name| EndStatus::named(&name))
    }
}

impl RunEvent {
    /// The `type` column value.
    pub fn kind(&self) -> &'static str {
        match self {
            RunEvent::RunStarted { .. } => "run_started",
            RunEvent::UserMessage { .. } => "user_message",
            RunEvent::AssistantMessage { .. } => "assistant_message",
            RunEvent::ToolStarted { .. } => "tool_started",
            RunEvent::ToolResult { .. } => "tool_result",
            RunEvent::Compacted { .. } => "compacted",
            RunEvent::WakeupScheduled { .. } => "wakeup_scheduled",
            RunEvent::Resumed { .. } => "resumed",
            RunEvent::MessageReceived { .. } => "message_received",
            RunEvent::TaskEnded { .. } => "task_ended",
            RunEvent::ApprovalRequested { .. } => "approval_requested",
            RunEvent::ApprovalDecided { .. } => "approval_decided",
            RunEvent::ModelUnavailable { .. } => "model_unavailable",
            RunEvent::WorkspacePrepared { .. } => "workspace_prepared",
            RunEvent::Forked { .. } => "forked",
            RunEvent::McpToolsListed { .. } => "mcp_tools_listed",
            RunEvent::Finished { .. } => "finished",
        }
    }

    /// The payload column value: the event as JSON (with its `type`).
    pub fn payload(&self) -> String {
        serde_json::to_string(self).expect("events serialise")
    }

    /// Parses a stored event; `kind` must agree with the payload's `type`.
    pub fn parse(kind: &str, payload: &str) -> Result<RunEvent, EventError> {
        let event: RunEvent =
            nightshift_llm::json::from_str(payload).map_err(|source| EventError::BadPayload {
                kind: kind.to_string(),
                source,
            })?;
        if event.kind() != kind {
            return Err(EventError::KindMismatch {
                stored: kind.to_string(),
                payload: event.kind(),
            });
        }
        Ok(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_their_stored_form() {
        let events = vec![
            RunEvent::UserMessage {
                message: Message::user_text("hi"),
            },
            RunEvent::ToolStarted {
                call_id: "toolu_1".into(),
                name: "run_command".into(),
                input: serde_json::json!({"command": "ls"}),
                durability: ToolClass::SideEffect,
                idempotency_key: "run:toolu_1".into(),
            },
            RunEvent::ToolResult {
                call_id: "toolu_1".into(),
                content: "a\nb".into(),
                is_error: false,
                interrupted: false,
            },
            // Plain numbers in fields, and numbers a model wrote that no f64 or u64 holds.
            RunEvent::AssistantMessage {
                message: Message::user_text("ok"),
                stop_reason: StopReason::ToolUse,
                usage: Usage {
                    input_tokens: 12,
                    output_tokens: 3,
                    cache_creation_input_tokens: 0,
                    cache_read_input_tokens: 9,
                },
                model: "m".into(),
                cost_usd: 0.001234,
                latency_ms: Some(1500),
                retries: 2,
            },
            RunEvent::ToolStarted {
                call_id: "toolu_2".into(),
                name: "charge".into(),
                input: serde_json::from_str(
                    r#"{"id":123456789012345678901234567890,"neg":-98765432109876543210,"x":0.1000000000000000000001}"#,
                )
                .unwrap(),
                durability: ToolClass::SideEffect,
                idempotency_key: "run:toolu_2".into(),
            },
            RunEvent::WakeupScheduled {
                call_id: "toolu_3".into(),
                due_at: 1_700_000_000_000,
                reason: "later".into(),
                scheduled_at: -1,
            },
        ];
        for e in events {
            let payload = e.payload();
            let back = RunEvent::parse(e.kind(), &payload).unwrap();
            assert_eq!(back, e);
            assert_eq!(back.payload(), payload, "stored bytes are stable");
        }
        let started = RunEvent::parse(
            "tool_started",
            r#"{"type":"tool_started","call_id":"c","name":"n","input":{"id":123456789012345678901234567890},"durability":"side_effect","idempotency_key":"k"}"#,
        )
        .unwrap();
        let RunEvent::ToolStarted { input, .. } = started else {
            panic!("{started:?}")
        };
        assert_eq!(input["id"].to_string(), "123456789012345678901234567890");
        let wrong = RunEvent::parse(
            "tool_result",
            &RunEvent::Compacted {
                summary: String::new(),
                kept_from: 0,
                usage: Usage::default(),
                cost_usd: 0.0,
            }
            .payload(),
        );
        let wrong = wrong.unwrap_err();
        assert!(
            matches!(&wrong, EventError::KindMismatch { stored, payload: "compacted" } if stored == "tool_result"),
            "{wrong:?}"
        );
        assert!(wrong.to_string().contains("holds a compacted payload"));
        let unknown = RunEvent::parse("teleported", r#"{"type":"teleported"}"#).unwrap_err();
        assert!(
            matches!(unknown, EventError::BadPayload { .. }),
            "{unknown:?}"
        );
        assert!(
            unknown
                .to_string()
                .starts_with("event of type teleported does not parse: "),
            "{unknown}"
        );
        assert!(std::error::Error::source(&unknown).is_some());
    }

    #[test]
    fn end_statuses_keep_the_run_status_names_on_the_wire() {
        for status in EndStatus::KNOWN {
            let name = status.run_status().as_str();
            let event = RunEvent::Finished {
                status: status.clone(),
                detail: None,
            };
            assert_eq!(
                event.payload(),
                format!(r#"{{"type":"finished","status":"{name}","detail":null}}"#)
            );
            assert_eq!(
                RunEvent::parse("finished", &event.payload()).unwrap(),
                event
            );
        }
        let known: Vec<_> = EndStatus::KNOWN.iter().map(EndStatus::run_status).collect();
        let terminal: Vec<_> = RunStatus::ALL
            .iter()
            .copied()
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(known, terminal, "one end status per terminal run status");
    }

    #[test]
    fn a_finished_event_with_an_unknown_status_still_loads_and_counts_as_failed() {
        let stored = r#"{"type":"finished","status":"exploded","detail":"boom"}"#;
        let event = RunEvent::parse("finished", stored).unwrap();
        let RunEvent::Finished { status, detail } = &event else {
            panic!("{event:?}");
        };
        assert_eq!(*status, EndStatus::Other("exploded".into()));
        assert_eq!(status.run_status(), RunStatus::Failed);
        assert_eq!(detail.as_deref(), Some("boom"));
        assert_eq!(
            event.payload(),
            stored,
            "the name is written back as it was"
        );
    }
}
