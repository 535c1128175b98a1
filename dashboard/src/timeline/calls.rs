//! Tool calls and approvals on the timeline: one item per call, opened by its start and
//! closed by its result; one item per approval, pending until its decision.
//!
//! What it guarantees: a call started again with no result in between (recovery re-ran it)
//! stays one item, marked `re-run on recovery`; a result with no start says exactly why the
//! call was never made (`denied` when its approval was denied, `refused by the fence` for the
//! loop's own notice, else `bad input`), never guessed from the result's words; an approval
//! carries what is decided on ([`Decision`]: the call's input and the text of the message
//! that made it, the run's prompt).

use nightshift_agent::ToolClass;
use nightshift_agent::runtime::REFUSED_NOTICE;

use super::build::Builder;
use super::{Stamp, name_of};
use crate::decision::Decision;
use crate::format;

/// The mark of a call recovery started again after a crash.
const RERUN: &str = "re-run on recovery";

impl Builder<'_> {
    pub(super) fn tool_started(
        &mut self,
        s: Stamp,
        call_id: String,
        name: String,
        input: &serde_json::Value,
        durability: &ToolClass,
    ) {
        // Started again with no result in between: recovery re-ran it (a read-only or
        // idempotent call interrupted by a crash). One item, marked.
        if let Some(idx) = self
            .find("tool_call", &call_id)
            .filter(|&i| self.items[i].result.is_none())
        {
            let it = &mut self.items[idx];
            if !it.marks.iter().any(|m| m == RERUN) {
                it.marks.push(RERUN.into());
            }
            it.last_seq = s.seq;
            return;
        }
        let mut it = s.item("tool_call", name).fact("class", name_of(durability));
        it.body = Some(serde_json::to_string_pretty(input).unwrap_or_default());
        it.call_id = Some(call_id);
        it.marks.push("running".into());
        self.items.push(it);
    }

    pub(super) fn tool_result(
        &mut self,
        s: Stamp,
        call_id: String,
        content: String,
        is_error: bool,
        interrupted: bool,
    ) {
        let Some(idx) = self.find("tool_call", &call_id) else {
            self.call_not_made(s, call_id, content);
            return;
        };
        let it = &mut self.items[idx];
        it.marks.retain(|m| m != "running");
        if interrupted {
            it.marks.push("interrupted / outcome unknown".into());
        }
        if is_error {
            it.marks.push("error".into());
        }
        it.facts
            .push(("took".into(), format::duration(s.at - it.at)));
        it.artifact = crate::files::artifact_named(&content);
        it.result = Some(content);
        it.last_seq = s.seq;
    }

    /// A result with no start: the call was never made. Why is known exactly: its approval
    /// was denied, the fence refused it (the loop's own notice), or its input broke the
    /// tool's schema.
    fn call_not_made(&mut self, s: Stamp, call_id: String, content: String) {
        let denied = self.items.iter().any(|i| {
            i.kind == "approval"
                && i.call_id.as_deref() == Some(call_id.as_str())
                && i.marks.iter().any(|m| m == "denied")
        });
        let why = if denied {
            "denied"
        } else if content == REFUSED_NOTICE {
            "refused by the fence"
        } else {
            "bad input"
        };
        let mut it = s.item("tool_call", "tool call not made");
        it.call_id = Some(call_id);
        it.marks.push(why.into());
        it.result = Some(content);
        self.items.push(it);
    }

    pub(super) fn approval_requested(
        &mut self,
        s: Stamp,
        call_id: String,
        name: String,
        expires_at: i64,
    ) {
        let mut it = s
            .item("approval", format!("approval: {name}"))
            .fact("expires", format::utc(expires_at));
        let (input, model_text) = self.calls.get(&call_id).cloned().unwrap_or_default();
        it.body = (!input.is_empty()).then(|| input.clone());
        it.decision = Some(Decision {
            tool: name,
            input,
            prompt: self.run.input.clone(),
            model_text,
        });
        it.call_id = Some(call_id);
        it.pending = true;
        it.marks.push("pending".into());
        self.items.push(it);
    }

    pub(super) fn approval_decided(
        &mut self,
        s: Stamp,
        call_id: &str,
        approved: bool,
        reason: Option<String>,
        by: String,
    ) {
        let Some(idx) = self.find("approval", call_id) else {
            return;
        };
        let it = &mut self.items[idx];
        it.pending = false;
        it.marks.retain(|m| m != "pending");
        it.marks
            .push(if approved { "approved" } else { "denied" }.into());
        it.facts.push(("by".into(), by));
        if let Some(r) = reason {
            it.facts.push(("reason".into(), r));
        }
        it.last_seq = s.seq;
    }
}
