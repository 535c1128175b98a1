//! How attempts are counted, on both backends with a manual clock: a lease that expires after
//! its attempt recorded progress gives the attempt back (a crash that made progress is not a
//! failure), one that expires without progress counts and dead-letters at `max_attempts`, and
//! a deferral (`LeasedJob::defer_until`) requeues without counting, however often, unless
//! cancellation was requested. (The worker's `JobOutcome::Defer`, written through it, is tested
//! in the suite: `tests/tests/suite/attempts.rs`.)

use std::time::Duration;

use crate::TestDb;
use nightshift_store::{
    Backoff, CancelOutcome, JobState, LeasedJob, NewRun, RetryOutcome, RunProgress, RunStatus,
    Store,
};

/// A short lease, so that the manual clock expires it in one step.
const LEASE: Duration = Duration::from_secs(5);
const PAST_LEASE: Duration = Duration::from_secs(6);

/// Claims the one due job; panics when there is none.
async fn claim_one(store: &Store, worker: &str) -> LeasedJob {
    let mut claimed = store.claim(worker, None, 1, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 1, "one job is due");
    claimed.remove(0)
}

/// Lets `lease` expire (its worker "died") and runs the rescue.
async fn expire(store: &Store, clock: &nightshift_store::ManualClock) {
    clock.advance(PAST_LEASE);
    assert_eq!(
        store.rescue_expired().await.unwrap(),
        1,
        "one lease expired"
    );
}

fn progress(turns: i64) -> RunProgress {
    RunProgress {
        turns,
        ..RunProgress::default()
    }
}

pub async fn expiries_after_progress_never_count(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let e = store
        .enqueue(&NewRun::new("a", "p").max_attempts(2))
        .await
        .unwrap();
    // Twice as many crashes as attempts allowed, each after progress.
    for round in 1..=4 {
        let lease = claim_one(&store, &format!("crashing-{round}")).await;
        assert_eq!(
            lease.job().attempts,
            1,
            "round {round}: the attempt was given back"
        );
        lease.record_progress(&progress(round)).await.unwrap();
        expire(&store, &clock).await;
        let job = store.job(e.job_id).await.unwrap().unwrap();
        assert_eq!(job.status, JobState::Queued, "round {round}");
        assert_eq!(job.attempts, 0, "round {round}: the attempt is not counted");
        let error = job.last_error.unwrap();
        assert!(
            error.contains(&format!("worker crashing-{round} stopped heartbeating"))
                && error.contains("after making progress; the attempt is not counted"),
            "{error}"
        );
        let run = store.run(&e.run_id).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Queued, "round {round}");
        assert_eq!(run.turns, round, "the progress itself was recorded");
    }
    let lease = claim_one(&store, "w").await;
    lease.ack(Some("done".into())).await.unwrap();
    let run = store.run(&e.run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Succeeded);
}

