//! The long run `dashboard-bench` renders as a timeline: exactly `n` events of the kinds and
//! payload shapes the agent loop writes ([`RunEvent`]), in the order it writes them. PURE.
//!
//! What it guarantees: the first events are `run_started` and the prompt, the last are the
//! final reply and `finished`; in between, model turns each followed by their tool calls
//! (`tool_started` then `tool_result`, some results long enough to be collapsed, some errors),
//! with one approval (requested, decided), one wakeup (scheduled, its result, resumed), one
//! compaction, one model outage and one background task end among them. Every event
//! round-trips through [`RunEvent::parse`] (the dashboard reads them that way).

use nightshift_agent::{EndStatus, RunEvent, ToolClass};
use nightshift_llm::{ContentBlock, Message, Role, StopReason, Usage};
use serde_json::json;

const TOOLS: [(&str, ToolClass); 5] = [
    ("read_file", ToolClass::ReadOnly),
    ("search_code", ToolClass::ReadOnly),
    ("run_command", ToolClass::Idempotent),
    ("http_get", ToolClass::ReadOnly),
    ("write_file", ToolClass::SideEffect),
];

fn usage(turn: usize) -> Usage {
    Usage {
        input_tokens: 1_200 + 40 * turn as u64,
        output_tokens: 180 + (turn as u64 % 7) * 30,
        cache_creation_input_tokens: 300,
        cache_read_input_tokens: 9_000 + 120 * turn as u64,
    }
}

fn reply(turn: usize, text: String, calls: Vec<ContentBlock>, stop: StopReason) -> RunEvent {
    let mut content = vec![ContentBlock::Text { text }];
    content.extend(calls);
    RunEvent::AssistantMessage {
        message: Message {
            role: Role::Assistant,
            content,
        },
        stop_reason: stop,
        usage: usage(turn),
        model: "claude-sonnet-4-5".into(),
        cost_usd: 0.004 + turn as f64 * 0.0001,
        latency_ms: Some(1_500 + (turn as u64 * 37) % 4_000),
        retries: u32::from(turn.is_multiple_of(17)),
    }
}

/// A tool's output: every fourth one long (a file or a test log), the others short.
fn output(turn: usize, name: &str) -> String {
    if turn.is_multiple_of(4) {
        (0..120)
            .map(|l| format!("{name} line {l:03}: let value_{l} = compute(input, {turn}); // ok"))
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        format!("{name}: 3 matches in src/session/store.rs (turn {turn})")
    }
}

