//! The conversation on the timeline: the prompt and later messages, each model turn with
//! what it cost, and compactions.
//!
//! What it guarantees: the first user message is the `prompt`, every later one a `message`;
//! a model turn shows its stop reason, tokens (cache reads and writes apart), cost, and its
//! latency and retries when known, with the text it wrote; and every call the turn made is
//! remembered with its input and that text, for the approval the call may wait for.

use nightshift_agent::events::RunEvent;
use nightshift_llm::{ContentBlock, Message};

use super::build::Builder;
use super::{Stamp, name_of};
use crate::decision::text_of;
use crate::format;

impl Builder<'_> {
    pub(super) fn user_message(&mut self, s: Stamp, message: &Message) {
        let first = !self.items.iter().any(|i| i.kind == "prompt");
        let mut it = s.item("prompt", if first { "prompt" } else { "message" });
        it.body = Some(text_of(&message.content));
        self.items.push(it);
    }

    /// A model turn's item, from its `assistant_message` event (any other event is not a
    /// turn and changes nothing).
    pub(super) fn model_turn(&mut self, s: Stamp, event: RunEvent) {
        let RunEvent::AssistantMessage {
            message,
            stop_reason,
            usage,
            model,
            cost_usd,
            latency_ms,
            retries,
        } = event
        else {
            return;
        };
        let mut it = s
            .item("model_turn", format!("model turn: {model}"))
            .fact("stop", name_of(&stop_reason))
            .fact("in", format::tokens(usage.input_tokens as i64))
            .fact("out", format::tokens(usage.output_tokens as i64))
            .fact(
                "cache read",
                format::tokens(usage.cache_read_input_tokens as i64),
            )
            .fact(
                "cache write",
                format::tokens(usage.cache_creation_input_tokens as i64),
            )
            .fact("cost", format::money(cost_usd));
        if let Some(ms) = latency_ms {
            it = it.fact(
                "latency",
                format::duration(i64::try_from(ms).unwrap_or(i64::MAX)),
            );
        }
        if retries > 0 {
            it = it.fact("retries", retries.to_string());
        }
        let text = text_of(&message.content);
        for block in &message.content {
            if let ContentBlock::ToolUse { id, input, .. } = block {
                let input = serde_json::to_string_pretty(input).unwrap_or_default();
                self.calls.insert(id.clone(), (input, text.clone()));
            }
        }
        it.body = (!text.is_empty()).then_some(text);
        it.turn = Some(self.turns);
        self.turns += 1;
        self.items.push(it);
    }

    pub(super) fn message_received(&mut self, s: Stamp, job_id: i64, text: String) {
        let mut it = s.item("prompt", "message").fact("job", job_id.to_string());
        it.body = Some(text);
        self.items.push(it);
    }

    pub(super) fn compacted(&mut self, s: Stamp, summary: String, kept_from: usize, cost: f64) {
        let mut it = s
            .item("compaction", "compacted")
            .fact("kept from message", kept_from.to_string())
            .fact("cost", format::money(cost));
        it.body = Some(summary);
        self.items.push(it);
    }
}