pub async fn expiries_without_progress_count(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let e = store
        .enqueue(&NewRun::new("a", "p").max_attempts(3))
        .await
        .unwrap();
    for attempt in 1..=2 {
        let lease = claim_one(&store, "poison").await;
        assert_eq!(lease.job().attempts, attempt);
        // Events alone are not progress: only record_progress marks the attempt.
        lease.append_event("assistant", "{}").await.unwrap();
        expire(&store, &clock).await;
        let job = store.job(e.job_id).await.unwrap().unwrap();
        assert_eq!(job.status, JobState::Queued);
        assert_eq!(job.attempts, attempt, "an expiry without progress counts");
        assert!(!job.last_error.unwrap().contains("not counted"));
    }
    let _last = claim_one(&store, "poison").await;
    expire(&store, &clock).await;
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(job.status, JobState::Dead);
    assert_eq!(job.attempts, 3);
    let run = store.run(&e.run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    let error = run.error.unwrap();
    assert!(
        error.contains("stopped heartbeating during attempt 3 of 3"),
        "{error}"
    );
    assert!(
        store.claim("w", None, 1, LEASE).await.unwrap().is_empty(),
        "a dead job is never claimed"
    );
}

/// max_attempts 2: no progress (counts), progress (given back) twice, then no progress
/// again: the mark of the earlier attempt belongs to its token, so this one counts and the
/// job dies.
pub async fn mixed_expiries(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let e = store
        .enqueue(&NewRun::new("a", "p").max_attempts(2))
        .await
        .unwrap();
    let _first = claim_one(&store, "w1").await;
    expire(&store, &clock).await;
    assert_eq!(store.job(e.job_id).await.unwrap().unwrap().attempts, 1);
    for _ in 0..2 {
        let lease = claim_one(&store, "w2").await;
        assert_eq!(lease.job().attempts, 2);
        lease.record_progress(&progress(1)).await.unwrap();
        expire(&store, &clock).await;
        let job = store.job(e.job_id).await.unwrap().unwrap();
        assert_eq!(
            (job.status, job.attempts),
            (JobState::Queued, 1),
            "the attempt that made progress was given back, the first one still counts"
        );
    }
    let lease = claim_one(&store, "w3").await;
    assert_eq!(lease.job().attempts, 2);
    expire(&store, &clock).await;
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(
        job.status,
        JobState::Dead,
        "no progress on the last attempt"
    );
    assert!(!job.last_error.unwrap().contains("not counted"));
    assert_eq!(
        store.run(&e.run_id).await.unwrap().unwrap().status,
        RunStatus::Failed
    );
}

pub async fn retry_after_progress_counts(db: &TestDb) {
    let (store, _clock) = db.manual().await;
    let e = store
        .enqueue(&NewRun::new("a", "p").max_attempts(2))
        .await
        .unwrap();
    let lease = claim_one(&store, "w").await;
    lease.record_progress(&progress(1)).await.unwrap();
    let outcome = lease
        .retry_after(Duration::ZERO, "model said no")
        .await
        .unwrap();
    assert!(matches!(outcome, RetryOutcome::Scheduled { .. }));
    assert_eq!(store.job(e.job_id).await.unwrap().unwrap().attempts, 1);
    let lease = claim_one(&store, "w").await;
    lease.record_progress(&progress(2)).await.unwrap();
    let outcome = lease.retry(&Backoff::default(), "again").await.unwrap();
    assert_eq!(outcome, RetryOutcome::DeadLettered, "a retry is a failure");
    assert_eq!(
        store.job(e.job_id).await.unwrap().unwrap().status,
        JobState::Dead
    );
}

pub async fn expiry_after_progress_cancels(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let e = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    let lease = claim_one(&store, "w").await;
    lease.record_progress(&progress(1)).await.unwrap();
    assert_eq!(
        store.cancel_run(&e.run_id).await.unwrap(),
        CancelOutcome::Requested
    );
    expire(&store, &clock).await;
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(job.status, JobState::Cancelled);
    assert_eq!(
        store.run(&e.run_id).await.unwrap().unwrap().status,
        RunStatus::Cancelled
    );
}

pub async fn stale_progress_marks_nothing(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let e = store
        .enqueue(&NewRun::new("a", "p").max_attempts(5))
        .await
        .unwrap();
    let old = claim_one(&store, "old").await;
    clock.advance(PAST_LEASE);
    let current = claim_one(&store, "new").await; // rescues the old lease, then claims
    assert_eq!(current.job().attempts, 2);
    let err = old.record_progress(&progress(9)).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    assert_eq!(store.run(&e.run_id).await.unwrap().unwrap().turns, 0);
    // The stale writer's progress did not mark the current attempt.
    expire(&store, &clock).await;
    assert_eq!(store.job(e.job_id).await.unwrap().unwrap().attempts, 2);
}

pub async fn deferral_comes_back_at_until(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let e = store
        .enqueue(&NewRun::new("a", "p").max_attempts(3))
        .await
        .unwrap();
    let lease = claim_one(&store, "w").await;
    let until = store.now() + 60_000;
    let outcome = lease
        .defer_until(until, "provider down: HTTP 529 overloaded")
        .await
        .unwrap();
    assert_eq!(outcome, RetryOutcome::Scheduled { run_at: until });
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(job.status, JobState::Queued);
    assert_eq!(job.attempts, 0, "the attempt was given back");
    assert_eq!(job.run_at, until);
    assert_eq!(
        job.last_error.as_deref(),
        Some("provider down: HTTP 529 overloaded")
    );
    assert_eq!(job.lease_owner, None);
    assert_eq!(
        store.run(&e.run_id).await.unwrap().unwrap().status,
        RunStatus::Queued
    );
    clock.advance(Duration::from_millis(59_999));
    assert!(
        store.claim("w", None, 1, LEASE).await.unwrap().is_empty(),
        "not before until"
    );
    clock.advance(Duration::from_millis(1));
    let again = claim_one(&store, "w").await;
    assert_eq!(again.job().attempts, 1, "the same attempt number as before");
}

pub async fn deferral_never_dead_letters(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let e = store
        .enqueue(&NewRun::new("a", "p").max_attempts(2))
        .await
        .unwrap();
    // One real failure first: the deferrals must not count on top of it either.
    claim_one(&store, "w")
        .await
        .retry_after(Duration::ZERO, "boom")
        .await
        .unwrap();
    for round in 0..5 {
        let lease = claim_one(&store, "w").await;
        assert_eq!(lease.job().attempts, 2, "round {round}");
        let until = store.now() + 1_000;
        let outcome = lease.defer_until(until, "circuit open").await.unwrap();
        assert_eq!(outcome, RetryOutcome::Scheduled { run_at: until });
        let job = store.job(e.job_id).await.unwrap().unwrap();
        assert_eq!((job.status, job.attempts), (JobState::Queued, 1));
        clock.advance(Duration::from_secs(1));
    }
    claim_one(&store, "w").await.ack(None).await.unwrap();
    assert_eq!(
        store.run(&e.run_id).await.unwrap().unwrap().status,
        RunStatus::Succeeded
    );
}

pub async fn deferral_after_cancel_request_cancels(db: &TestDb) {
    let (store, _clock) = db.manual().await;
    let e = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    let lease = claim_one(&store, "w").await;
    assert_eq!(
        store.cancel_run(&e.run_id).await.unwrap(),
        CancelOutcome::Requested
    );
    let outcome = lease
        .defer_until(store.now() + 60_000, "provider down")
        .await
        .unwrap();
    assert_eq!(outcome, RetryOutcome::DeadLettered, "ended, not requeued");
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(job.status, JobState::Cancelled);
    assert!(job.finished_at.is_some());
    let run = store.run(&e.run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Cancelled);
    assert!(store.claim("w", None, 1, LEASE).await.unwrap().is_empty());
}

pub async fn stale_deferral_is_lease_lost(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let e = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    let old = claim_one(&store, "old").await;
    clock.advance(PAST_LEASE);
    let current = claim_one(&store, "new").await;
    let err = old
        .defer_until(store.now() + 60_000, "provider down")
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(
        job.status,
        JobState::Running,
        "the new holder keeps the job"
    );
    assert_eq!(job.lease_token, current.token());
    assert_eq!(job.lease_owner.as_deref(), Some("new"));
    assert_ne!(job.last_error.as_deref(), Some("provider down"));
}
