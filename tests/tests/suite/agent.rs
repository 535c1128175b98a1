//! The agent runtime over a real store on both backends: the loop, the tool-call WAL,
//! recovery after a crash at each tool class, request fidelity after resume, budgets,
//! stop reasons, compaction and damaged checkpoints. The model and the tools are in-test
//! fakes behind the runtime's ports; crashes are simulated by aborting the handler's task
//! mid-step (nothing more is written, as after SIGKILL) and reclaiming after lease expiry.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nightshift_agent::runtime::{CUT_OFF_NOTICE, INTERRUPTED_NOTICE};
use nightshift_agent::{AgentRuntime, RunEvent};
use nightshift_llm::{Message, ModelRequest, Role, StopReason};
use nightshift_store::{NewRun, RunStatus};
use nightshift_tests::{TestDb, on_both_backends};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::fakes::*;

on_both_backends! {
    a_run_goes_from_prompt_through_tools_to_result => prompt_to_result;
    a_crash_in_a_read_only_tool_reruns_it_with_the_same_key => crash_in_read_only_tool;
    a_crash_in_an_idempotent_tool_reruns_it_with_the_same_key => crash_in_idempotent_tool;
    a_crash_in_a_side_effect_tool_never_runs_it_again => crash_in_side_effect_tool;
    an_unresolved_outcome_keeps_a_repeatable_call_open_for_the_next_try => unresolved_outcome;
    the_resumed_request_is_byte_identical => resumed_request_is_byte_identical;
    the_round_cap_holds_across_a_crash => round_cap_holds_across_a_crash;
    a_token_budget_ends_the_run_as_budget_exhausted => token_budget;
    a_cut_off_reply_never_runs_its_tool => cut_off_reply;
    pause_turn_is_sent_again => pause_turn_resends;
    a_refusal_ends_the_run => refusal_ends_the_run;
    compaction_replaces_old_messages_with_a_summary => compaction;
    a_summary_cut_off_by_a_full_context_window_is_not_accepted => cut_off_summary;
    context_too_long_compacts_once_then_fails => context_too_long;
    a_corrupt_checkpoint_fails_the_run_with_a_clear_error => corrupt_checkpoint;
    an_unknown_agent_fails_the_run => unknown_agent;
    cancel_stops_a_model_call_in_flight => cancel_stops_model_call;
}

// ---- tests -------------------------------------------------------------------------------

async fn prompt_to_result(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(
            vec![text("Let me look."), call("c1", "read"), call("c2", "send")],
            StopReason::ToolUse,
        ),
        reply(vec![text("All done.")], StopReason::EndTurn),
    ]);
    let tools = Arc::new(FakeTools::default());
    let h = Harness::new(db, agent(json!({})), model.clone(), tools.clone()).await;
    let run_id = h.enqueue("helper", "do the thing").await;
    h.run_once().await;
    assert_eq!(
        h.status(&run_id).await,
        (RunStatus::Succeeded, Some("All done.".into()), None)
    );
    let names: Vec<String> = tools.calls().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["read", "send"]);
    assert_eq!(
        h.kinds(&run_id).await,
        vec![
            "run_started",
            "user_message",
            "assistant_message",
            "tool_started",
            "tool_result",
            "tool_started",
            "tool_result",
            "assistant_message",
            "finished"
        ]
    );
    let second = model.request(1);
    assert_eq!(second.system, "You help.");
    assert_eq!(second.messages[0], Message::user_text("do the thing"));
    let results = tool_results(second.messages.last().unwrap());
    assert_eq!(
        results,
        vec![
            ("c1".into(), "read says \"c1\"".into(), false),
            ("c2".into(), "send says \"c2\"".into(), false)
        ],
        "all results of one reply in one user message, matched by id"
    );
    let run = h.store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(
        (run.turns, run.input_tokens, run.output_tokens),
        (2, 20, 10)
    );
    assert!(run.agent_hash.is_some());
    let cp = h.store.latest_checkpoint(&run_id).await.unwrap().unwrap();
    assert_eq!(cp.through_seq, 9, "checkpointed through the last event");
}

