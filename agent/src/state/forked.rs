//! The fold of `forked`, a fork's first own event: the parent's state after the shared
//! history, changed as the fork asked. Recorded results it replaces must be in the
//! conversation the fork goes on from; nothing else of the history changes, so without
//! changes the fork's next request is byte for byte the parent's at that turn.

use std::collections::BTreeMap;

use nightshift_llm::{ContentBlock, Message, Usage};

use super::{RunState, StateError};

impl RunState {
    /// `forked`: replaces the results of `tool_results`' calls in the conversation, sets the
    /// model that answers from now on, appends `prompt` as a user message (after the open
    /// calls' results, when calls are open), starts usage and cost again from zero, and
    /// notes where the fork's own history begins.
    pub(super) fn take_fork(
        &mut self,
        seq: i64,
        prompt: Option<&str>,
        model: Option<&str>,
        tool_results: &BTreeMap<String, String>,
    ) -> Result<(), StateError> {
        for (call_id, content) in tool_results {
            if !replace_result(&mut self.messages, call_id, content) {
                return Err(StateError::ForkedResultMissing {
                    seq,
                    call_id: call_id.clone(),
                });
            }
        }
        if let Some(model) = model {
            self.model = Some(model.to_string());
        }
        if let Some(prompt) = prompt {
            if self.pending.is_empty() {
                self.wakeup = None;
                self.messages.push(Message::user_text(prompt.to_string()));
            } else {
                self.held_messages.push(prompt.to_string());
            }
        }
        self.usage = Usage::default();
        self.cost_usd = 0.0;
        self.outage = None;
        self.forked_at = Some(seq);
        Ok(())
    }
}

/// Puts `content` in place of call `call_id`'s result, as a result that is not an error;
/// false when the conversation holds no result of that call.
fn replace_result(messages: &mut [Message], call_id: &str, content: &str) -> bool {
    let block = messages.iter_mut().flat_map(|m| m.content.iter_mut()).find(
        |b| matches!(b, ContentBlock::ToolResult { tool_use_id, .. } if tool_use_id == call_id),
    );
    match block {
        Some(ContentBlock::ToolResult {
            content: c,
            is_error,
            ..
        }) => {
            *c = content.to_string();
            *is_error = false;
            true
        }
        _ => false,
    }
}
