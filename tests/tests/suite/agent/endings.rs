//! How a run ends besides its result: a token budget (budget exhausted), a cut-off reply whose
//! tool never runs, a paused turn sent again, a refusal, a cancel stopping a model call in
//! flight, a corrupt checkpoint and an unknown agent failing the run with a clear error.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::fakes::*;
use nightshift_agent::runtime::CUT_OFF_NOTICE;
use nightshift_agent::{AgentRuntime, RunEvent};
use nightshift_llm::StopReason;
use nightshift_store::{NewRun, RunStatus};
use nightshift_tests::{Arg, TestDb};
use serde_json::json;
use tokio_util::sync::CancellationToken;

pub(super) async fn token_budget(db: &TestDb) {
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

pub(super) async fn cut_off_reply(db: &TestDb) {
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

pub(super) async fn pause_turn_resends(db: &TestDb) {
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

pub(super) async fn refusal_ends_the_run(db: &TestDb) {
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

pub(super) async fn corrupt_checkpoint(db: &TestDb) {
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
        .write_checkpoint(
            1,
            1,
            r#"{"format":"nightshift-checkpoint","version":1,"state":{}}"#,
        )
        .await
        .unwrap();
    // The stored row damaged (a disk, a bad restore): its gzip cut short.
    let damaged = db
        .execute(
            "UPDATE checkpoints SET body = ?1 WHERE run_id = ?2",
            &[
                Arg::Bytes(b"\x1f\x8b\x08 definitely not a whole gzip stream".to_vec()),
                Arg::Text(run_id.clone()),
            ],
        )
        .await;
    assert_eq!(damaged, 1);
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

pub(super) async fn unknown_agent(db: &TestDb) {
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

pub(super) async fn cancel_stops_model_call(db: &TestDb) {
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
