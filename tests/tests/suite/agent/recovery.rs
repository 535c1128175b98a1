//! Recovery after a crash (the handler's task aborted mid-step, then the lease reclaimed): a
//! read-only or idempotent call interrupted runs again with the same key, a side-effect call
//! never runs again, an unresolved outcome keeps a repeatable call open for the next try, the
//! resumed request is byte-identical, and the round cap holds across the crash.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::fakes::*;
use nightshift_agent::RunEvent;
use nightshift_agent::runtime::INTERRUPTED_NOTICE;
use nightshift_llm::{ModelRequest, StopReason};
use nightshift_store::RunStatus;
use nightshift_tests::TestDb;
use serde_json::json;

/// A tool that cannot tell what its call did ("unresolved": a request may have reached the
/// other side and could not be looked up): an idempotent call logs no result, the job is
/// tried again, and the call runs again under the same key; a side-effect call's answer is
/// its result (it is never run again).
pub(super) async fn unresolved_outcome(db: &TestDb) {
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

pub(super) async fn crash_in_read_only_tool(db: &TestDb) {
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

pub(super) async fn crash_in_idempotent_tool(db: &TestDb) {
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

pub(super) async fn crash_in_side_effect_tool(db: &TestDb) {
    let (calls, req, _run_id, _h) = crash_in_tool(db, "send").await;
    assert_eq!(calls.len(), 1, "ran exactly once");
    let results = tool_results(req.messages.last().unwrap());
    assert_eq!(
        results,
        vec![("c1".into(), INTERRUPTED_NOTICE.into(), true)],
        "the model saw outcome unknown"
    );
}

pub(super) async fn resumed_request_is_byte_identical(db: &TestDb) {
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

pub(super) async fn round_cap_holds_across_a_crash(db: &TestDb) {
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
