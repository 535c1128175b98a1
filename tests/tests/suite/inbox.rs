//! A run's inbox, through the agent runtime over a real store on both backends: a message
//! sent to a run in each state it can be in — queued before its start job ran, running,
//! finishing its last turn, waiting on an approval, failed meanwhile, ending — reaches the
//! model or is refused when it is sent, never accepted and dropped; and a run ends once.

use std::time::Duration;

use nightshift_agent::RunEvent;
use nightshift_llm::{ContentBlock, Role, StopReason};
use nightshift_scheduler::{Intake, IntakeError, ResumeRequest};
use nightshift_store::{ConcurrencyPolicy, JobKind, JobState, NewRun, RunStatus};
use nightshift_tests::{TestDb, on_both_backends};
use nightshift_worker::{Handler, JobContext, JobOutcome};
use serde_json::json;

use super::fakes::*;

on_both_backends! {
    a_message_to_a_queued_run_reaches_its_first_call => queued_run;
    a_message_during_a_model_call_is_taken_before_the_next => running_run;
    a_message_during_the_last_call_keeps_the_run_going => finishing_run;
    a_message_while_a_call_awaits_approval_follows_the_decision => awaiting_approval;
    a_message_to_a_run_that_failed_meanwhile_ends_saying_why => failed_meanwhile;
    a_message_after_the_inbox_closed_is_refused_when_sent => closed_inbox;
    messages_racing_a_runs_end_are_each_taken_or_refused => racing_the_end;
}

const KEY: &str = "pr-acme/app-7";

fn intake(h: &Harness) -> Intake {
    Intake::new(h.store.clone(), ["helper"])
}

async fn send(intake: &Intake, message: &str) -> Result<nightshift_store::Enqueued, IntakeError> {
    intake
        .resume(ResumeRequest {
            concurrency_key: KEY.into(),
            message: message.into(),
            idempotency_key: None,
        })
        .await
}

async fn keyed_run(h: &Harness, prompt: &str) -> String {
    h.store
        .enqueue(&NewRun::new("helper", prompt).concurrency(KEY, ConcurrencyPolicy::Queue))
        .await
        .unwrap()
        .run_id
}

/// The events of type `finished` the run logged.
async fn ends(h: &Harness, run_id: &str) -> usize {
    h.kinds(run_id)
        .await
        .iter()
        .filter(|k| **k == "finished")
        .count()
}

/// The messages the run's log took, by job.
async fn taken(h: &Harness, run_id: &str) -> Vec<(i64, String)> {
    h.events(run_id)
        .await
        .into_iter()
        .filter_map(|e| match e {
            RunEvent::MessageReceived { job_id, text } => Some((job_id, text)),
            _ => None,
        })
        .collect()
}

/// The text blocks of a request's user turns, in order (the request joins a message that
/// follows the prompt or tool results into that user turn).
fn user_texts(req: &nightshift_llm::ModelRequest) -> Vec<String> {
    req.messages
        .iter()
        .filter(|m| m.role == Role::User)
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// The last user turn of a request: its tool results, then its texts.
fn last_turn(req: &nightshift_llm::ModelRequest) -> (usize, Vec<String>) {
    let last = req.messages.last().unwrap();
    assert_eq!(last.role, Role::User);
    let texts = last
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.clone()),
            _ => None,
        })
        .collect();
    (tool_results(last).len(), texts)
}

async fn nothing_left(h: &Harness) {
    h.clock.advance(Duration::from_secs(86_400));
    assert!(
        h.store.claim("w", None, 5, LEASE).await.unwrap().is_empty(),
        "no job of the run is left to run"
    );
}

async fn queued_run(db: &TestDb) {
    let model = ScriptModel::new(vec![reply(vec![text("reviewed")], StopReason::EndTurn)]);
    let h = Harness::new(db, agent(json!({})), model.clone(), Default::default()).await;
    // The start job is due in a minute; the comment comes before it ran.
    let mut new = NewRun::new("helper", "Review PR 7").concurrency(KEY, ConcurrencyPolicy::Queue);
    new.job.run_at = Some(h.store.now() + 60_000);
    let run_id = h.store.enqueue(&new).await.unwrap().run_id;
    let sent = send(&intake(&h), "alice commented: also check the docs")
        .await
        .unwrap();
    assert_eq!(sent.run_id, run_id);
    let message_job = h.store.job(sent.job_id).await.unwrap().unwrap();
    let start_job = h.store.job(sent.job_id - 1).await.unwrap().unwrap();
    assert_eq!(start_job.kind, JobKind::Start);
    assert!(
        message_job.run_at >= start_job.run_at,
        "the message queues behind the start job: {} < {}",
        message_job.run_at,
        start_job.run_at
    );
    h.clock.advance(Duration::from_secs(60));
    assert!(matches!(h.run_once().await, JobOutcome::Done(_)));
    assert_eq!(
        user_texts(&model.request(0)),
        vec!["Review PR 7", "alice commented: also check the docs"]
    );
    assert_eq!(
        h.status(&run_id).await,
        (RunStatus::Succeeded, Some("reviewed".into()), None)
    );
    assert_eq!(
        h.kinds(&run_id).await,
        vec![
            "run_started",
            "user_message",
            "message_received",
            "assistant_message",
            "finished"
        ]
    );
    let message_job = h.store.job(sent.job_id).await.unwrap().unwrap();
    assert_eq!(
        message_job.status,
        JobState::Succeeded,
        "taken by the start job"
    );
    nothing_left(&h).await;
    assert_eq!(ends(&h, &run_id).await, 1);
}

