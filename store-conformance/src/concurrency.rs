//! Concurrency keys and their policies (queue, skip, supersede, debounce), the output fence
//! in front of side-effect tools, and the rules for resuming a run — on both backends.

use std::time::Duration;

use crate::TestDb;
use nightshift_store::{
    ConcurrencyPolicy, Error, Heartbeat, JobOptions, JobState, NewResume, NewRun, ResumeReason,
    RunEnd, RunStatus, StopRequest,
};

const LEASE: Duration = Duration::from_secs(30);

fn keyed(prompt: &str, key: &str, policy: ConcurrencyPolicy) -> NewRun {
    NewRun::new("reviewer", prompt).concurrency(key, policy)
}

pub async fn one_job_per_key_runs_at_a_time(db: &TestDb) {
    let store = db.store().await;
    let a = store
        .enqueue(&keyed("a", "pr:1", ConcurrencyPolicy::Queue))
        .await
        .unwrap();
    let b = store
        .enqueue(&keyed("b", "pr:1", ConcurrencyPolicy::Queue))
        .await
        .unwrap();
    let other = store
        .enqueue(&keyed("c", "pr:2", ConcurrencyPolicy::Queue))
        .await
        .unwrap();
    let claimed = store.claim("w1", None, 10, LEASE).await.unwrap();
    let mut ids: Vec<i64> = claimed.iter().map(|l| l.id()).collect();
    ids.sort();
    assert_eq!(ids, vec![a.job_id, other.job_id], "b waits for a's key");
    assert_eq!(
        store.job(b.job_id).await.unwrap().unwrap().status,
        JobState::Queued
    );
    assert_eq!(
        store.job(b.job_id).await.unwrap().unwrap().attempts,
        0,
        "a job that waited for its key was not charged an attempt"
    );
    assert!(store.claim("w2", None, 10, LEASE).await.unwrap().is_empty());
    let lease_a = claimed.into_iter().find(|l| l.id() == a.job_id).unwrap();
    lease_a.ack(Some("done".into())).await.unwrap();
    let next = store.claim("w2", None, 10, LEASE).await.unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].id(), b.job_id, "b runs once a let go");
}

pub async fn concurrent_claimers_respect_keys(db: &TestDb) {
    let store = db.store().await;
    for i in 0..40 {
        store
            .enqueue(&keyed(
                &format!("p{i}"),
                &format!("k{}", i % 4),
                ConcurrencyPolicy::Queue,
            ))
            .await
            .unwrap();
    }
    // Eight claimers at once, each asking for several jobs: at most one job per key may be
    // running at any moment, so at most four jobs are claimed in all.
    let mut tasks = Vec::new();
    for w in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.claim(&format!("w{w}"), None, 5, LEASE).await.unwrap()
        }));
    }
    let mut keys = Vec::new();
    for t in tasks {
        for lease in t.await.unwrap() {
            keys.push(lease.job().concurrency_key.clone().unwrap());
        }
    }
    keys.sort();
    let mut unique = keys.clone();
    unique.dedup();
    assert_eq!(keys, unique, "two jobs of one key were claimed together");
    assert!(!keys.is_empty());
}

pub async fn skip_drops_the_new_run(db: &TestDb) {
    let store = db.store().await;
    let first = store
        .enqueue(&keyed("first", "nightly", ConcurrencyPolicy::Skip))
        .await
        .unwrap();
    let second = store
        .enqueue(&keyed("second", "nightly", ConcurrencyPolicy::Skip))
        .await
        .unwrap();
    assert!(second.skipped && !second.duplicate);
    assert_eq!(
        (second.run_id.as_str(), second.job_id),
        (first.run_id.as_str(), first.job_id)
    );
    assert_eq!(
        store.list_runs(None, 10).await.unwrap().len(),
        1,
        "no run was made"
    );
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    lease.ack(None).await.unwrap();
    let third = store
        .enqueue(&keyed("third", "nightly", ConcurrencyPolicy::Skip))
        .await
        .unwrap();
    assert!(
        !third.skipped && third.run_id != first.run_id,
        "the key is free again"
    );
}

