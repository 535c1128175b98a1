//! What a run's event log can say that the state cannot take: [`StateError`], one variant per
//! contradiction, each naming the sequence number of the event that made it. Its `Display` is
//! the message a corrupt run fails with, so a variant's text never changes.

/// What about an event log [`RunState::apply`](super::RunState::apply) found impossible; each
/// names the event's sequence number. `Display` is the message a corrupt run fails with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Event `seq` does not come after the last event folded in.
    #[error("event {seq} is not after the state's last event {last}")]
    OutOfOrder { seq: i64, last: i64 },
    /// Event `seq` (a user message, resume or task reminder) came while calls lack results.
    #[error("event {seq}: {what} while {open} tool call(s) lack results")]
    CallsOpen {
        seq: i64,
        what: &'static str,
        open: usize,
    },
    /// A reply came while calls of the previous reply lack results.
    #[error("event {seq}: a reply while tool calls of the previous one lack results")]
    ReplyWhileCallsOpen { seq: i64 },
    /// Two calls of one reply share an id.
    #[error("event {seq}: two tool calls of one reply share the id {call_id}")]
    DuplicateCallId { seq: i64, call_id: String },
    /// The event names a call the newest reply did not make, or one already answered.
    #[error("event {seq}: tool call {call_id} is not pending")]
    NotPending { seq: i64, call_id: String },
    /// A message was taken into the run a second time.
    #[error("event {seq}: the message of job {job_id} was already taken")]
    MessageTakenTwice { seq: i64, job_id: i64 },
    /// A background task's end was reported a second time.
    #[error("event {seq}: task {task_id} was already reported")]
    TaskReportedTwice { seq: i64, task_id: String },
    /// A compaction keeps messages from past the end of the conversation.
    #[error("event {seq}: compaction keeps from message {kept_from} of {messages}")]
    CompactionPastEnd {
        seq: i64,
        kept_from: usize,
        messages: usize,
    },
    /// A fork replaces the result of a call its history does not show a result of (never
    /// made, still open, or compacted away).
    #[error(
        "event {seq}: the fork replaces the result of tool call {call_id}, which the conversation does not hold"
    )]
    ForkedResultMissing { seq: i64, call_id: String },
}