/// A tool that cannot tell what its call did ("unresolved": a request may have reached the
/// other side and could not be looked up): an idempotent call logs no result, the job is
/// tried again, and the call runs again under the same key; a side-effect call's answer is
/// its result (it is never run again).
async fn unresolved_outcome(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(
            vec![call("c1", "put"), call("c2", "send")],
            StopReason::ToolUse,
        ),
        reply(vec![text("ok")], StopReason::EndTurn),
    ]);
    let tools = Arc::new(FakeTools::default());
    *tools.unresolved.lock().unwrap() = vec!["put".into(), "send".into()];
    let h = Harness::new(db, agent(json!({})), model.clone(), tools.clone()).await;
    let run_id = h.enqueue("helper", "go").await;

    let first = h.run_once().await;
    assert!(
        matches!(&first, nightshift_worker::JobOutcome::Retry { error, .. }
            if error.contains("the outcome of put call c1 is not known yet")),
        "{first:?}"
    );
    assert_eq!(h.status(&run_id).await.0, RunStatus::Queued);
    assert!(
        !h.events(&run_id)
            .await
            .iter()
            .any(|e| matches!(e, RunEvent::ToolResult { .. })),
        "no result is logged for a call whose outcome is not known"
    );
    assert_eq!(tools.calls().len(), 1, "the round stopped at the open call");

    h.clock.advance(Duration::from_secs(3600));
    h.run_once().await;
    let (status, _, error) = h.status(&run_id).await;
    assert_eq!(status, RunStatus::Succeeded, "{error:?}");
    let calls = tools.calls();
    assert_eq!(calls.len(), 3, "{calls:?}");
    assert_eq!(calls[0], calls[1], "put ran again under the same key");
    assert_eq!(calls[2].0, "send");
    let results = tool_results(model.request(1).messages.last().unwrap());
    assert_eq!(results[0], ("c1".into(), "put says \"c1\"".into(), false));
    assert_eq!(results[1].0, "c2");
    assert!(
        results[1].2 && results[1].1.contains("send may or may not have been done"),
        "a side effect is not run again: the model is told it is unknown: {results:?}"
    );
}

/// A crash while the tool `name` runs: returns (tool calls, the second model request, run).
async fn crash_in_tool(
    db: &TestDb,
    name: &str,
) -> (Vec<(String, String)>, ModelRequest, String, Harness) {
    let model = ScriptModel::new(vec![
        reply(vec![call("c1", name)], StopReason::ToolUse),
        reply(vec![text("ok")], StopReason::EndTurn),
    ]);
    let tools = Arc::new(FakeTools::default());
    *tools.stall.lock().unwrap() = Some(name.to_string());
    let h = Harness::new(db, agent(json!({})), model.clone(), tools.clone()).await;
    let run_id = h.enqueue("helper", "go").await;
    h.crash_when(&tools.stalled).await;
    assert_eq!(
        h.kinds(&run_id).await.last(),
        Some(&"tool_started"),
        "the intent was logged first"
    );
    *tools.stall.lock().unwrap() = None;
    h.run_once().await;
    assert_eq!(h.status(&run_id).await.0, RunStatus::Succeeded);
    let events = h.events(&run_id).await;
    let started = events
        .iter()
        .filter(|e| matches!(e, RunEvent::ToolStarted { .. }))
        .count();
    let results = events
        .iter()
        .filter(|e| matches!(e, RunEvent::ToolResult { .. }))
        .count();
    assert_eq!((started, results), (1, 1), "no event duplicated");
    let last = model.requests().len() - 1;
    (tools.calls(), model.request(last), run_id, h)
}

async fn crash_in_read_only_tool(db: &TestDb) {
    let (calls, req, run_id, _h) = crash_in_tool(db, "read").await;
    let key = format!("{run_id}:1:c1");
    assert_eq!(
        calls,
        vec![("read".into(), key.clone()), ("read".into(), key)]
    );
    let results = tool_results(req.messages.last().unwrap());
    assert_eq!(results[0].1, "read says \"c1\"", "the re-run's real result");
    assert!(!results[0].2);
}

async fn crash_in_idempotent_tool(db: &TestDb) {
    let (calls, req, run_id, _h) = crash_in_tool(db, "put").await;
    let key = format!("{run_id}:1:c1");
    assert_eq!(
        calls,
        vec![("put".into(), key.clone()), ("put".into(), key)],
        "same key both times"
    );
    assert_eq!(
        tool_results(req.messages.last().unwrap())[0].1,
        "put says \"c1\""
    );
}

async fn crash_in_side_effect_tool(db: &TestDb) {
    let (calls, req, _run_id, _h) = crash_in_tool(db, "send").await;
    assert_eq!(calls.len(), 1, "ran exactly once");
    let results = tool_results(req.messages.last().unwrap());
    assert_eq!(
        results,
        vec![("c1".into(), INTERRUPTED_NOTICE.into(), true)],
        "the model saw outcome unknown"
    );
}

