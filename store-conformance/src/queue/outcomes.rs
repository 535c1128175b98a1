//! What a lease holder does with its job: a retry backs off until it dead-letters, a park arms
//! a resume job for later, a cancel stops queued jobs and flags running ones, and a release
//! returns the job at once.

use std::time::Duration;

use nightshift_store::{
    Backoff, CancelOutcome, Error, Heartbeat, JobKind, JobState, NewRun, RetryOutcome, RunEnd,
    RunStatus, StopRequest,
};

use super::LEASE;
use crate::TestDb;

pub async fn retry_backoff_grows_then_dead_letters(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let backoff = Backoff {
        base: Duration::from_secs(1),
        cap: Duration::from_secs(3600),
    };
    let e = store
        .enqueue(&NewRun::new("a", "p").max_attempts(4))
        .await
        .unwrap();
    let mut delays = Vec::new();
    for attempt in 1..=4 {
        let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
        assert_eq!(lease.job().attempts, attempt);
        let now = store.now();
        match lease
            .retry(&backoff, &format!("boom {attempt}"))
            .await
            .unwrap()
        {
            RetryOutcome::Scheduled { run_at } => {
                assert!(attempt < 4);
                assert!(
                    store.claim("w", None, 1, LEASE).await.unwrap().is_empty(),
                    "not before run_at"
                );
                let run = store.run(&e.run_id).await.unwrap().unwrap();
                assert_eq!(run.status, RunStatus::Queued);
                delays.push(run_at - now);
                clock.set(run_at);
            }
            RetryOutcome::DeadLettered => assert_eq!(attempt, 4, "dead-lettered at max attempts"),
        }
    }
    for (i, d) in delays.iter().enumerate() {
        let ceiling = backoff.ceiling(i as i64 + 1).as_millis() as i64;
        assert!(
            *d >= ceiling / 2 && *d <= ceiling,
            "delay {d} for attempt {} outside [{}, {ceiling}]",
            i + 1,
            ceiling / 2
        );
    }
    assert!(
        delays.windows(2).all(|w| w[1] >= w[0]),
        "delays grow: {delays:?}"
    );
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(
        (job.status, job.last_error.as_deref()),
        (JobState::Dead, Some("boom 4"))
    );
    let run = store.run(&e.run_id).await.unwrap().unwrap();
    assert_eq!(
        (run.status, run.error.as_deref()),
        (RunStatus::Failed, Some("boom 4"))
    );
    assert!(run.finished_at.is_some());
    assert!(store.claim("w", None, 1, LEASE).await.unwrap().is_empty());
}

pub async fn park_arms_a_resume_job_for_later(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let e = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    lease.append_event("assistant", "{}").await.unwrap();
    let until = store.now() + 3_600_000;
    let resume_id = lease
        .park_until(until, "{\"reason\":\"nightly\"}")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store.run(&e.run_id).await.unwrap().unwrap().status,
        RunStatus::Waiting
    );
    assert_eq!(
        store.job(e.job_id).await.unwrap().unwrap().status,
        JobState::Parked
    );
    assert!(
        store.claim("w", None, 1, LEASE).await.unwrap().is_empty(),
        "asleep until the wake time"
    );
    assert_eq!(store.next_due().await.unwrap(), Some(until));
    clock.set(until);
    let woke = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!((woke.id(), woke.job().kind), (resume_id, JobKind::Resume));
    assert_eq!(woke.job().payload, "{\"reason\":\"nightly\"}");
    assert_eq!(
        woke.append_event("wake", "{}").await.unwrap(),
        2,
        "the same run's log continues"
    );
    assert_eq!(
        store.run(&e.run_id).await.unwrap().unwrap().status,
        RunStatus::Running
    );
}

pub async fn cancel_stops_queued_and_flags_running_jobs(db: &TestDb) {
    let store = db.store().await;
    let queued = store.enqueue(&NewRun::new("a", "q")).await.unwrap();
    assert_eq!(
        store.cancel_run(&queued.run_id).await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(
        store.run(&queued.run_id).await.unwrap().unwrap().status,
        RunStatus::Cancelled
    );
    assert_eq!(
        store.job(queued.job_id).await.unwrap().unwrap().status,
        JobState::Cancelled
    );
    assert!(
        matches!(store.cancel_run(&queued.run_id).await, Err(Error::Conflict(m)) if m.contains("already finished as cancelled"))
    );
    assert!(matches!(
        store.cancel_run("nope").await,
        Err(Error::NotFound { .. })
    ));

    let running = store.enqueue(&NewRun::new("a", "r")).await.unwrap();
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!(
        store.cancel_run(&running.run_id).await.unwrap(),
        CancelOutcome::Requested
    );
    let before = store
        .job(running.job_id)
        .await
        .unwrap()
        .unwrap()
        .lease_expires_at;
    assert_eq!(
        lease.heartbeat(LEASE * 10).await.unwrap(),
        Heartbeat::CancelRequested
    );
    // A side effect's start is refused, and says it was a cancel.
    assert_eq!(
        lease
            .append_event_unless_stopped("tool_started", "{}")
            .await
            .unwrap(),
        Err(StopRequest::Cancel)
    );
    assert_eq!(
        store
            .job(running.job_id)
            .await
            .unwrap()
            .unwrap()
            .lease_expires_at,
        before,
        "not extended"
    );
    lease
        .append_event("cancelled", "{}")
        .await
        .expect("the holder may still record its end");
    lease.complete(RunEnd::Cancelled).await.unwrap();
    assert_eq!(
        store.run(&running.run_id).await.unwrap().unwrap().status,
        RunStatus::Cancelled
    );
}

pub async fn release_returns_the_job_at_once(db: &TestDb) {
    let store = db.store().await;
    let e = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    lease.release("shutting down").await.unwrap();
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(
        (job.status, job.attempts, job.lease_owner),
        (JobState::Queued, 0, None)
    );
    assert_eq!(
        store.run(&e.run_id).await.unwrap().unwrap().status,
        RunStatus::Queued
    );
    let again = store.claim("w2", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!((again.id(), again.job().attempts), (e.job_id, 1));
    assert!(again.token() > lease.token());
}
