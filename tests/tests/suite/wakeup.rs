//! Wakeups set by the agent and supersession, through the agent runtime over a real store
//! on both backends: a run sleeps holding no worker and resumes in the same conversation at
//! the right time; a crash after the call still parks it at the same time; bad wakeups are
//! errors the model can act on; a superseded run never starts a side effect.

use std::time::Duration;

use nightshift_agent::runtime::REFUSED_NOTICE;
use nightshift_agent::{EndStatus, RunEvent, SCHEDULE_WAKEUP};
use nightshift_llm::{ContentBlock, Role, StopReason};
use nightshift_store::{ConcurrencyPolicy, JobKind, JobState, NewRun, RunStatus};
use nightshift_tests::{TestDb, eventually, on_both_backends};
use nightshift_worker::{Handler, JobContext, JobOutcome};
use serde_json::json;

use super::fakes::*;

on_both_backends! {
    a_wakeup_parks_the_run_and_resumes_it_in_the_same_session => wakeup_parks_and_resumes;
    a_crash_after_the_wakeup_call_still_parks_at_the_same_time => crash_after_wakeup_call;
    a_wakeup_outside_the_limits_is_an_error_the_model_reads => wakeup_outside_limits;
    a_superseded_run_never_starts_its_side_effect => superseded_run_is_fenced;
    a_message_wakes_a_sleeping_run_early_in_the_same_session => message_wakes_sleeping_run;
}

fn sleep_call(delay: i64) -> ContentBlock {
    ContentBlock::ToolUse {
        id: "w1".into(),
        name: SCHEDULE_WAKEUP.into(),
        input: json!({"delay_seconds": delay, "reason": "CI to finish"}),
        unparsed: None,
    }
}

fn sleeper() -> nightshift_agent::AgentDef {
    agent(json!({"tools": [SCHEDULE_WAKEUP], "wakeups": {"min_delay_seconds": 60}}))
}

async fn wakeup_parks_and_resumes(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(
            vec![text("I'll wait for CI."), sleep_call(600)],
            StopReason::ToolUse,
        ),
        reply(vec![text("CI passed; done.")], StopReason::EndTurn),
    ]);
    let h = Harness::new(db, sleeper(), model.clone(), Default::default()).await;
    let run_id = h.enqueue("helper", "Merge when CI is green.").await;
    let slept_at = h.store.now();
    let outcome = h.run_once().await;
    let JobOutcome::Park { until, .. } = outcome else {
        panic!("expected the run to park, got {outcome:?}");
    };
    assert_eq!(until, slept_at + 600_000);
    assert_eq!(h.status(&run_id).await.0, RunStatus::Waiting);
    let jobs = h.store.jobs_of_run(&run_id).await.unwrap();
    assert_eq!(jobs.len(), 2);
    assert_eq!(jobs[0].status, JobState::Parked);
    assert_eq!((jobs[1].kind, jobs[1].run_at), (JobKind::Resume, until));
    assert!(
        h.store.claim("w", None, 1, LEASE).await.unwrap().is_empty(),
        "nothing runs while the run sleeps"
    );
    h.clock.advance(Duration::from_secs(600));
    let done = h.run_once().await;
    assert!(matches!(done, JobOutcome::Done(_)), "{done:?}");
    assert_eq!(
        h.status(&run_id).await,
        (RunStatus::Succeeded, Some("CI passed; done.".into()), None)
    );
    assert_eq!(
        h.kinds(&run_id).await,
        vec![
            "run_started",
            "user_message",
            "assistant_message",
            "tool_started",
            "wakeup_scheduled",
            "tool_result",
            "resumed",
            "assistant_message",
            "finished"
        ]
    );
    // The same conversation: the second request extends the first, and its last message is
    // the reminder.
    let first = model.request(0);
    let second = model.request(1);
    assert!(first.tools.iter().any(|t| t.name == SCHEDULE_WAKEUP));
    assert_eq!(second.messages[..first.messages.len()], first.messages[..]);
    let last = second.messages.last().unwrap();
    assert_eq!(last.role, Role::User);
    let reminder = last.text();
    assert!(reminder.contains("CI to finish"), "{reminder}");
    assert!(reminder.contains("10 min later"), "{reminder}");
}

