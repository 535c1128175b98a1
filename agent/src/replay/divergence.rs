//! What a replay found: the first place where the loop did not do what the recording did,
//! and the report a person reads.

use std::fmt;

use serde::Serialize;

use super::compare::Difference;
use super::file::CallPurpose;

/// The first place where the replayed loop left the recording.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Divergence {
    /// The model call (1 is the first) at or after which it happened.
    pub call: usize,
    /// The turn: 1 is the first model call of the conversation (a compaction's summary call
    /// belongs to the turn it precedes).
    pub turn: u64,
    pub kind: DivergenceKind,
}

/// How the loop left the recording.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DivergenceKind {
    /// The request differs from the recorded one.
    Request {
        purpose: CallPurpose,
        difference: Difference,
    },
    /// The loop asked the model more often than the recording has answers for.
    ExtraModelCall { recorded: usize },
    /// The loop asked for a turn where the recording has a compaction's summary, or the
    /// other way round.
    OtherCall {
        asked: CallPurpose,
        recorded: CallPurpose,
    },
    /// The loop called a tool the recording has no call (or no result) for.
    UnrecordedToolCall { name: String, call_id: String },
    /// The loop ended the run before using every recorded answer.
    EndedEarly {
        status: String,
        made: usize,
        recorded: usize,
    },
    /// The loop parked the run in another way than the recording (or where it did not).
    Parked { replayed: String, recorded: String },
    /// The recording has something replay does not reproduce.
    Unreplayable { what: String },
    /// The replay could not go on: the replayed job failed in a way that would be retried,
    /// the run did not end within the jobs the recording allows, or a recorded message could
    /// not be sent.
    Stopped { error: String },
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (call, turn) = (self.call, self.turn);
        match &self.kind {
            DivergenceKind::Request {
                purpose,
                difference,
            } => {
                let what = match purpose {
                    CallPurpose::Summary => "the compaction's summary request",
                    _ => "the request",
                };
                write!(
                    f,
                    "divergence at turn {turn} (model call {call}): {what} differs in {}\n  \
                     recorded: {}\n  replayed: {}",
                    difference.part, difference.recorded, difference.replayed
                )
            }
            DivergenceKind::ExtraModelCall { recorded } => write!(
                f,
                "divergence at turn {turn} (model call {call}): the loop asked the model again, \
                 but the recording has only {recorded} model call(s)"
            ),
            DivergenceKind::OtherCall { asked, recorded } => write!(
                f,
                "divergence at turn {turn} (model call {call}): the loop made a {} call where \
                 the recording has a {} call",
                purpose_name(*asked),
                purpose_name(*recorded)
            ),
            DivergenceKind::UnrecordedToolCall { name, call_id } => write!(
                f,
                "divergence at turn {turn}: the loop called the tool {name} (call {call_id}), \
                 which the recording has no result for; nothing was run"
            ),
            DivergenceKind::EndedEarly {
                status,
                made,
                recorded,
            } => write!(
                f,
                "divergence at turn {turn}: the loop ended the run ({status}) after {made} \
                 model call(s); the recording has {recorded}"
            ),
            DivergenceKind::Parked { replayed, recorded } => write!(
                f,
                "divergence at turn {turn}: the loop {replayed}, where the recording {recorded}"
            ),
            DivergenceKind::Unreplayable { what } => write!(
                f,
                "cannot replay past turn {turn}: the recording has {what}, which replay does \
                 not reproduce; the {} model call(s) before it matched",
                call.saturating_sub(1)
            ),
            DivergenceKind::Stopped { error } => {
                write!(f, "divergence at turn {turn}: the replay stopped: {error}")
            }
        }
    }
}

fn purpose_name(p: CallPurpose) -> &'static str {
    match p {
        CallPurpose::Turn => "conversation turn",
        CallPurpose::Summary => "compaction summary",
        CallPurpose::Unavailable => "model outage",
        CallPurpose::Unanswered => "final (unanswered)",
    }
}
