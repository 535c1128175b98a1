//! The timeline's unit tests: what each kind of event shows, where jobs and tasks go, and
//! that items render as the page shows them.

use nightshift_agent::events::{EndStatus, RunEvent};
use nightshift_agent::runtime::REFUSED_NOTICE;
use nightshift_llm::{ContentBlock, Message, StopReason, Usage};
use nightshift_store::{Event, Job, Run, RunStatus, Task, TaskStatus};

use super::{Item, TaskView, build};
use crate::decision::Decision;
use crate::test_support::{log, run};

fn started(call: &str, name: &str) -> RunEvent {
    RunEvent::ToolStarted {
        call_id: call.into(),
        name: name.into(),
        input: serde_json::json!({"path": "a.txt"}),
        durability: nightshift_tools::ToolClass::SideEffect,
        idempotency_key: format!("r1:{call}"),
    }
}

#[test]
fn a_tool_round_becomes_prompt_turn_and_one_item_per_call_with_its_result() {
    let events = log(vec![
        RunEvent::UserMessage {
            message: Message::user_text("Review PR 7"),
        },
        RunEvent::AssistantMessage {
            message: Message::user_text("reading"),
            stop_reason: StopReason::ToolUse,
            usage: Usage {
                input_tokens: 1200,
                output_tokens: 30,
                cache_creation_input_tokens: 0,
                cache_read_input_tokens: 1000,
            },
            model: "claude-x".into(),
            cost_usd: 0.01,
            latency_ms: Some(2_300),
            retries: 1,
        },
        started("c1", "read_file"),
        started("c2", "run_command"),
        RunEvent::ToolResult {
            call_id: "c1".into(),
            content: "hello".into(),
            is_error: false,
            interrupted: false,
        },
        RunEvent::ToolResult {
            call_id: "c2".into(),
            content: "interrupted".into(),
            is_error: true,
            interrupted: true,
        },
        RunEvent::Finished {
            status: EndStatus::Succeeded,
            detail: Some("done".into()),
        },
    ]);
    let items = build(&run(RunStatus::Succeeded), &[], &[], &events);
    let kinds: Vec<&str> = items.iter().map(|i| i.kind).collect();
    assert_eq!(
        kinds,
        ["prompt", "model_turn", "tool_call", "tool_call", "result"]
    );
    assert_eq!(items[0].body.as_deref(), Some("Review PR 7"));
    assert!(items[1].facts.contains(&("in".into(), "1.2k".into())));
    assert!(
        items[1]
            .facts
            .contains(&("cache read".into(), "1.0k".into()))
    );
    let c1 = &items[2];
    assert_eq!(
        (c1.call_id.as_deref(), c1.result.as_deref(), c1.last_seq),
        (Some("c1"), Some("hello"), 5)
    );
    assert!(c1.facts.contains(&("class".into(), "side_effect".into())));
    assert!(c1.marks.is_empty(), "{:?}", c1.marks);
    assert!(
        items[3]
            .marks
            .contains(&"interrupted / outcome unknown".to_string())
    );
    assert!(items[3].marks.contains(&"error".to_string()));
}

#[test]
fn an_approval_is_pending_until_decided_and_a_wakeup_records_when_it_woke() {
    let mut events = vec![RunEvent::ApprovalRequested {
        call_id: "c9".into(),
        name: "deploy".into(),
        input_hash: "h".into(),
        expires_at: 99_000,
    }];
    let pending = build(
        &run(RunStatus::AwaitingApproval),
        &[],
        &[],
        &log(events.clone()),
    );
    assert!(pending[0].pending && pending[0].kind == "approval");
    events.push(RunEvent::ApprovalDecided {
        call_id: "c9".into(),
        approved: false,
        reason: Some("not today".into()),
        by: "operator".into(),
    });
    events.push(RunEvent::WakeupScheduled {
        call_id: "w".into(),
        due_at: 60_000,
        reason: "CI".into(),
        scheduled_at: 3_000,
    });
    events.push(RunEvent::Resumed {
        job_id: 2,
        reminder: "woke".into(),
    });
    let items = build(&run(RunStatus::Running), &[], &[], &log(events));
    assert!(!items[0].pending);
    assert!(items[0].marks.contains(&"denied".to_string()));
    assert!(
        items[0]
            .facts
            .contains(&("reason".into(), "not today".into()))
    );
    assert_eq!(items.len(), 2, "the resume lands on the wakeup item");
    assert!(
        items[1]
            .facts
            .iter()
            .any(|(n, v)| n == "woke" && v == "1970-01-01T00:00:04Z")
    );
    assert_eq!(items[1].last_seq, 4);
}