async fn running_run(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(
            vec![text("reading"), call("r1", "read")],
            StopReason::ToolUse,
        ),
        reply(vec![text("done, docs too")], StopReason::EndTurn),
    ]);
    let h = Harness::new(db, agent(json!({})), model.clone(), Default::default()).await;
    let run_id = keyed_run(&h, "Review PR 7").await;
    let i = intake(&h);
    model.during(0, async move {
        send(&i, "bob: please check the docs").await.unwrap();
    });
    assert!(matches!(h.run_once().await, JobOutcome::Done(_)));
    assert_eq!(
        last_turn(&model.request(1)),
        (1, vec!["bob: please check the docs".to_string()]),
        "the message follows the call's result"
    );
    assert_eq!(taken(&h, &run_id).await.len(), 1);
    assert_eq!(h.status(&run_id).await.0, RunStatus::Succeeded);
    assert_eq!(ends(&h, &run_id).await, 1);
    nothing_left(&h).await;
}

async fn finishing_run(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(vec![text("LGTM")], StopReason::EndTurn),
        reply(vec![text("also fixed the docs note")], StopReason::EndTurn),
    ]);
    let h = Harness::new(db, agent(json!({})), model.clone(), Default::default()).await;
    let run_id = keyed_run(&h, "Review PR 7").await;
    let i = intake(&h);
    model.during(0, async move {
        send(&i, "carol: what about the docs?").await.unwrap();
    });
    assert!(matches!(h.run_once().await, JobOutcome::Done(_)));
    assert_eq!(model.requests().len(), 2, "the message was answered");
    assert_eq!(
        last_turn(&model.request(1)),
        (0, vec!["carol: what about the docs?".to_string()])
    );
    assert_eq!(
        h.status(&run_id).await,
        (
            RunStatus::Succeeded,
            Some("also fixed the docs note".into()),
            None
        )
    );
    assert_eq!(ends(&h, &run_id).await, 1);
    nothing_left(&h).await;
}

async fn awaiting_approval(db: &TestDb) {
    let model = ScriptModel::new(vec![
        reply(
            vec![text("posting"), call("s1", "send")],
            StopReason::ToolUse,
        ),
        reply(vec![text("posted, and read the note")], StopReason::EndTurn),
    ]);
    let guarded = agent(json!({
        "tool_overrides": {"send": {"approval": "required"}},
        "approvals": {"timeout_seconds": 3600}
    }));
    let h = Harness::new(db, guarded, model.clone(), Default::default()).await;
    let run_id = keyed_run(&h, "post it").await;
    let i = intake(&h);
    // Sent while the model answers: the run is running, so it is accepted; then the run
    // parks for the approval.
    model.during(0, async move {
        send(&i, "dave: mention the changelog").await.unwrap();
    });
    assert!(matches!(
        h.run_once().await,
        JobOutcome::AwaitApproval { .. }
    ));
    // The message's own job runs: it is taken, and the run goes back to waiting.
    assert!(matches!(
        h.run_once().await,
        JobOutcome::AwaitApproval { .. }
    ));
    assert_eq!(h.status(&run_id).await.0, RunStatus::AwaitingApproval);
    assert_eq!(taken(&h, &run_id).await.len(), 1);
    // Sent now, while the run awaits the decision: refused, saying what to do.
    let refused = send(&intake(&h), "eve: too").await;
    assert!(
        matches!(&refused, Err(IntakeError::Invalid(m)) if m.contains("awaiting approval")),
        "{refused:?}"
    );
    h.store
        .decide_approval(&run_id, "s1", true, None)
        .await
        .unwrap();
    assert!(matches!(h.run_once().await, JobOutcome::Done(_)));
    assert_eq!(
        last_turn(&model.request(1)),
        (1, vec!["dave: mention the changelog".to_string()]),
        "the message follows the decided call's result"
    );
    assert_eq!(h.status(&run_id).await.0, RunStatus::Succeeded);
    assert_eq!(ends(&h, &run_id).await, 1);
    nothing_left(&h).await;
}

