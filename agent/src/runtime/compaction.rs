//! Compaction: when the conversation no longer fits, all but its last few messages are
//! replaced with a summary the model writes. The summary request is a prefix of what was sent
//! before (tools and system prompt unchanged, so the prompt cache still hits) plus
//! [`SUMMARY_REQUEST`]; the kept part always starts at an assistant message, so it never
//! begins with results of calls that were summarised away. A summary that is empty, cut off
//! or not text ([`SummaryRejected`]) is never used: the run fails and the conversation is kept
//! as it was, rather than replaced with less than it held.

use nightshift_llm::{Message, ModelResponse, Role, StopReason, conversation};
use nightshift_store::RunEnd;
use nightshift_worker::JobOutcome;

use super::session::Session;
use super::{AgentRuntime, Stop, invalid_request};
use crate::events::RunEvent;
use crate::ports::ModelFailure;

/// What the model is asked when the conversation is compacted.
pub const SUMMARY_REQUEST: &str = "Summarise the conversation so far for your own later use: \
    the task, what has been done, what was found, the files and commands that matter, and what \
    remains. Be complete but brief; this summary will replace the earlier messages. Reply with \
    text only.";

/// Why a compaction's reply was not taken as the summary; `Display` is what the run's error
/// says after `compaction failed: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SummaryRejected {
    /// The reply ended normally but held no text.
    #[error("the model's summary was empty, so the conversation was kept as it was")]
    Empty,
    /// The reply stopped for another reason than ending (cut off, or calling a tool).
    #[error(
        "the model's summary reply stopped with {} instead of ending normally, so it was not \
         used and the conversation was kept as it was{}",
        .0.as_str(),
        cut_off_hint(.0)
    )]
    Stopped(StopReason),
}

/// What to change when a summary was cut off; nothing for another stop.
fn cut_off_hint(stop: &StopReason) -> &'static str {
    if stop.is_cut_off() {
        "; raise the agent's max_tokens or context.window_tokens, or lower context.keep_last"
    } else {
        ""
    }
}

/// The summary in a compaction's reply, accepted only when the reply ended normally
/// (`end_turn` or `stop_sequence`) with some text: a summary cut off by `max_tokens` or a full
/// context window, or a reply that called a tool instead, would replace the conversation
/// with less than it held.
pub fn accepted_summary(resp: &ModelResponse) -> Result<String, SummaryRejected> {
    let text = resp.message().text();
    match &resp.stop_reason {
        StopReason::EndTurn | StopReason::StopSequence if !text.trim().is_empty() => Ok(text),
        StopReason::EndTurn | StopReason::StopSequence => Err(SummaryRejected::Empty),
        other => Err(SummaryRejected::Stopped(other.clone())),
    }
}

impl AgentRuntime {
    /// Replaces all but the last few messages with a summary written by the model.
    pub(super) async fn compact(&self, s: &mut Session<'_>) -> Result<Option<JobOutcome>, Stop> {
        let keep = s.agent.config.context.keep_last;
        let n = s.state.messages.len();
        // Keep from an assistant message, so the kept part never starts with tool results
        // whose calls were summarised away.
        let kept_from = (n.saturating_sub(keep)..n)
            .find(|&i| s.state.messages[i].role == Role::Assistant)
            .unwrap_or(n);
        // The part to summarise — a prefix of what was sent before, tools and system prompt
        // unchanged, so the prompt cache still hits — plus the request for a summary at the
        // bottom. Never the kept part: after a reply that filled the window, the whole
        // conversation would not fit.
        let req = s.request_over(
            &s.state.messages[..kept_from],
            self.specs(s.agent, &s.state),
            Some(Message::user_text(SUMMARY_REQUEST)),
        );
        if let Err(violation) = conversation::check(&req) {
            return s.finish(invalid_request(violation)).await.map(Some);
        }
        match self.models.call(s.agent, &req, &s.ctx.cancel).await {
            Ok(resp) => {
                let summary = match accepted_summary(&resp) {
                    Ok(summary) => summary,
                    Err(why) => {
                        return s
                            .finish(RunEnd::Failed {
                                error: format!("compaction failed: {why}"),
                            })
                            .await
                            .map(Some);
                    }
                };
                let cost_usd = s.agent.prices.cost(&resp.model, &resp.usage);
                s.log(RunEvent::Compacted {
                    summary: format!("[Summary of the earlier conversation]\n{summary}"),
                    kept_from,
                    usage: resp.usage,
                    cost_usd,
                })
                .await?;
                s.record_progress().await?;
                s.checkpoint().await?;
                Ok(None)
            }
            Err(ModelFailure::Cancelled) => s.finish(RunEnd::Cancelled).await.map(Some),
            Err(ModelFailure::Unavailable { error, retry_in }) => {
                s.wait_out_outage(error, retry_in).await.map(Some)
            }
            Err(ModelFailure::Fatal(msg)) | Err(ModelFailure::ContextTooLong(msg)) => s
                .finish(RunEnd::Failed {
                    error: format!("compaction failed: {msg}"),
                })
                .await
                .map(Some),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nightshift_llm::ContentBlock;

    fn reply(text: &str, stop_reason: StopReason) -> ModelResponse {
        ModelResponse {
            id: "r".into(),
            model: "m".into(),
            content: vec![ContentBlock::Text { text: text.into() }],
            stop_reason,
            usage: Default::default(),
            rate_limits: Default::default(),
            retries: 0,
        }
    }

    #[test]
    fn only_a_summary_that_ended_normally_with_text_is_accepted() {
        assert_eq!(
            accepted_summary(&reply("the gist", StopReason::EndTurn)).unwrap(),
            "the gist"
        );
        assert_eq!(
            accepted_summary(&reply("  ", StopReason::StopSequence))
                .unwrap_err()
                .to_string(),
            "the model's summary was empty, so the conversation was kept as it was"
        );
        assert_eq!(
            accepted_summary(&reply("half", StopReason::MaxTokens))
                .unwrap_err()
                .to_string(),
            "the model's summary reply stopped with max_tokens instead of ending normally, so \
             it was not used and the conversation was kept as it was; raise the agent's \
             max_tokens or context.window_tokens, or lower context.keep_last"
        );
        assert_eq!(
            accepted_summary(&reply("", StopReason::ToolUse))
                .unwrap_err()
                .to_string(),
            "the model's summary reply stopped with tool_use instead of ending normally, so it \
             was not used and the conversation was kept as it was"
        );
    }
}