/// The `n` events (at least 12) of one long run; `now` dates the wakeup and the approval.
pub fn events(n: usize, now: i64) -> Vec<RunEvent> {
    let n = n.max(12);
    let mut out = vec![
        RunEvent::RunStarted {
            agent: "reviewer".into(),
            agent_hash: "sha256:5f1c0e9a7b3d2c11".into(),
        },
        RunEvent::UserMessage {
            message: Message::user_text(
                "Review pull request #1432 in acme/web: Fix flaky login test on CI. Read the \
                 diff, run the tests that touch the changed files and leave comments.",
            ),
        },
    ];
    let mut turn = 0;
    // Room is kept for the final reply and `finished`.
    while out.len() + 2 < n {
        turn += 1;
        let room = n - 2 - out.len();
        let special = match turn {
            5 => Some(vec![
                RunEvent::ModelUnavailable {
                    error: "anthropic: 529 overloaded_error: Overloaded".into(),
                    since: now - 600_000,
                    until: now - 540_000,
                },
                RunEvent::Resumed {
                    job_id: 1,
                    reminder: "The model is reachable again; continue.".into(),
                },
            ]),
            20 => Some(vec![RunEvent::Compacted {
                summary: "Read the diff (4 files); the flaky test waits on a timer. Ran the \
                          login tests twice."
                    .into(),
                kept_from: 30,
                usage: usage(turn),
                cost_usd: 0.01,
            }]),
            40 => Some(vec![RunEvent::TaskEnded {
                task_id: "task-1".into(),
                status: "succeeded".into(),
                reminder: "Background task task-1 (cargo test -p web) succeeded: 212 passed."
                    .into(),
            }]),
            _ => None,
        };
        if let Some(events) = special.filter(|e| e.len() <= room) {
            out.extend(events);
            continue;
        }
        if room < 6 {
            out.push(RunEvent::UserMessage {
                message: Message::user_text(format!("Reminder {turn}: keep the review short.")),
            });
            continue;
        }
        let (name, durability) = TOOLS[turn % TOOLS.len()];
        let call_id = format!("toolu_{turn:04}");
        let (name, durability) = if turn == 60 || turn == 90 {
            ("schedule_wakeup", ToolClass::Idempotent)
        } else {
            (name, durability)
        };
        let input = match name {
            "read_file" => json!({"path": format!("src/session/file_{turn}.rs")}),
            "search_code" => json!({"query": "fn refresh_session", "max_results": 20}),
            "run_command" => json!({"command": "cargo test -p web login", "timeout_s": 300}),
            "http_get" => json!({"url": "https://ci.example/api/builds/88123/log"}),
            "schedule_wakeup" => json!({"in_seconds": 600, "reason": "wait for CI"}),
            _ => json!({"path": "REVIEW.md", "content": "Looks good once the timer is mocked."}),
        };
        out.push(reply(
            turn,
            format!("Turn {turn}: next I will call {name}."),
            vec![ContentBlock::ToolUse {
                id: call_id.clone(),
                name: name.into(),
                input: input.clone(),
                unparsed: None,
            }],
            StopReason::ToolUse,
        ));
        let approval = durability == ToolClass::SideEffect && turn == 24 && room >= 5;
        if approval {
            out.push(RunEvent::ApprovalRequested {
                call_id: call_id.clone(),
                name: name.into(),
                input_hash: "sha256:0a1b2c3d4e5f6071".into(),
                expires_at: now + 3_600_000,
            });
            out.push(RunEvent::ApprovalDecided {
                call_id: call_id.clone(),
                approved: true,
                reason: Some("fine to write the review file".into()),
                by: "operator".into(),
            });
        }
        let wakeup = name == "schedule_wakeup" && out.len() + 4 <= n - 2;
        if !wakeup {
            out.push(RunEvent::ToolStarted {
                call_id: call_id.clone(),
                name: name.into(),
                input,
                durability,
                idempotency_key: format!("run:{call_id}"),
            });
        } else {
            out.push(RunEvent::WakeupScheduled {
                call_id: call_id.clone(),
                due_at: now - 120_000,
                reason: "wait for CI".into(),
                scheduled_at: now - 720_000,
            });
        }
        out.push(RunEvent::ToolResult {
            call_id,
            content: output(turn, name),
            is_error: turn.is_multiple_of(13),
            interrupted: false,
        });
        if wakeup {
            out.push(RunEvent::Resumed {
                job_id: 2,
                reminder: "The wakeup is due: wait for CI.".into(),
            });
        }
    }
    out.truncate(n - 2);
    out.push(reply(
        turn + 1,
        "Review posted: the flaky test now uses a paused clock; two nits.".into(),
        Vec::new(),
        StopReason::EndTurn,
    ));
    out.push(RunEvent::Finished {
        status: EndStatus::Succeeded,
        detail: None,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_n_events_of_every_kind_that_parse_back() {
        for n in [12, 100, 500] {
            let events = events(n, 1_800_000_000_000);
            assert_eq!(events.len(), n);
            for e in &events {
                assert_eq!(&RunEvent::parse(e.kind(), &e.payload()).unwrap(), e);
            }
        }
        let kinds: Vec<&str> = events(500, 0).iter().map(RunEvent::kind).collect();
        for kind in [
            "run_started",
            "user_message",
            "assistant_message",
            "tool_started",
            "tool_result",
            "compacted",
            "wakeup_scheduled",
            "resumed",
            "task_ended",
            "approval_requested",
            "approval_decided",
            "model_unavailable",
            "finished",
        ] {
            assert!(kinds.contains(&kind), "{kind} missing");
        }
        assert_eq!(kinds.last(), Some(&"finished"));
    }
}