async fn failed_meanwhile(db: &TestDb) {
    let model = ScriptModel::new(vec![reply(vec![text("no")], StopReason::Refusal)]);
    let h = Harness::new(db, agent(json!({})), model.clone(), Default::default()).await;
    let run_id = keyed_run(&h, "Review PR 7").await;
    let i = intake(&h);
    let sent = std::sync::Arc::new(std::sync::Mutex::new(None));
    let slot = sent.clone();
    model.during(0, async move {
        *slot.lock().unwrap() = Some(send(&i, "frank: hello?").await.unwrap());
    });
    assert!(matches!(h.run_once().await, JobOutcome::Done(_)));
    assert_eq!(h.status(&run_id).await.0, RunStatus::Failed);
    let sent = sent
        .lock()
        .unwrap()
        .clone()
        .expect("the message was accepted");
    // Its job runs after the run's end: it ends cancelled saying why, and the run is as it was.
    let lease = h.claim().await;
    assert_eq!(lease.id(), sent.job_id);
    let outcome = h.runtime.handle(JobContext::new(lease.clone())).await;
    nightshift_worker::apply_outcome(&lease, &outcome, &Default::default())
        .await
        .unwrap();
    let job = h.store.job(sent.job_id).await.unwrap().unwrap();
    assert_eq!(job.status, JobState::Cancelled);
    let why = job.last_error.unwrap_or_default();
    assert!(
        why.contains("not delivered") && why.contains("failed"),
        "{why}"
    );
    assert_eq!(h.status(&run_id).await.0, RunStatus::Failed);
    assert_eq!(ends(&h, &run_id).await, 1, "the run ended once");
    assert_eq!(model.requests().len(), 1);
}

async fn closed_inbox(db: &TestDb) {
    let model = ScriptModel::new(vec![]);
    let h = Harness::new(db, agent(json!({})), model, Default::default()).await;
    let run_id = keyed_run(&h, "Review PR 7").await;
    let lease = h.claim().await;
    let first = send(&intake(&h), "one").await.unwrap();
    assert!(
        !lease.close_inbox(true).await.unwrap(),
        "a queued message keeps the inbox open"
    );
    let queued = lease.queued_messages().await.unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].job_id, first.job_id);
    assert!(
        lease
            .take_message(
                first.job_id,
                "message_received",
                r#"{"type":"message_received","job_id":0,"text":"one"}"#
            )
            .await
            .unwrap()
            .is_some()
    );
    assert!(lease.close_inbox(true).await.unwrap());
    let refused = send(&intake(&h), "two").await;
    assert!(
        matches!(&refused, Err(IntakeError::Store(nightshift_store::Error::Conflict(m)))
            if m.contains(&run_id) && m.contains("is ending")),
        "{refused:?}"
    );
    let jobs = h.store.jobs_of_run(&run_id).await.unwrap();
    assert_eq!(jobs.len(), 2, "the refused message left no job");
}

/// Messages sent one after another while the run answers each with a final reply: every
/// message accepted is answered before the run ends, every other one was refused when sent,
/// and the run ends once.
async fn racing_the_end(db: &TestDb) {
    let replies = (0..40)
        .map(|i| reply(vec![text(&format!("answer {i}"))], StopReason::EndTurn))
        .collect();
    let model = ScriptModel::new(replies);
    let h = Harness::new(db, agent(json!({})), model.clone(), Default::default()).await;
    let run_id = keyed_run(&h, "Review PR 7").await;
    let i = intake(&h);
    let sender = tokio::spawn(async move {
        let mut outcomes = Vec::new();
        for n in 0..12 {
            outcomes.push(send(&i, &format!("message {n}")).await);
            tokio::task::yield_now().await;
        }
        outcomes
    });
    let lease = h.claim().await;
    let outcome = h.runtime.handle(JobContext::new(lease.clone())).await;
    nightshift_worker::apply_outcome(&lease, &outcome, &Default::default())
        .await
        .unwrap();
    let outcomes = sender.await.unwrap();
    let accepted: Vec<i64> = outcomes
        .iter()
        .filter_map(|o| o.as_ref().ok().map(|e| e.job_id))
        .collect();
    for o in &outcomes {
        if let Err(e) = o {
            let text = e.to_string();
            assert!(
                text.contains("is ending")
                    || text.contains("already finished")
                    || text.contains("no unfinished run"),
                "a refusal says the run ended: {text}"
            );
        }
    }
    let took: Vec<i64> = taken(&h, &run_id).await.into_iter().map(|t| t.0).collect();
    assert_eq!(took, accepted, "every accepted message was taken, in order");
    for id in &accepted {
        let job = h.store.job(*id).await.unwrap().unwrap();
        assert_eq!(job.status, JobState::Succeeded);
    }
    assert_eq!(h.status(&run_id).await.0, RunStatus::Succeeded);
    assert_eq!(ends(&h, &run_id).await, 1);
    // Every message taken was answered: the last request holds them all.
    let last = model.request(model.requests().len() - 1);
    let asked = user_texts(&last)
        .iter()
        .filter(|t| t.starts_with("message "))
        .count();
    assert_eq!(asked, accepted.len());
    nothing_left(&h).await;
}
