//! Text holding NUL bytes (and the PostgreSQL encoding's own escape character, U+E000)
//! round-trips through the public `Store` API on both backends: prompts, payloads, results,
//! errors, event payloads, keys, approvals and tasks. PostgreSQL's `TEXT` cannot hold a NUL;
//! the store escapes it there and reads back exactly what was written.

use std::time::Duration;

use crate::TestDb;
use nightshift_store::{
    ApprovalStatus, ConcurrencyPolicy, LeasedJob, NewApproval, NewRun, NewTask, RunEnd, RunStatus,
    Store, TaskEnd, TaskStatus,
};

const LEASE: Duration = Duration::from_secs(30);
/// The PostgreSQL encoding's escape character.
const ESC: char = '\u{E000}';

/// A text dense in what an escape could confuse: NULs, the escape character, and the
/// characters that follow it in the encoding.
fn nasty(tag: &str) -> String {
    format!("{tag}: a\0b \0\0 {ESC} {ESC}0 {ESC}{ESC} \0{ESC} 0\0 end\0")
}

async fn claim_one(store: &Store) -> LeasedJob {
    let mut claimed = store.claim("w", None, 1, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 1, "one job is due");
    claimed.remove(0)
}

pub async fn prompt_round_trips(db: &TestDb) {
    let store = db.store().await;
    let prompt = nasty("prompt");
    // Both enqueue paths: without a concurrency key (one statement) and with one.
    let plain = store.enqueue(&NewRun::new("a", &prompt)).await.unwrap();
    let keyed = store
        .enqueue(&NewRun::new("a", &prompt).concurrency("k", ConcurrencyPolicy::Queue))
        .await
        .unwrap();
    for e in [&plain, &keyed] {
        let run = store.run(&e.run_id).await.unwrap().unwrap();
        assert_eq!(run.input, prompt);
        let jobs = store.jobs_of_run(&e.run_id).await.unwrap();
        assert_eq!(jobs[0].payload, prompt);
    }
    let lease = claim_one(&store).await;
    assert_eq!(lease.job().payload, prompt, "the claim reads it back too");
    let listed = store.list_runs(None, 10).await.unwrap();
    assert!(listed.iter().all(|r| r.input == prompt));
}

/// A batch enqueue with a NUL in one run's prompt, and one without any: each run reads back
/// exactly as written (on SQLite a batch is one statement over a JSON list, which must carry
/// the NUL intact; on PostgreSQL the store escapes it).
pub async fn batch_prompt_round_trips(db: &TestDb) {
    let store = db.store().await;
    let prompt = nasty("batch prompt");
    let batches = [
        vec![NewRun::new("a", &prompt), NewRun::new("a", "plain 1")],
        vec![NewRun::new("a", "plain 2"), NewRun::new("a", "plain 3")],
    ];
    for batch in &batches {
        let answers = store.enqueue_many(batch).await.unwrap();
        for (new, answer) in batch.iter().zip(answers) {
            let e = answer.unwrap();
            assert!(!e.duplicate && !e.skipped, "{e:?}");
            let run = store.run(&e.run_id).await.unwrap().unwrap();
            assert_eq!(run.input, new.input);
            let jobs = store.jobs_of_run(&e.run_id).await.unwrap();
            assert_eq!((jobs.len(), jobs[0].id), (1, e.job_id));
            assert_eq!(jobs[0].payload, new.input);
        }
    }
}