fn result(call: &str, content: &str, is_error: bool) -> RunEvent {
    RunEvent::ToolResult {
        call_id: call.into(),
        content: content.into(),
        is_error,
        interrupted: false,
    }
}

#[test]
fn calls_never_made_say_exactly_why_and_a_re_run_is_one_marked_item() {
    let items = build(
        &run(RunStatus::Running),
        &[],
        &[],
        &log(vec![
            // Started, then started again after a crash, then its result.
            started("c1", "read_file"),
            started("c1", "read_file"),
            result("c1", "hello", false),
            // Denied by an operator: the loop's result names the denial.
            RunEvent::ApprovalRequested {
                call_id: "c2".into(),
                name: "deploy".into(),
                input_hash: "h".into(),
                expires_at: 99_000,
            },
            RunEvent::ApprovalDecided {
                call_id: "c2".into(),
                approved: false,
                reason: None,
                by: "operator".into(),
            },
            result("c2", &nightshift_agent::approval::denied_notice(None), true),
            // Refused by the fence, and a call whose input broke its schema — the word
            // "denied" in a tool's text decides nothing.
            result("c3", REFUSED_NOTICE, true),
            result("c4", "input: 'path' is required (denied words here)", true),
        ]),
    );
    let marks = |call: &str| {
        items
            .iter()
            .find(|i| i.kind == "tool_call" && i.call_id.as_deref() == Some(call))
            .map(|i| i.marks.clone())
            .unwrap_or_else(|| panic!("no item for {call}: {items:?}"))
    };
    assert_eq!(marks("c1"), ["re-run on recovery"]);
    assert_eq!(
        items
            .iter()
            .filter(|i| i.call_id.as_deref() == Some("c1"))
            .count(),
        1,
        "one item for the call"
    );
    assert_eq!(marks("c2"), ["denied"]);
    assert_eq!(marks("c3"), ["refused by the fence"]);
    assert_eq!(marks("c4"), ["bad input"]);
}

fn task(id: &str, call: &str, status: TaskStatus) -> TaskView {
    TaskView {
        task: Task {
            id: id.into(),
            run_id: "r1".into(),
            call_id: call.into(),
            command: "cargo test".into(),
            owner: "daemon-a".into(),
            status,
            exit_code: (status != TaskStatus::Running).then_some(0),
            detail: None,
            output_tail: Some("test result: ok".into()),
            output_bytes: 4096,
            started_at: 2_500,
            deadline_at: 900_000,
            heartbeat_at: 3_000,
            ended_at: (status != TaskStatus::Running).then_some(9_500),
            reported_at: None,
            stop_requested_at: None,
        },
        live_tail: Some("running 12 tests".into()),
    }
}

#[test]
fn a_task_follows_the_call_that_started_it_with_its_newest_output() {
    let events = log(vec![
        started("c1", "run_command"),
        result("c1", "started task t1", false),
        started("c2", "read_file"),
        result(
            "c2",
            "[… 9900 bytes cut; full output saved as artifact c2-stdout.txt …]",
            false,
        ),
        RunEvent::TaskEnded {
            task_id: "t0".into(),
            status: "succeeded".into(),
            reminder: "t0 ended".into(),
        },
    ]);
    let running = build(
        &run(RunStatus::Running),
        &[],
        &[task("t1", "c1", TaskStatus::Running)],
        &events,
    );
    let keys: Vec<&str> = running.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(
        keys,
        ["e1", "task-t1", "e3", "e5"],
        "the task after its call"
    );
    let t1 = &running[1];
    assert_eq!(
        t1.result.as_deref(),
        Some("running 12 tests"),
        "the live tail"
    );
    assert!(t1.marks.contains(&"running".to_string()));
    assert_eq!(running[2].artifact.as_deref(), Some("c2-stdout.txt"));

    let mut ended = task("t1", "c1", TaskStatus::Succeeded);
    ended.live_tail = None;
    let done = build(&run(RunStatus::Running), &[], &[ended], &events);
    let t1 = done.iter().find(|i| i.key == "task-t1").unwrap();
    assert_eq!(
        t1.result.as_deref(),
        Some("test result: ok"),
        "the stored tail"
    );
    assert!(t1.facts.contains(&("exit code".into(), "0".into())));
    assert!(t1.marks.is_empty());
}

