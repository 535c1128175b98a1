//! Approvals, through the agent runtime over a real store on both backends, and through the
//! real daemon killed with SIGKILL: a call that needs approval never starts before a
//! decision; the run waits holding no worker; approve runs the call exactly once, deny and
//! the timeout give the model a `denied` result; a decision is bound to its call and made once.

use std::time::Duration;

use nightshift_agent::RunEvent;
use nightshift_llm::StopReason;
use nightshift_store::{ApprovalStatus, Error, JobState, RunStatus};
use nightshift_tests::{TestDb, eventually, on_both_backends};
use nightshift_worker::{Handler, JobContext, JobOutcome};
use serde_json::json;

use super::fakes::*;

on_both_backends! {
    an_approved_call_runs_once_after_the_decision => approved_call_runs_once;
    a_denied_call_never_runs_and_the_model_is_told => denied_call_never_runs;
    the_timeout_denies => timeout_denies;
    a_decision_made_while_the_worker_was_dead_is_applied => decision_while_worker_dead;
    a_sigkilled_daemon_loses_no_approval => sigkilled_daemon_loses_no_approval;
    a_cancelled_run_has_nothing_to_decide => cancelled_run_has_nothing_to_decide;
}

/// `send` (a side effect) needs approval; `read` does not.
fn guarded() -> nightshift_agent::AgentDef {
    agent(json!({
        "tool_overrides": {"send": {"approval": "required"}},
        "approvals": {"timeout_seconds": 3600}
    }))
}

fn script() -> std::sync::Arc<ScriptModel> {
    ScriptModel::new(vec![
        reply(
            vec![
                text("Reading, then posting."),
                call("r1", "read"),
                call("s1", "send"),
            ],
            StopReason::ToolUse,
        ),
        reply(vec![text("finished")], StopReason::EndTurn),
    ])
}

async fn park_for_approval(h: &Harness) -> (String, i64) {
    let run_id = h.enqueue("helper", "post it").await;
    let outcome = h.run_once().await;
    let JobOutcome::AwaitApproval { call_id, until, .. } = outcome else {
        panic!("expected the run to await approval, got {outcome:?}");
    };
    assert_eq!(call_id, "s1");
    (run_id, until)
}

async fn approved_call_runs_once(db: &TestDb) {
    let tools = std::sync::Arc::new(FakeTools::default());
    let h = Harness::new(db, guarded(), script(), tools.clone()).await;
    let started = h.store.now();
    let (run_id, until) = park_for_approval(&h).await;
    assert_eq!(until, started + 3_600_000);
    assert_eq!(h.status(&run_id).await.0, RunStatus::AwaitingApproval);
    let names: Vec<String> = tools.calls().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["read"], "send waits; read ran");
    assert!(
        h.store.claim("w", None, 1, LEASE).await.unwrap().is_empty(),
        "nothing runs while the run waits for a decision"
    );
    let pending = h.store.pending_approvals(10).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].tool.as_str(), pending[0].status.as_str()),
        ("send", "pending")
    );
    h.store
        .decide_approval(&run_id, "s1", true, Some("looks right"))
        .await
        .unwrap();
    let again = h.store.decide_approval(&run_id, "s1", false, None).await;
    assert!(
        matches!(&again, Err(Error::Conflict(m)) if m.contains("already approved")),
        "{again:?}"
    );
    let outcome = h.run_once().await;
    assert!(
        matches!(outcome, JobOutcome::Done(_)),
        "the decision is due at once: {outcome:?}"
    );
    let names: Vec<String> = tools.calls().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["read", "send"], "send ran exactly once");
    assert_eq!(h.status(&run_id).await.0, RunStatus::Succeeded);
    let decided: Vec<RunEvent> = h
        .events(&run_id)
        .await
        .into_iter()
        .filter(|e| matches!(e, RunEvent::ApprovalDecided { .. }))
        .collect();
    assert_eq!(
        decided,
        vec![RunEvent::ApprovalDecided {
            call_id: "s1".into(),
            approved: true,
            reason: Some("looks right".into()),
            by: "operator".into()
        }]
    );
}

async fn denied_call_never_runs(db: &TestDb) {
    let tools = std::sync::Arc::new(FakeTools::default());
    let model = script();
    let h = Harness::new(db, guarded(), model.clone(), tools.clone()).await;
    let (run_id, _) = park_for_approval(&h).await;
    h.store
        .decide_approval(&run_id, "s1", false, Some("not on a Friday"))
        .await
        .unwrap();
    h.run_once().await;
    assert_eq!(tools.calls().len(), 1, "only read ran");
    let results = tool_results(&model.request(1).messages[2]);
    let send = results.iter().find(|r| r.0 == "s1").unwrap();
    assert!(send.2, "an error result");
    assert!(
        send.1.starts_with("denied") && send.1.contains("not on a Friday"),
        "{send:?}"
    );
    assert_eq!(h.status(&run_id).await.0, RunStatus::Succeeded);
}