pub async fn results_and_errors_round_trip(db: &TestDb) {
    let store = db.store().await;
    let ok = store.enqueue(&NewRun::new("a", "p1")).await.unwrap();
    let result = nasty("final text");
    claim_one(&store)
        .await
        .ack(Some(result.clone()))
        .await
        .unwrap();
    let run = store.run(&ok.run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Succeeded);
    assert_eq!(run.result.as_deref(), Some(result.as_str()));

    let bad = store.enqueue(&NewRun::new("a", "p2")).await.unwrap();
    let error = nasty("error");
    claim_one(&store)
        .await
        .complete(RunEnd::Failed {
            error: error.clone(),
        })
        .await
        .unwrap();
    let run = store.run(&bad.run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.as_deref(), Some(error.as_str()));
    let job = store.job(bad.job_id).await.unwrap().unwrap();
    assert_eq!(job.last_error.as_deref(), Some(error.as_str()));

    // A batch of ends in one settle: both at once.
    store.enqueue(&NewRun::new("a", "p3")).await.unwrap();
    store.enqueue(&NewRun::new("a", "p4")).await.unwrap();
    let leases = store.claim("w", None, 2, LEASE).await.unwrap();
    let ends = [
        (
            &leases[0],
            RunEnd::Succeeded {
                result: Some(result.clone()),
            },
        ),
        (
            &leases[1],
            RunEnd::Failed {
                error: error.clone(),
            },
        ),
    ];
    for ended in store.complete_many(&ends).await.unwrap() {
        ended.unwrap();
    }
    let first = store.run(&leases[0].job().run_id).await.unwrap().unwrap();
    let second = store.run(&leases[1].job().run_id).await.unwrap().unwrap();
    assert_eq!(first.result.as_deref(), Some(result.as_str()));
    assert_eq!(second.error.as_deref(), Some(error.as_str()));
}

pub async fn events_round_trip(db: &TestDb) {
    let store = db.store().await;
    let e = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    let lease = claim_one(&store).await;
    // A raw NUL inside a JSON document (not the escape `\u0000`), as a tool may print it.
    let raw = format!("{{\"text\":\"{}\"}}", nasty("tool output"));
    let escaped = serde_json::json!({ "text": nasty("model text") }).to_string();
    lease.append_event("tool_result", &raw).await.unwrap();
    lease.append_event("assistant", &escaped).await.unwrap();
    lease
        .append_event_unless_cancelled("tool_started", &raw)
        .await
        .unwrap()
        .expect("not cancelled");
    let events = store.events(&e.run_id, 0).await.unwrap();
    let payloads: Vec<&str> = events.iter().map(|ev| ev.payload.as_str()).collect();
    assert_eq!(payloads, [raw.as_str(), escaped.as_str(), raw.as_str()]);
    let parsed: serde_json::Value = serde_json::from_str(&events[1].payload).unwrap();
    assert_eq!(parsed["text"], nasty("model text"));
    // A resume payload holding NULs, armed by a park.
    let wake = nasty("wake");
    let resume_id = lease
        .park_until(store.now() + 60_000, &wake)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(store.job(resume_id).await.unwrap().unwrap().payload, wake);
}

pub async fn job_errors_round_trip(db: &TestDb) {
    let store = db.store().await;
    let e = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    let error = nasty("HTTP 529");
    claim_one(&store)
        .await
        .retry_after(Duration::ZERO, &error)
        .await
        .unwrap();
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(job.last_error.as_deref(), Some(error.as_str()));
    let deferred = nasty("circuit open");
    claim_one(&store)
        .await
        .defer_until(store.now(), &deferred)
        .await
        .unwrap();
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(job.last_error.as_deref(), Some(deferred.as_str()));
}

pub async fn idempotency_keys_dedupe(db: &TestDb) {
    let store = db.store().await;
    let key = format!("delivery\0{ESC}1");
    let first = store
        .enqueue(&NewRun::new("a", "p1").idempotency_key(&key))
        .await
        .unwrap();
    let again = store
        .enqueue(&NewRun::new("a", "p2").idempotency_key(&key))
        .await
        .unwrap();
    assert!(again.duplicate, "the same key with a NUL dedupes");
    assert_eq!((&again.run_id, again.job_id), (&first.run_id, first.job_id));
    // Keys that an escape could confuse with it stay distinct.
    for other in [
        format!("delivery{ESC}0{ESC}1"),
        format!("delivery\0{ESC}{ESC}1"),
        "delivery".to_string(),
        "delivery\u{1}\u{E000}1".to_string(),
    ] {
        let e = store
            .enqueue(&NewRun::new("a", "p").idempotency_key(&other))
            .await
            .unwrap();
        assert!(!e.duplicate, "{other:?} is a different key");
    }
    let run = store.run(&first.run_id).await.unwrap().unwrap();
    assert_eq!(run.idempotency_key.as_deref(), Some(key.as_str()));
    assert_eq!(run.input, "p1");
}

