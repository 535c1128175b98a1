//! The replay machine on hand-made recordings, with the real runtime over its scratch store:
//! a recording replays without divergence with the definition it was recorded with; a changed
//! system prompt is named at turn 1; a loop that asks for more than the recording has (a
//! model call, a tool result), ends early, or reaches a background task's end is reported
//! with its turn — never a hang.

use std::sync::Arc;

use futures::future::BoxFuture;
use nightshift_agent::events::EndStatus;
use nightshift_agent::replay::{self, DivergenceKind, Mode, Part, RecordedEvent};
use nightshift_agent::{AgentConfig, AgentDef, RunEvent, ToolBox, ToolCall, ToolClass, ToolOutput};
use nightshift_llm::{ContentBlock, Message, Role, StopReason, ToolSpec, Usage};
use nightshift_tools::Redactor;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// One read-only tool, `look`; calling it for real is a bug of replay.
struct Look;

impl ToolBox for Look {
    fn specs(&self, _agent: &AgentDef) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "look".into(),
            description: "Looks.".into(),
            input_schema: json!({"type": "object"}),
        }]
    }
    fn durability(&self, _: &AgentDef, _: &str, _: &serde_json::Value) -> ToolClass {
        ToolClass::ReadOnly
    }
    fn call<'a>(
        &'a self,
        _: &'a AgentDef,
        _: ToolCall<'a>,
        _: &'a CancellationToken,
    ) -> BoxFuture<'a, ToolOutput> {
        panic!("replay ran a tool")
    }
}

fn def(system: &str, max_turns: u64) -> AgentDef {
    let config: AgentConfig = serde_json::from_value(json!({
        "name": "a", "provider": "p", "model": "m", "system": system,
        "budgets": {"max_turns": max_turns}
    }))
    .unwrap();
    config.resolve(std::path::Path::new(".")).unwrap()
}

fn reply(content: Vec<ContentBlock>, stop: StopReason) -> RunEvent {
    RunEvent::AssistantMessage {
        message: Message {
            role: Role::Assistant,
            content,
        },
        stop_reason: stop,
        usage: Usage::default(),
        model: "m".into(),
        cost_usd: 0.0,
        latency_ms: None,
        retries: 0,
    }
}

/// A run: the prompt, a call of `look`, its result, a final answer.
fn events(hash: &str) -> Vec<RunEvent> {
    vec![
        RunEvent::RunStarted {
            agent: "a".into(),
            agent_hash: hash.into(),
        },
        RunEvent::UserMessage {
            message: Message::user_text("go"),
        },
        reply(
            vec![ContentBlock::ToolUse {
                id: "toolu_1".into(),
                name: "look".into(),
                input: json!({}),
                unparsed: None,
            }],
            StopReason::ToolUse,
        ),
        RunEvent::ToolStarted {
            call_id: "toolu_1".into(),
            name: "look".into(),
            input: json!({}),
            durability: ToolClass::ReadOnly,
            idempotency_key: "k".into(),
        },
        RunEvent::ToolResult {
            call_id: "toolu_1".into(),
            content: "seen".into(),
            is_error: false,
            interrupted: false,
        },
        reply(
            vec![ContentBlock::Text {
                text: "done".into(),
            }],
            StopReason::EndTurn,
        ),
        RunEvent::Finished {
            status: EndStatus::Succeeded,
            detail: None,
        },
    ]
}

fn recorded(events: Vec<RunEvent>) -> Vec<RecordedEvent> {
    events
        .into_iter()
        .enumerate()
        .map(|(i, event)| RecordedEvent {
            seq: i as i64 + 1,
            at: 1_700_000_000_000 + i as i64 * 1000,
            event,
        })
        .collect()
}