async fn resumed_request_is_byte_identical(db: &TestDb) {
    let script = || {
        vec![
            reply(
                vec![call("c1", "read"), call("c2", "put")],
                StopReason::ToolUse,
            ),
            reply(vec![call("c3", "read")], StopReason::ToolUse),
            reply(vec![text("done")], StopReason::EndTurn),
        ]
    };
    let a = agent(json!({}));
    let straight = ScriptModel::new(script());
    let h1 = Harness::new(
        db,
        a.clone(),
        straight.clone(),
        Arc::new(FakeTools::default()),
    )
    .await;
    h1.enqueue("helper", "fidelity").await;
    h1.run_once().await;

    let db2 = TestDb::new(db.backend, "fidelity-2").await.unwrap();
    let crashing = ScriptModel::new(script());
    *crashing.stall_at.lock().unwrap() = Some(1);
    let h2 = Harness::new(&db2, a, crashing.clone(), Arc::new(FakeTools::default())).await;
    let run_id = h2.enqueue("helper", "fidelity").await;
    h2.crash_when(&crashing.stalled).await;
    *crashing.stall_at.lock().unwrap() = None;
    h2.run_once().await;
    assert_eq!(h2.status(&run_id).await.0, RunStatus::Succeeded);
    let (a_req, b_req) = (straight.requests(), crashing.requests());
    assert_eq!(b_req.len(), 4, "calls: first, crashed, resumed, last");
    assert_eq!(
        b_req[1], b_req[2],
        "the resumed call repeats the interrupted one"
    );
    assert_eq!(
        a_req[1], b_req[2],
        "byte-identical to the uninterrupted run's request"
    );
    assert_eq!(a_req[2], b_req[3]);
    db2.cleanup().await;
}

async fn round_cap_holds_across_a_crash(db: &TestDb) {
    let looping: Vec<_> = (0..10)
        .map(|i| reply(vec![call(&format!("c{i}"), "read")], StopReason::ToolUse))
        .collect();
    let model = ScriptModel::new(looping);
    *model.stall_at.lock().unwrap() = Some(2);
    let h = Harness::new(
        db,
        agent(json!({"budgets": {"max_turns": 3}})),
        model.clone(),
        Arc::new(FakeTools::default()),
    )
    .await;
    let run_id = h.enqueue("helper", "loop forever").await;
    h.crash_when(&model.stalled).await;
    *model.stall_at.lock().unwrap() = None;
    h.run_once().await;
    let (status, _, error) = h.status(&run_id).await;
    assert_eq!(status, RunStatus::MaxRounds);
    assert!(error.unwrap().contains("round cap of 3"));
    assert_eq!(
        model.answered.load(Ordering::SeqCst),
        3,
        "three replies in all, across the crash"
    );
    assert_eq!(h.store.run(&run_id).await.unwrap().unwrap().turns, 3);
    assert_eq!(
        h.events(&run_id)
            .await
            .iter()
            .filter(|e| matches!(e, RunEvent::ToolResult { .. }))
            .count(),
        3,
        "work kept"
    );
}

async fn token_budget(db: &TestDb) {
    let looping: Vec<_> = (0..10)
        .map(|i| reply(vec![call(&format!("c{i}"), "read")], StopReason::ToolUse))
        .collect();
    let model = ScriptModel::new(looping);
    let h = Harness::new(
        db,
        agent(json!({"budgets": {"max_tokens": 25}})),
        model.clone(),
        Arc::new(FakeTools::default()),
    )
    .await;
    let run_id = h.enqueue("helper", "spend").await;
    h.run_once().await;
    let (status, _, error) = h.status(&run_id).await;
    assert_eq!(status, RunStatus::BudgetExhausted);
    assert_eq!(error.as_deref(), Some("used 30 tokens of a budget of 25"));
    assert_eq!(model.answered.load(Ordering::SeqCst), 2);
}

async fn cut_off_reply(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(
            vec![text("I will run"), call("c1", "send")],
            StopReason::MaxTokens,
        ),
        reply(vec![text("fine")], StopReason::EndTurn),
    ]);
    let tools = Arc::new(FakeTools::default());
    let h = Harness::new(db, agent(json!({})), model.clone(), tools.clone()).await;
    let run_id = h.enqueue("helper", "x").await;
    h.run_once().await;
    assert!(
        tools.calls().is_empty(),
        "no tool runs from a truncated reply"
    );
    // The complete call that did not run is named, since the history sent back drops it.
    let notice = model.request(1).messages.last().unwrap().text();
    assert!(
        notice.starts_with(CUT_OFF_NOTICE) && notice.contains(r#"send {"arg":"c1"}"#),
        "{notice}"
    );
    assert_eq!(h.status(&run_id).await.0, RunStatus::Succeeded);
}