async fn crash_after_wakeup_call(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(vec![sleep_call(3600)], StopReason::ToolUse),
        reply(vec![text("done")], StopReason::EndTurn),
    ]);
    let h = Harness::new(db, sleeper(), model.clone(), Default::default()).await;
    let run_id = h.enqueue("helper", "wait an hour").await;
    let slept_at = h.store.now();
    // The handler logs the wakeup, then the worker dies before the park is recorded.
    let lease = h.claim().await;
    let lost = h.runtime.handle(JobContext::new(lease)).await;
    assert!(matches!(lost, JobOutcome::Park { .. }));
    h.clock.advance(LEASE + Duration::from_secs(1));
    let outcome = h.run_once().await;
    let JobOutcome::Park { until, .. } = outcome else {
        panic!("expected the recovered run to park, got {outcome:?}");
    };
    assert_eq!(
        until,
        slept_at + 3_600_000,
        "the same due time, not a new one"
    );
    assert_eq!(model.requests().len(), 1, "no second model call");
    let scheduled = h
        .events(&run_id)
        .await
        .iter()
        .filter(|e| matches!(e, RunEvent::WakeupScheduled { .. }))
        .count();
    assert_eq!(scheduled, 1, "the wakeup was set once");
}

async fn wakeup_outside_limits(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(vec![sleep_call(5)], StopReason::ToolUse),
        reply(vec![text("ok, not waiting")], StopReason::EndTurn),
    ]);
    let h = Harness::new(db, sleeper(), model.clone(), Default::default()).await;
    let run_id = h.enqueue("helper", "wait a bit").await;
    let outcome = h.run_once().await;
    assert!(matches!(outcome, JobOutcome::Done(_)), "{outcome:?}");
    let results = tool_results(&model.request(1).messages[2]);
    assert_eq!(results.len(), 1);
    assert!(results[0].2, "an error result");
    assert!(
        results[0].1.contains("shortest allowed sleep is 60 s"),
        "{results:?}"
    );
    assert_eq!(h.status(&run_id).await.0, RunStatus::Succeeded);
}

async fn superseded_run_is_fenced(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(
            vec![text("Posting review."), call("c1", "send")],
            StopReason::ToolUse,
        ),
        reply(vec![text("posted")], StopReason::EndTurn),
    ]);
    let tools = std::sync::Arc::new(FakeTools::default());
    let h = Harness::new(db, agent(json!({})), model.clone(), tools.clone()).await;
    let new = |sha: &str| {
        NewRun::new("helper", format!("review head {sha}"))
            .concurrency("pr:7", ConcurrencyPolicy::Supersede)
    };
    let old = h.store.enqueue(&new("aaa")).await.unwrap();
    let lease = h.claim().await;
    // A newer push arrives while the old review is running.
    let newer = h.store.enqueue(&new("bbb")).await.unwrap();
    assert_eq!(newer.superseded, vec![old.run_id.clone()]);
    let outcome = h.runtime.handle(JobContext::new(lease.clone())).await;
    nightshift_worker::apply_outcome(&lease, &outcome, &Default::default())
        .await
        .unwrap();
    assert!(tools.calls().is_empty(), "the side effect never started");
    let (status, _, error) = h.status(&old.run_id).await;
    assert_eq!(status, RunStatus::Superseded);
    assert!(error.unwrap().contains(&newer.run_id));
    let events = h.events(&old.run_id).await;
    assert!(events.iter().any(|e| matches!(
        e,
        RunEvent::ToolResult { content, is_error: true, .. } if content == REFUSED_NOTICE
    )));
    assert!(matches!(
        events.last(),
        Some(RunEvent::Finished {
            status: EndStatus::Superseded,
            ..
        })
    ));
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, RunEvent::ToolStarted { .. })),
        "no tool_started was logged for the refused call"
    );
    // The newer run now takes the key and posts its review.
    h.run_once().await;
    assert_eq!(h.status(&newer.run_id).await.0, RunStatus::Succeeded);
    assert_eq!(tools.calls().len(), 1);
}

// ---- through the real daemon ---------------------------------------------------------------

on_both_backends! {
    a_sleeping_run_survives_shutdown_and_restart_and_wakes_on_time => sleeping_run_survives_restart;
}