pub async fn concurrency_keys_work(db: &TestDb) {
    let store = db.store().await;
    let key = format!("repo\0{ESC}#1");
    let first = store
        .enqueue(&NewRun::new("a", "p1").concurrency(&key, ConcurrencyPolicy::Queue))
        .await
        .unwrap();
    let second = store
        .enqueue(&NewRun::new("a", "p2").concurrency(&key, ConcurrencyPolicy::Queue))
        .await
        .unwrap();
    let run = store.run(&first.run_id).await.unwrap().unwrap();
    assert_eq!(run.concurrency_key.as_deref(), Some(key.as_str()));
    let active = store.active_run_by_concurrency_key(&key).await.unwrap();
    assert_eq!(
        active.map(|r| r.id),
        Some(second.run_id.clone()),
        "the newest active run of the key"
    );
    let claimed = store.claim("w", None, 2, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 1, "one job per key runs at a time");
    assert_eq!(claimed[0].job().run_id, first.run_id);
    assert_eq!(
        claimed[0].job().concurrency_key.as_deref(),
        Some(key.as_str())
    );
    claimed[0].ack(None).await.unwrap();
    let next = claim_one(&store).await;
    assert_eq!(next.job().run_id, second.run_id, "the key was let go");
    // Supersede finds the active run by the same key.
    let third = store
        .enqueue(&NewRun::new("a", "p3").concurrency(&key, ConcurrencyPolicy::Supersede))
        .await
        .unwrap();
    assert_eq!(third.superseded, vec![second.run_id.clone()]);
}

pub async fn approvals_and_tasks_round_trip(db: &TestDb) {
    let store = db.store().await;
    let e = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    let call_id = format!("call\0{ESC}");
    let input = format!("{{\"cmd\":\"{}\"}}", nasty("input"));
    store
        .request_approval(&NewApproval {
            run_id: &e.run_id,
            call_id: &call_id,
            tool: "shell",
            input: &input,
            input_hash: "h",
            expires_at: store.now() + 60_000,
        })
        .await
        .unwrap();
    let reason = nasty("reason");
    store
        .decide_approval(&e.run_id, &call_id, false, Some(&reason))
        .await
        .unwrap();
    let approval = store.approval(&e.run_id, &call_id).await.unwrap().unwrap();
    assert_eq!(approval.call_id, call_id);
    assert_eq!(approval.input, input);
    assert_eq!(approval.status, ApprovalStatus::Denied);
    assert_eq!(approval.reason.as_deref(), Some(reason.as_str()));

    let command = nasty("command");
    store
        .start_task(&NewTask {
            id: "t1",
            run_id: &e.run_id,
            call_id: &call_id,
            command: &command,
            owner: "daemon",
            deadline_at: store.now() + 60_000,
        })
        .await
        .unwrap();
    let detail = nasty("detail");
    let tail = nasty("output");
    store
        .end_task(
            "t1",
            &TaskEnd {
                status: TaskStatus::Failed,
                exit_code: Some(1),
                detail: &detail,
                output_tail: &tail,
                output_bytes: 42,
            },
        )
        .await
        .unwrap();
    let task = store.task("t1").await.unwrap().unwrap();
    assert_eq!(
        (task.call_id.as_str(), task.command.as_str()),
        (call_id.as_str(), command.as_str())
    );
    assert_eq!(task.detail.as_deref(), Some(detail.as_str()));
    assert_eq!(task.output_tail.as_deref(), Some(tail.as_str()));
}
