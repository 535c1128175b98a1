//! Redaction at the runtime's two choke points: every event before it is appended (and
//! folded into the state the checkpoints and the next request are made from), and every
//! outcome before the pool stores its text (`runs.result`, `runs.error`, `jobs.last_error`).
//! An event that cannot go through redaction is a [`RedactError`].

use nightshift_store::RunEnd;
use nightshift_tools::Redactor;
use nightshift_worker::JobOutcome;

use crate::events::RunEvent;

/// An event that could not go through redaction (a bug: every event serialises and parses).
#[derive(Debug, thiserror::Error)]
pub(crate) enum RedactError {
    #[error("an event could not be redacted ({kind}): {source}")]
    Unredactable {
        kind: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("a redacted event no longer parses ({kind}): {source}")]
    NoLongerParses {
        kind: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// `event` with every string in it redacted (text, tool inputs, results, errors).
pub(crate) fn event(redactor: &Redactor, event: RunEvent) -> Result<RunEvent, RedactError> {
    if redactor.is_empty() {
        return Ok(event);
    }
    let kind = event.kind();
    let mut value = serde_json::to_value(&event)
        .map_err(|source| RedactError::Unredactable { kind, source })?;
    redactor.redact_json(&mut value);
    nightshift_llm::json::from_value(value)
        .map_err(|source| RedactError::NoLongerParses { kind, source })
}

/// `outcome` with the text it stores redacted.
pub(super) fn outcome(redactor: &Redactor, outcome: JobOutcome) -> JobOutcome {
    if redactor.is_empty() {
        return outcome;
    }
    let r = |s: String| redactor.redact(&s);
    match outcome {
        JobOutcome::Done(end) => JobOutcome::Done(match end {
            RunEnd::Succeeded { result } => RunEnd::Succeeded {
                result: result.map(r),
            },
            RunEnd::Failed { error } => RunEnd::Failed { error: r(error) },
            RunEnd::Cancelled => RunEnd::Cancelled,
            RunEnd::Superseded => RunEnd::Superseded,
            RunEnd::BudgetExhausted { detail } => RunEnd::BudgetExhausted { detail: r(detail) },
            RunEnd::MaxRounds { detail } => RunEnd::MaxRounds { detail: r(detail) },
        }),
        JobOutcome::Retry { error, after } => JobOutcome::Retry {
            error: r(error),
            after,
        },
        JobOutcome::Defer { until, error } => JobOutcome::Defer {
            until,
            error: r(error),
        },
        JobOutcome::Park { until, payload } => JobOutcome::Park {
            until,
            payload: r(payload),
        },
        JobOutcome::AwaitApproval {
            call_id,
            until,
            payload,
        } => JobOutcome::AwaitApproval {
            call_id,
            until,
            payload: r(payload),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nightshift_llm::{ContentBlock, Message, Role};

    const KEY: &str = "sk-ant-api03-0123456789abcdef";

    fn redactor() -> Redactor {
        Redactor::new([("ANTHROPIC_API_KEY", KEY)])
    }

    #[test]
    fn events_keep_their_shape_with_every_string_redacted() {
        let message = Message {
            role: Role::User,
            content: vec![ContentBlock::Text {
                text: format!("the key is {KEY}"),
            }],
        };
        let got = event(&redactor(), RunEvent::UserMessage { message }).unwrap();
        assert_eq!(
            got,
            RunEvent::UserMessage {
                message: Message::user_text("the key is [REDACTED:ANTHROPIC_API_KEY]"),
            }
        );
        let started = RunEvent::ToolStarted {
            call_id: "c1".into(),
            name: "run_command".into(),
            input: serde_json::json!({"command": format!("curl -H 'x-api-key: {KEY}'")}),
            durability: nightshift_tools::ToolClass::SideEffect,
            idempotency_key: "r:c1".into(),
        };
        let got = event(&redactor(), started).unwrap();
        let payload = got.payload();
        assert!(!payload.contains(KEY), "{payload}");
        assert!(
            payload.contains("x-api-key: [REDACTED:ANTHROPIC_API_KEY]"),
            "{payload}"
        );
    }

    #[test]
    fn outcomes_store_only_redacted_text() {
        let failed = outcome(
            &redactor(),
            JobOutcome::failed(format!("401 from the provider: invalid x-api-key {KEY}")),
        );
        let JobOutcome::Done(RunEnd::Failed { error }) = failed else {
            panic!("still a failure");
        };
        assert_eq!(
            error,
            "401 from the provider: invalid x-api-key [REDACTED:ANTHROPIC_API_KEY]"
        );
        let retry = outcome(&redactor(), JobOutcome::retry(format!("x {KEY}")));
        assert!(matches!(retry, JobOutcome::Retry { ref error, .. } if !error.contains(KEY)));
        let done = outcome(
            &redactor(),
            JobOutcome::succeeded(KEY.chars().rev().collect::<String>()),
        );
        assert!(matches!(
            done,
            JobOutcome::Done(RunEnd::Succeeded { result: Some(ref r) }) if r == "[REDACTED:ANTHROPIC_API_KEY]"
        ));
    }
}