async fn sleeping_run_survives_restart(db: &TestDb) {
    use super::crash::*;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // The first reply takes 1.5 s, so SIGTERM lands while the turn that sets the wakeup is
    // in flight: the wakeup must not be lost to the shutdown.
    let mut first = tool_turn(
        "w1",
        SCHEDULE_WAKEUP,
        json!({"delay_seconds": 3, "reason": "the build"}),
    );
    first["delay_ms"] = json!(1500);
    let body = agent(
        d,
        "sleeper",
        &[SCHEDULE_WAKEUP],
        json!([first, text_turn("woke and finished")]),
    ) + "[agents.wakeups]\nmin_delay_seconds = 1\n\n";
    let cfg = write_config(db, d, FAST_WORKER, &body);
    let store = db.store().await;
    let daemon = serve(&cfg);
    let run_id = enqueue(&cfg, "sleeper");
    eventually(Duration::from_secs(30), "the run to start", || async {
        let run = store.run(&run_id).await.unwrap()?;
        (run.status == RunStatus::Running).then_some(())
    })
    .await;
    sigterm(daemon).await;
    // Whether the drain finished the turn or released the job, the run is not lost: start
    // again and it sleeps, then wakes.
    let daemon = serve(&cfg);
    let wakeup = eventually(Duration::from_secs(30), "the run to sleep", || async {
        store.pending_wakeups(10).await.unwrap().into_iter().next()
    })
    .await;
    assert_eq!(wakeup.run_id, run_id);
    assert_eq!(wakeup.reason().as_deref(), Some("the build"));
    let listed = cli(&cfg, &["runs", "wakeups"]);
    assert!(
        listed.contains(&run_id) && listed.contains("the build"),
        "{listed}"
    );
    // Restart while it sleeps: the wakeup lives in the store, not in the process. (The first
    // daemon's drain may have parked the run already: wait until this one is up, its signal
    // handlers installed, before stopping it.)
    eventually(
        Duration::from_secs(30),
        "the second daemon to register",
        || async { (!store.workers().await.unwrap().is_empty()).then_some(()) },
    )
    .await;
    sigterm(daemon).await;
    assert_eq!(
        store.run(&run_id).await.unwrap().unwrap().status,
        RunStatus::Waiting
    );
    let daemon = serve(&cfg);
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    assert_eq!(run.result.as_deref(), Some("woke and finished"));
    let log = events(&store, &run_id).await;
    let scheduled = log
        .iter()
        .filter(|(_, e)| matches!(e, RunEvent::WakeupScheduled { .. }))
        .count();
    assert_eq!(scheduled, 1, "{:?}", kinds(&log));
    let (resumed, reminder) = log
        .iter()
        .find_map(|(row, e)| match e {
            RunEvent::Resumed { reminder, .. } => Some((row.created_at, reminder.clone())),
            _ => None,
        })
        .expect("a resumed event");
    assert!(resumed >= wakeup.due_at, "woke before it was due");
    assert!(reminder.contains("the build"), "{reminder}");
    sigterm(daemon).await;
}

async fn message_wakes_sleeping_run(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(vec![sleep_call(3600)], StopReason::ToolUse),
        reply(vec![text("thanks, on it")], StopReason::EndTurn),
    ]);
    let h = Harness::new(db, sleeper(), model.clone(), Default::default()).await;
    let run_id = h
        .store
        .enqueue(
            &NewRun::new("helper", "review PR 7, then wait for comments")
                .concurrency("pr:7", ConcurrencyPolicy::Queue),
        )
        .await
        .unwrap()
        .run_id;
    assert!(matches!(h.run_once().await, JobOutcome::Park { .. }));
    h.clock.advance(Duration::from_secs(60));
    // A new comment for the PR continues the run found by its key.
    let resumed = nightshift_scheduler::Intake::new(h.store.clone(), ["helper"])
        .resume(nightshift_scheduler::ResumeRequest {
            concurrency_key: "pr:7".into(),
            message: "@bot please look at the tests too".into(),
            idempotency_key: Some("comment-991".into()),
        })
        .await
        .unwrap();
    assert_eq!(resumed.run_id, run_id);
    let redelivered = nightshift_scheduler::Intake::new(h.store.clone(), ["helper"])
        .resume(nightshift_scheduler::ResumeRequest {
            concurrency_key: "pr:7".into(),
            message: "@bot please look at the tests too".into(),
            idempotency_key: Some("comment-991".into()),
        })
        .await
        .unwrap();
    assert!(redelivered.duplicate && redelivered.job_id == resumed.job_id);
    assert!(matches!(h.run_once().await, JobOutcome::Done(_)));
    let last = model.request(1).messages.last().unwrap().text();
    assert!(
        last.starts_with("@bot please look at the tests too"),
        "{last}"
    );
    assert!(last.contains("woke you early"), "{last}");
    h.clock.advance(Duration::from_secs(3600));
    assert!(
        h.store.claim("w", None, 5, LEASE).await.unwrap().is_empty(),
        "the replaced wakeup never fires"
    );
    let missing = nightshift_scheduler::Intake::new(h.store.clone(), ["helper"])
        .resume(nightshift_scheduler::ResumeRequest {
            concurrency_key: "pr:7".into(),
            message: "again".into(),
            idempotency_key: None,
        })
        .await;
    assert!(
        matches!(missing, Err(nightshift_scheduler::IntakeError::NotFound(_))),
        "a finished run is not resumed: {missing:?}"
    );
}