/// The text of `html` a reader sees with every `<details>` closed.
fn seen(html: &str) -> String {
    let mut out = String::new();
    let mut rest = html;
    while let Some(at) = rest.find("<details>") {
        out.push_str(&rest[..at]);
        let summary_end = rest[at..].find("</summary>").map_or(0, |e| at + e);
        out.push_str(&rest[at..summary_end]);
        let end = rest[at..].find("</details>").map_or(rest.len(), |e| at + e);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

fn rendered(item: &Item, run: &Run) -> String {
    crate::layout::templates()
        .get_template("item.html")
        .and_then(|t| t.render(crate::run_page::item_ctx(item, run, "csrf")))
        .unwrap()
}

#[test]
fn short_background_output_is_shown_once() {
    // Ten short lines: long enough to collapse by its lines, short enough that its head
    // and tail used to be the whole text each (and it was shown twice).
    let output: String = (1..=10).map(|i| format!("step-{i:02}\n")).collect();
    let mut ended = task("t1", "c1", TaskStatus::Succeeded);
    ended.task.output_tail = Some(output.clone());
    let events = log(vec![
        started("c1", "run_command"),
        result("c1", "started task t1", false),
        RunEvent::TaskEnded {
            task_id: "t1".into(),
            status: "succeeded".into(),
            reminder: format!("[Background task t1 finished.]\nOutput:\n{output}"),
        },
    ]);
    let r = run(RunStatus::Running);
    let items = build(&r, &[], &[ended], &events);
    let html: String = items.iter().map(|i| rendered(i, &r)).collect();
    let seen = seen(&html);
    for i in 1..=10 {
        let line = format!("step-{i:02}");
        assert!(
            seen.matches(&line).count() <= 1,
            "{line} shown more than once:\n{seen}"
        );
        assert_eq!(
            html.matches(&line).count() - seen.matches(&line).count(),
            1,
            "{line} once in the whole text"
        );
    }
    assert!(
        seen.contains("step-01") && seen.contains("step-10"),
        "head and tail: {seen}"
    );
    // One task item: the ending is reported on it, not as a second item.
    assert_eq!(items.iter().filter(|i| i.kind == "task").count(), 1);
}

#[test]
fn an_approval_shows_the_call_the_prompt_and_the_models_text() {
    let events = log(vec![
        RunEvent::AssistantMessage {
            message: nightshift_llm::Message {
                role: nightshift_llm::Role::Assistant,
                content: vec![
                    ContentBlock::Text {
                        text: "Shipping v2 now.".into(),
                    },
                    ContentBlock::ToolUse {
                        id: "c9".into(),
                        name: "deploy".into(),
                        input: serde_json::json!({"version": "v2"}),
                        unparsed: None,
                    },
                ],
            },
            stop_reason: StopReason::ToolUse,
            usage: Usage::default(),
            model: "m".into(),
            cost_usd: 0.0,
            latency_ms: None,
            retries: 0,
        },
        RunEvent::ApprovalRequested {
            call_id: "c9".into(),
            name: "deploy".into(),
            input_hash: "h".into(),
            expires_at: 99_000,
        },
    ]);
    let items = build(&run(RunStatus::AwaitingApproval), &[], &[], &events);
    let approval = items.iter().find(|i| i.kind == "approval").unwrap();
    let want = Decision {
        tool: "deploy".into(),
        input: "{\n  \"version\": \"v2\"\n}".into(),
        prompt: "Go.".into(),
        model_text: "Shipping v2 now.".into(),
    };
    assert_eq!(approval.decision.as_ref(), Some(&want));
    assert_eq!(
        approval.body.as_deref(),
        Some(want.input.as_str()),
        "the input on the item"
    );
    let html = rendered(approval, &run(RunStatus::AwaitingApproval));
    let detail = &html[html
        .find("<template class=\"confirm-detail\">")
        .expect("the dialog's detail")..];
    for part in [
        "deploy",
        "&quot;version&quot;: &quot;v2&quot;",
        "Go.",
        "Shipping v2 now.",
    ] {
        assert!(
            detail.contains(part),
            "{part} in the dialog's detail:\n{html}"
        );
    }
    assert!(
        html.contains("data-action=\"approve\" data-confirm-yes=\"Yes, approve\" data-confirm="),
        "approve asks first: {html}"
    );
}

fn job(id: i64, kind: nightshift_store::JobKind, created_at: i64, owner: &str) -> Job {
    Job {
        id,
        run_id: "r1".into(),
        kind,
        lane: "default".into(),
        priority: 0,
        payload: "{}".into(),
        run_at: created_at,
        attempts: 1,
        max_attempts: 5,
        dedupe_key: None,
        status: nightshift_store::JobState::Succeeded,
        lease_owner: Some(owner.into()),
        lease_token: 1,
        lease_expires_at: None,
        cancel_requested_at: None,
        last_error: None,
        created_at,
        updated_at: created_at,
        finished_at: None,
        concurrency_key: None,
    }
}

#[test]
fn each_job_sits_where_it_was_made_with_the_daemon_that_ran_it() {
    use nightshift_store::JobKind;
    let events = log(vec![
        RunEvent::UserMessage {
            message: Message::user_text("Go"),
        },
        RunEvent::WakeupScheduled {
            call_id: "w".into(),
            due_at: 60_000,
            reason: "CI".into(),
            scheduled_at: 1_500,
        },
        RunEvent::Resumed {
            job_id: 2,
            reminder: "woke".into(),
        },
    ]);
    let jobs = [
        job(1, JobKind::Start, 0, "daemon-a"),
        job(2, JobKind::Resume, 2_500, "daemon-b"),
    ];
    let items = build(&run(RunStatus::Running), &jobs, &[], &events);
    let keys: Vec<&str> = items.iter().map(|i| i.key.as_str()).collect();
    // e1 at 1s, e2 at 2s, job 2 made at 2.5s, e3 (its resume) at 3s.
    assert_eq!(keys, ["j1", "e1", "e2", "j2"], "{items:?}");
    assert!(
        items[3]
            .facts
            .contains(&("lease owner".into(), "daemon-b".into()))
    );
}

#[test]
fn a_failed_run_shows_its_real_error_and_unreadable_events_are_kept() {
    let mut events = log(vec![RunEvent::ModelUnavailable {
        error: "529 overloaded".into(),
        since: 0,
        until: 5_000,
    }]);
    events.push(Event {
        run_id: "r1".into(),
        seq: 2,
        job_id: 1,
        lease_token: 1,
        event_type: "mystery".into(),
        payload: "{}".into(),
        created_at: 0,
    });
    let mut r = run(RunStatus::Failed);
    r.error = Some("model unavailable for 30m".into());
    let items = build(&r, &[], &[], &events);
    let kinds: Vec<&str> = items.iter().map(|i| i.kind).collect();
    assert_eq!(kinds, ["model_wait", "error", "error"]);
    assert_eq!(items[0].body.as_deref(), Some("529 overloaded"));
    assert!(items[1].title.contains("unreadable event 2"));
    assert_eq!(items[2].body.as_deref(), Some("model unavailable for 30m"));
}

#[test]
fn an_mcp_listing_shows_its_tools_with_their_classes_and_what_was_left_out() {
    let events = log(vec![RunEvent::McpToolsListed {
        server: "notes".into(),
        tools: vec![nightshift_tools::ToolDefinition {
            name: "mcp__notes__add_note".into(),
            description: "Adds a line".into(),
            input_schema: serde_json::json!({"type": "object"}),
            class: nightshift_tools::ToolClass::SideEffect,
        }],
        left_out: vec![nightshift_agent::LeftOutTool {
            tool: "bad.name".into(),
            reason: "its name has characters a model's tool name cannot hold".into(),
        }],
    }]);
    let items = build(&run(RunStatus::Running), &[], &[], &events);
    let mcp = items.iter().find(|i| i.kind == "mcp").expect("an mcp item");
    assert_eq!(mcp.title, "MCP tools listed");
    assert!(mcp.facts.contains(&("server".into(), "notes".into())));
    assert!(mcp.facts.contains(&("offered".into(), "1".into())));
    let body = mcp.body.as_deref().unwrap();
    assert!(
        body.contains("mcp__notes__add_note (side_effect)"),
        "{body}"
    );
    assert!(body.contains("left out: bad.name"), "{body}");
}