async fn pause_turn_resends(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(vec![text("searching…")], StopReason::PauseTurn),
        reply(vec![text("found it")], StopReason::EndTurn),
    ]);
    let h = Harness::new(
        db,
        agent(json!({})),
        model.clone(),
        Arc::new(FakeTools::default()),
    )
    .await;
    let run_id = h.enqueue("helper", "x").await;
    h.run_once().await;
    let second = model.request(1);
    assert_eq!(
        second.messages.last().unwrap().text(),
        "searching…",
        "sent again, paused turn last"
    );
    assert_eq!(h.status(&run_id).await.1.as_deref(), Some("found it"));
}

async fn refusal_ends_the_run(db: &TestDb) {
    let model = ScriptModel::new(vec![reply(
        vec![text("I can't help with that.")],
        StopReason::Refusal,
    )]);
    let h = Harness::new(db, agent(json!({})), model, Arc::new(FakeTools::default())).await;
    let run_id = h.enqueue("helper", "x").await;
    h.run_once().await;
    let (status, _, error) = h.status(&run_id).await;
    assert_eq!(status, RunStatus::Failed);
    assert_eq!(
        error.as_deref(),
        Some("the model refused: I can't help with that.")
    );
}

/// A summary whose own reply stopped because the context window filled up (or at
/// max_tokens) holds less than the conversation it would replace: the compaction is refused,
/// the run fails saying why, and no `compacted` event is logged.
async fn cut_off_summary(db: &TestDb) {
    for stop in [
        StopReason::ModelContextWindowExceeded,
        StopReason::MaxTokens,
    ] {
        let mut first = reply(vec![call("c1", "read")], StopReason::ToolUse);
        first.usage = usage(900, 5);
        let model = Arc::new(ScriptModel {
            replies: vec![
                first,
                reply(vec![text("never asked for")], StopReason::EndTurn),
            ],
            summary: Some("we read c1 and then".into()),
            summary_stop: Some(stop.clone()),
            ..ScriptModel::default()
        });
        let policy = json!({"context": {"window_tokens": 1000, "compact_at": 0.5, "keep_last": 2}});
        let h = Harness::new(
            db,
            agent(policy),
            model.clone(),
            Arc::new(FakeTools::default()),
        )
        .await;
        let run_id = h.enqueue("helper", "long task").await;
        h.run_once().await;
        let (status, _, error) = h.status(&run_id).await;
        assert_eq!(status, RunStatus::Failed, "{stop:?}");
        let error = error.unwrap_or_default();
        assert!(
            error.starts_with("compaction failed: ") && error.contains(stop.as_str()),
            "{error}"
        );
        assert!(!h.kinds(&run_id).await.contains(&"compacted"), "{stop:?}");
        assert_eq!(
            model.requests().len(),
            2,
            "the reply, then the refused summary"
        );
    }
}

async fn compaction(db: &TestDb) {
    let mut first = reply(vec![call("c1", "read")], StopReason::ToolUse);
    first.usage = usage(900, 5);
    let model = Arc::new(ScriptModel {
        replies: vec![
            first,
            reply(vec![call("c2", "read")], StopReason::ToolUse),
            reply(vec![text("done")], StopReason::EndTurn),
        ],
        summary: Some("we read c1".into()),
        ..ScriptModel::default()
    });
    let policy = json!({"context": {"window_tokens": 1000, "compact_at": 0.5, "keep_last": 2}});
    let h = Harness::new(
        db,
        agent(policy),
        model.clone(),
        Arc::new(FakeTools::default()),
    )
    .await;
    let run_id = h.enqueue("helper", "long task").await;
    h.run_once().await;
    assert_eq!(h.status(&run_id).await.0, RunStatus::Succeeded);
    assert!(h.kinds(&run_id).await.contains(&"compacted"));
    let reqs = model.requests();
    let summary_req: ModelRequest = serde_json::from_str(&reqs[1]).unwrap();
    assert!(
        crate::fakes::asks_for_summary(&summary_req),
        "the request ends with the summary request"
    );
    let after: ModelRequest = serde_json::from_str(&reqs[2]).unwrap();
    assert!(
        after.messages[0].text().contains("we read c1"),
        "summary first"
    );
    assert_eq!(
        after.messages.len(),
        3,
        "summary + the kept reply and its results"
    );
    assert_eq!(after.messages[1].role, Role::Assistant);
    assert_eq!(
        h.store.run(&run_id).await.unwrap().unwrap().turns,
        3,
        "the summary call is not a round"
    );
}