pub async fn supersede_ends_older_runs(db: &TestDb) {
    let store = db.store().await;
    let old = store
        .enqueue(&keyed("review sha1", "pr:7", ConcurrencyPolicy::Supersede))
        .await
        .unwrap();
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!(lease.job().run_id, old.run_id);
    // Before supersession a side-effect call may start.
    assert!(
        lease
            .append_event_unless_cancelled("tool_started", "{}")
            .await
            .unwrap()
            .is_some()
    );
    let queued_old = store
        .enqueue(&keyed("review sha2", "pr:7", ConcurrencyPolicy::Queue))
        .await
        .unwrap();
    let new = store
        .enqueue(&keyed("review sha3", "pr:7", ConcurrencyPolicy::Supersede))
        .await
        .unwrap();
    let mut superseded = new.superseded.clone();
    superseded.sort();
    let mut expected = vec![old.run_id.clone(), queued_old.run_id.clone()];
    expected.sort();
    assert_eq!(superseded, expected);
    for id in [&old.run_id, &queued_old.run_id] {
        let run = store.run(id).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Superseded);
        assert!(run.error.unwrap().contains(&new.run_id));
    }
    assert_eq!(
        store.job(queued_old.job_id).await.unwrap().unwrap().status,
        JobState::Cancelled
    );
    // The running one's side effects are refused from now on, saying it was superseded;
    // its heartbeat says so too (the job ends it as superseded, reading nothing more); its
    // other writes still land.
    assert_eq!(
        lease
            .append_event_unless_cancelled("tool_started", "{}")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        lease
            .append_event_unless_stopped("tool_started", "{}")
            .await
            .unwrap(),
        Err(StopRequest::Supersede)
    );
    assert_eq!(lease.heartbeat(LEASE).await.unwrap(), Heartbeat::Superseded);
    lease.append_event("finished", "{}").await.unwrap();
    // The new run waits for the old job to let go of the key, then runs.
    assert!(store.claim("w2", None, 5, LEASE).await.unwrap().is_empty());
    lease.complete(RunEnd::Superseded).await.unwrap();
    let ended = store.run(&old.run_id).await.unwrap().unwrap();
    assert_eq!(
        ended.status,
        RunStatus::Superseded,
        "acknowledging the stopped job keeps the run superseded"
    );
    assert!(
        ended.error.unwrap().contains(&new.run_id),
        "and the supersession's word on it"
    );
    let next = store.claim("w2", None, 5, LEASE).await.unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].job().run_id, new.run_id);
}

pub async fn debounce_runs_only_the_latest(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let policy = ConcurrencyPolicy::Debounce { window_ms: 10_000 };
    let first = store.enqueue(&keyed("v1", "doc:9", policy)).await.unwrap();
    clock.advance(Duration::from_secs(4));
    let second = store.enqueue(&keyed("v2", "doc:9", policy)).await.unwrap();
    assert_eq!(second.superseded, vec![first.run_id.clone()]);
    clock.advance(Duration::from_secs(9));
    assert!(
        store.claim("w", None, 5, LEASE).await.unwrap().is_empty(),
        "the window restarts with every new event"
    );
    clock.advance(Duration::from_secs(2));
    let claimed = store.claim("w", None, 5, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].job().run_id, second.run_id);
    assert_eq!(claimed[0].job().payload, "v2");
    // A run that started is not debounced away: the next event waits for it instead.
    let third = store.enqueue(&keyed("v3", "doc:9", policy)).await.unwrap();
    assert!(third.superseded.is_empty());
    assert_eq!(
        store.run(&second.run_id).await.unwrap().unwrap().status,
        RunStatus::Running
    );
}

pub async fn resume_rules(db: &TestDb) {
    let (store, clock) = db.manual().await;
    // Without a key, a busy run cannot take a resume job: two jobs of one run never run at
    // once.
    let plain = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    let resume = |run_id: &str, reason: ResumeReason| NewResume {
        run_id: run_id.to_string(),
        payload: reason.to_payload(),
        dedupe_key: None,
        job: JobOptions::default(),
    };
    let msg = || ResumeReason::Message {
        text: "new comment".into(),
    };
    let err = store
        .enqueue_resume(&resume(&plain.run_id, msg()))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Conflict(m) if m.contains("busy")),
        "{err}"
    );
    assert_eq!(store.jobs_of_run(&plain.run_id).await.unwrap().len(), 1);
    // A waiting run's pending wakeup is replaced by a new resume (it wakes early).
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    let now = store.now();
    let wake = ResumeReason::Wakeup {
        reason: "CI".into(),
        slept_at: now,
        due_at: now + 3_600_000,
    };
    let wake_job = lease
        .park_until(now + 3_600_000, &wake.to_payload())
        .await
        .unwrap()
        .unwrap();
    clock.advance(Duration::from_secs(60));
    let early = store
        .enqueue_resume(&resume(&plain.run_id, msg()))
        .await
        .unwrap();
    assert_eq!(
        store.job(wake_job).await.unwrap().unwrap().status,
        JobState::Cancelled
    );
    let next = store.claim("w", None, 5, LEASE).await.unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].id(), early.job_id);
}