async fn timeout_denies(db: &TestDb) {
    let tools = std::sync::Arc::new(FakeTools::default());
    let model = script();
    let h = Harness::new(db, guarded(), model.clone(), tools.clone()).await;
    let (run_id, _) = park_for_approval(&h).await;
    h.clock.advance(Duration::from_secs(3600));
    h.run_once().await;
    assert_eq!(tools.calls().len(), 1, "send never ran");
    let late = h.store.decide_approval(&run_id, "s1", true, None).await;
    assert!(matches!(late, Err(Error::Conflict(_))), "{late:?}");
    assert_eq!(
        h.store
            .approval(&run_id, "s1")
            .await
            .unwrap()
            .unwrap()
            .status,
        ApprovalStatus::Expired
    );
    assert!(h.events(&run_id).await.iter().any(|e| matches!(
        e,
        RunEvent::ApprovalDecided { approved: false, by, .. } if by == "timeout"
    )));
    let results = tool_results(&model.request(1).messages[2]);
    assert!(
        results
            .iter()
            .any(|r| r.0 == "s1" && r.2 && r.1.starts_with("denied"))
    );
}

async fn decision_while_worker_dead(db: &TestDb) {
    let tools = std::sync::Arc::new(FakeTools::default());
    let h = Harness::new(db, guarded(), script(), tools.clone()).await;
    let run_id = h.enqueue("helper", "post it").await;
    // The worker logs the request, then dies before the run is parked.
    let lease = h.claim().await;
    let lost = h.runtime.handle(JobContext::new(lease)).await;
    assert!(matches!(lost, JobOutcome::AwaitApproval { .. }));
    h.store
        .decide_approval(&run_id, "s1", true, None)
        .await
        .unwrap();
    h.clock.advance(LEASE + Duration::from_secs(1));
    let outcome = h.run_once().await;
    assert!(matches!(outcome, JobOutcome::Done(_)), "{outcome:?}");
    let names: Vec<String> = tools.calls().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, vec!["read", "send"], "read ran once and send once");
    let jobs = h.store.jobs_of_run(&run_id).await.unwrap();
    assert!(
        jobs.iter().all(|j| j.status != JobState::Queued),
        "{jobs:?}"
    );
}

async fn sigkilled_daemon_loses_no_approval(db: &TestDb) {
    use super::crash::*;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let log = out(d).join("deploys.log");
    let body = command_tool(
        "deploy",
        "side_effect",
        &format!("echo deployed >> '{}'; echo ok", log.display()),
    ) + &agent(
        d,
        "deployer",
        &["deploy"],
        json!([tool_turn("d1", "deploy", json!({})), text_turn("deployed")]),
    ) + "[agents.tool_overrides.deploy]\napproval = \"required\"\n\n";
    let cfg = write_config(db, d, FAST_WORKER, &body);
    let store = db.store().await;
    let mut daemon = serve(&cfg);
    let run_id = enqueue(&cfg, "deployer");
    eventually(
        Duration::from_secs(30),
        "the run to await approval",
        || async {
            let run = store.run(&run_id).await.unwrap()?;
            (run.status == RunStatus::AwaitingApproval).then_some(())
        },
    )
    .await;
    let listed = cli(&cfg, &["approvals"]);
    assert!(
        listed.contains(&run_id) && listed.contains("deploy"),
        "{listed}"
    );
    sigkill(&mut daemon).await;
    // Decided while no daemon runs: the decision is a row, and the next daemon applies it.
    cli(&cfg, &["approve", &run_id, "d1", "--reason", "go"]);
    assert!(
        !log.exists(),
        "nothing ran before a daemon picked the decision up"
    );
    let mut daemon = serve(&cfg);
    let run = wait_finished(&store, &run_id).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "deployed\n");
    sigkill(&mut daemon).await;
}

async fn cancelled_run_has_nothing_to_decide(db: &TestDb) {
    let tools = std::sync::Arc::new(FakeTools::default());
    let h = Harness::new(db, guarded(), script(), tools.clone()).await;
    let (run_id, _) = park_for_approval(&h).await;
    assert_eq!(h.store.pending_approvals(10).await.unwrap().len(), 1);
    h.store.cancel_run(&run_id).await.unwrap();
    assert!(
        h.store.pending_approvals(10).await.unwrap().is_empty(),
        "a cancelled run's call is no longer listed"
    );
    let late = h.store.decide_approval(&run_id, "s1", true, None).await;
    assert!(
        matches!(&late, Err(Error::Conflict(m)) if m.contains("already finished as cancelled")),
        "{late:?}"
    );
    assert_eq!(
        h.store
            .approval(&run_id, "s1")
            .await
            .unwrap()
            .unwrap()
            .status,
        ApprovalStatus::Pending,
        "the refused decision changed nothing"
    );
    assert_eq!(tools.calls().len(), 1, "send never ran");
}