async fn run(def: AgentDef, events: &[RecordedEvent], mode: Mode) -> replay::Replayed {
    replay::run_loop(def, Arc::new(Look), Redactor::default(), "go", events, mode)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_recording_replays_without_divergence_and_a_changed_system_prompt_is_named_at_turn_1() {
    let original = def("Be brief.", 10);
    let events = recorded(events(&original.hash));
    let record = run(original.clone(), &events, Mode::Record).await;
    assert_eq!(record.divergence, None);
    assert_eq!((record.model_calls.len(), record.tool_calls), (2, 1));
    let calls = record.model_calls;

    let again = run(original, &events, Mode::Compare(calls.clone())).await;
    assert_eq!(again.divergence, None, "{:?}", again.divergence);
    assert_eq!((again.model_calls.len(), again.tool_calls), (2, 1));

    let changed = run(def("Be thorough.", 10), &events, Mode::Compare(calls)).await;
    let d = changed.divergence.expect("a divergence");
    assert_eq!((d.turn, d.call), (1, 1));
    match &d.kind {
        DivergenceKind::Request { difference, .. } => {
            assert_eq!(difference.part, Part::SystemPrompt);
            assert_eq!(difference.recorded, "Be brief.");
            assert_eq!(difference.replayed, "Be thorough.");
        }
        other => panic!("{other:?}"),
    }
    assert!(d.to_string().contains("the system prompt"), "{d}");
}

#[tokio::test]
async fn more_than_the_recording_has_is_a_divergence_with_its_turn_not_a_hang() {
    let a = def("Be brief.", 10);
    // The run's log stops after the tool's result: the loop asks the model again.
    let mut short = events(&a.hash);
    short.truncate(5);
    let r = run(a.clone(), &recorded(short), Mode::Record).await;
    let d = r.divergence.expect("a divergence");
    assert_eq!(d.kind, DivergenceKind::ExtraModelCall { recorded: 1 });
    assert_eq!((d.turn, d.call), (2, 2));

    // The tool's result is missing: nothing runs, the call is named.
    let mut no_result = events(&a.hash);
    no_result.remove(4);
    let r = run(a.clone(), &recorded(no_result), Mode::Record).await;
    let d = r.divergence.expect("a divergence");
    assert_eq!(
        d.kind,
        DivergenceKind::UnrecordedToolCall {
            name: "look".into(),
            call_id: "toolu_1".into()
        }
    );
    assert_eq!(d.turn, 1);

    // A budget of one model call ends the run before the recording does.
    let r = run(
        def("Be brief.", 1),
        &recorded(events(&a.hash)),
        Mode::Record,
    )
    .await;
    let d = r.divergence.expect("a divergence");
    assert!(
        matches!(
            &d.kind,
            DivergenceKind::EndedEarly {
                made: 1,
                recorded: 2,
                ..
            }
        ),
        "{d:?}"
    );

    // A background task's end is not replayed: reported at its turn.
    let mut task = events(&a.hash);
    task.insert(
        5,
        RunEvent::TaskEnded {
            task_id: "t1".into(),
            status: "succeeded".into(),
            reminder: "[task t1 ended]".into(),
        },
    );
    let r = run(a, &recorded(task), Mode::Record).await;
    let d = r.divergence.expect("a divergence");
    assert!(
        matches!(d.kind, DivergenceKind::Unreplayable { .. }),
        "{d:?}"
    );
    assert_eq!(d.turn, 2);
    assert!(
        d.to_string().starts_with("cannot replay past turn 2"),
        "{d}"
    );
}

#[tokio::test]
async fn the_call_a_failed_run_ended_at_is_recorded_and_compared() {
    let a = def("Be brief.", 10);
    // The model failed the first call: no reply, the run ended failed.
    let failed = recorded(vec![
        RunEvent::RunStarted {
            agent: "a".into(),
            agent_hash: a.hash.clone(),
        },
        RunEvent::UserMessage {
            message: Message::user_text("go"),
        },
        RunEvent::Finished {
            status: EndStatus::Failed,
            detail: Some("model call failed: 400 bad request".into()),
        },
    ]);
    let record = run(a.clone(), &failed, Mode::Record).await;
    assert_eq!(record.divergence, None, "{:?}", record.divergence);
    assert_eq!(record.model_calls.len(), 1);
    assert_eq!(
        record.model_calls[0].purpose,
        replay::CallPurpose::Unanswered
    );
    let again = run(a, &failed, Mode::Compare(record.model_calls.clone())).await;
    assert_eq!(again.divergence, None, "{:?}", again.divergence);
    let changed = run(
        def("Be thorough.", 10),
        &failed,
        Mode::Compare(record.model_calls),
    )
    .await;
    let d = changed.divergence.expect("a divergence");
    assert_eq!(d.turn, 1);
    assert!(d.to_string().contains("the system prompt"), "{d}");
}

#[tokio::test]
async fn a_model_outage_waits_and_the_run_goes_on_as_recorded() {
    let a = def("Be brief.", 10);
    let at = 1_700_000_000_000;
    let outage = recorded(vec![
        RunEvent::RunStarted {
            agent: "a".into(),
            agent_hash: a.hash.clone(),
        },
        RunEvent::UserMessage {
            message: Message::user_text("go"),
        },
        RunEvent::ModelUnavailable {
            error: "529 overloaded".into(),
            since: at + 2000,
            until: at + 32_000,
        },
        reply(
            vec![ContentBlock::Text {
                text: "done".into(),
            }],
            StopReason::EndTurn,
        ),
        RunEvent::Finished {
            status: EndStatus::Succeeded,
            detail: None,
        },
    ]);
    let record = run(a.clone(), &outage, Mode::Record).await;
    assert_eq!(record.divergence, None, "{:?}", record.divergence);
    let purposes: Vec<_> = record.model_calls.iter().map(|c| c.purpose).collect();
    assert_eq!(
        purposes,
        [replay::CallPurpose::Unavailable, replay::CallPurpose::Turn]
    );
    let again = run(a, &outage, Mode::Compare(record.model_calls)).await;
    assert_eq!(again.divergence, None, "{:?}", again.divergence);
}

#[tokio::test]
async fn a_compaction_is_answered_with_its_recorded_summary() {
    let config: AgentConfig = serde_json::from_value(json!({
        "name": "a", "provider": "p", "model": "m", "system": "Be brief.",
        "context": {"window_tokens": 1000, "compact_at": 0.5, "keep_last": 1}
    }))
    .unwrap();
    let a = config.resolve(std::path::Path::new(".")).unwrap();
    let mut events = events(&a.hash);
    // The first reply's input filled half the window: the loop compacts before the next call.
    if let RunEvent::AssistantMessage { usage, .. } = &mut events[2] {
        usage.input_tokens = 900;
    }
    events.insert(
        5,
        RunEvent::Compacted {
            summary: "[Summary of the earlier conversation]\nLooked; saw it.".into(),
            kept_from: 3,
            usage: Usage::default(),
            cost_usd: 0.0,
        },
    );
    let events = recorded(events);
    let record = run(a.clone(), &events, Mode::Record).await;
    assert_eq!(record.divergence, None, "{:?}", record.divergence);
    let purposes: Vec<_> = record.model_calls.iter().map(|c| c.purpose).collect();
    use replay::CallPurpose::{Summary, Turn};
    assert_eq!(purposes, [Turn, Summary, Turn]);
    let last = &record.model_calls[2].request.messages;
    let first = last[0].text();
    assert!(first.contains("Looked; saw it."), "{last:?}");
    assert_eq!(
        first
            .matches("[Summary of the earlier conversation]")
            .count(),
        1,
        "the summary is the model's text, prefixed once by the loop: {first}"
    );
    let again = run(a, &events, Mode::Compare(record.model_calls)).await;
    assert_eq!(again.divergence, None, "{:?}", again.divergence);
}

#[tokio::test]
async fn an_approval_gets_the_recorded_decision_or_times_out_as_it_did() {
    let config: AgentConfig = serde_json::from_value(json!({
        "name": "a", "provider": "p", "model": "m", "system": "Be brief.",
        "approvals": {"timeout_seconds": 60, "rules": [{"tool": "look"}]}
    }))
    .unwrap();
    let a = config.resolve(std::path::Path::new(".")).unwrap();
    let asked = RunEvent::ApprovalRequested {
        call_id: "toolu_1".into(),
        name: "look".into(),
        input_hash: "h".into(),
        expires_at: 1_700_000_060_000,
    };
    let decided = |approved: bool, by: &str| RunEvent::ApprovalDecided {
        call_id: "toolu_1".into(),
        approved,
        reason: None,
        by: by.into(),
    };
    // Approved by an operator: the call's recorded result answers it.
    let mut approved = events(&a.hash);
    approved.insert(3, asked.clone());
    approved.insert(4, decided(true, "token:ops"));
    // Timed out: the loop denies the call itself, and no result is needed.
    let mut timed_out = events(&a.hash);
    timed_out.splice(3..5, [asked, decided(false, "timeout")]);
    for (name, events) in [("approved", approved), ("timed out", timed_out)] {
        let events = recorded(events);
        let record = run(a.clone(), &events, Mode::Record).await;
        assert_eq!(record.divergence, None, "{name}: {:?}", record.divergence);
        assert_eq!(record.model_calls.len(), 2, "{name}");
        let second = &record.model_calls[1].request.messages;
        let result = serde_json::to_string(&second[2]).unwrap();
        if name == "approved" {
            assert_eq!(record.tool_calls, 1);
            assert!(result.contains("seen"), "{result}");
        } else {
            assert_eq!(record.tool_calls, 0, "a denied call is not run");
            assert!(!result.contains("seen"), "{result}");
        }
        let again = run(a.clone(), &events, Mode::Compare(record.model_calls)).await;
        assert_eq!(again.divergence, None, "{name}: {:?}", again.divergence);
    }
}

#[tokio::test]
async fn a_fork_replays_up_to_its_fork_point_and_stops_there_saying_so() {
    let a = def("Be brief.", 10);
    // A fork from turn 1 of the run: the parent's first turn and its tool round, then the
    // fork's own `forked` event, then its own answer.
    let mut fork = events(&a.hash);
    fork.insert(
        5,
        RunEvent::Forked {
            parent: "parent-run".into(),
            from_turn: 1,
            prompt: None,
            model: None,
            tool_results: std::collections::BTreeMap::new(),
            workspace_commit: None,
        },
    );
    let r = run(a, &recorded(fork), Mode::Record).await;
    let d = r.divergence.expect("a divergence");
    assert!(
        matches!(d.kind, DivergenceKind::Unreplayable { .. }),
        "{d:?}"
    );
    assert_eq!(d.turn, 2, "turn 1 was the parent's and was replayed");
    assert_eq!(r.model_calls.len(), 1);
    let said = d.to_string();
    assert!(
        said.starts_with("cannot replay past turn 2") && said.contains("forked"),
        "{said}"
    );
}