async fn context_too_long(db: &TestDb) {
    let model = Arc::new(ScriptModel {
        too_long: true,
        ..ScriptModel::default()
    });
    let h = Harness::new(
        db,
        agent(json!({})),
        model.clone(),
        Arc::new(FakeTools::default()),
    )
    .await;
    let run_id = h.enqueue("helper", "huge").await;
    h.run_once().await;
    let (status, _, error) = h.status(&run_id).await;
    assert_eq!(status, RunStatus::Failed);
    assert_eq!(
        error.as_deref(),
        Some("model call failed: prompt is too long")
    );
    assert_eq!(
        h.kinds(&run_id)
            .await
            .iter()
            .filter(|k| **k == "compacted")
            .count(),
        1,
        "compacted once"
    );
}

async fn corrupt_checkpoint(db: &TestDb) {
    let h = Harness::new(
        db,
        agent(json!({})),
        ScriptModel::new(vec![]),
        Arc::new(FakeTools::default()),
    )
    .await;
    let run_id = h.enqueue("helper", "x").await;
    let lease = h.claim().await;
    lease
        .append_event(
            "run_started",
            &RunEvent::RunStarted {
                agent: "helper".into(),
                agent_hash: "h".into(),
            }
            .payload(),
        )
        .await
        .unwrap();
    lease
        .write_checkpoint(1, 1, b"\x1f\x8b\x08 definitely not a whole gzip stream")
        .await
        .unwrap();
    h.clock.advance(LEASE + Duration::from_secs(1));
    h.run_once().await;
    let (status, _, error) = h.status(&run_id).await;
    assert_eq!(
        status,
        RunStatus::Failed,
        "failed, not retried in a crash loop"
    );
    let error = error.unwrap();
    assert!(
        error.contains(&format!("run {run_id}: checkpoint is corrupt or truncated")),
        "{error}"
    );
}

async fn unknown_agent(db: &TestDb) {
    let h = Harness::new(
        db,
        agent(json!({})),
        ScriptModel::new(vec![]),
        Arc::new(FakeTools::default()),
    )
    .await;
    let run_id = h.enqueue("nobody", "x").await;
    h.run_once().await;
    let (status, _, error) = h.status(&run_id).await;
    assert_eq!(status, RunStatus::Failed);
    assert_eq!(
        error.as_deref(),
        Some("agent 'nobody' is not configured; configured agents: helper")
    );
}

async fn cancel_stops_model_call(db: &TestDb) {
    let model = ScriptModel::new(vec![reply(vec![text("never")], StopReason::EndTurn)]);
    *model.stall_at.lock().unwrap() = Some(0);
    let store = db.store().await;
    let runtime = AgentRuntime::new(
        [agent(json!({}))],
        model.clone(),
        Arc::new(FakeTools::default()),
    );
    let config = nightshift_worker::PoolConfig {
        heartbeat_ms: 200,
        lease_ms: 2000,
        poll_interval_ms: 100,
        ..Default::default()
    };
    let stop = CancellationToken::new();
    let pool = tokio::spawn(
        nightshift_worker::Pool::new(store.clone(), runtime, config).run(stop.clone()),
    );
    let run_id = store
        .enqueue(&NewRun::new("helper", "wait"))
        .await
        .unwrap()
        .run_id;
    tokio::time::timeout(Duration::from_secs(10), model.stalled.notified())
        .await
        .expect("model call started");
    let asked = tokio::time::Instant::now();
    store.cancel_run(&run_id).await.unwrap();
    let run = nightshift_tests::eventually(
        Duration::from_secs(10),
        "the run to be cancelled",
        || async {
            let run = store.run(&run_id).await.unwrap().unwrap();
            (run.status == RunStatus::Cancelled).then_some(run)
        },
    )
    .await;
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "stopped within a heartbeat or so: {:?}",
        asked.elapsed()
    );
    assert!(run.finished_at.is_some());
    stop.cancel();
    pool.await.unwrap().unwrap();
}
