//! The worker's `JobOutcome::Defer` is written through `LeasedJob::defer_until`: the job comes
//! back at its time with its attempts unchanged, even on its only attempt. How the store
//! counts attempts (expiries after progress, deferrals, retries) is in the store's conformance
//! suite (`store-conformance/src/attempts.rs`).

use std::time::Duration;

use nightshift_store::{Backoff, JobState, LeasedJob, NewRun, Store};
use nightshift_tests::{TestDb, on_both_backends};
use nightshift_worker::{JobOutcome, apply_outcome};

/// A short lease, so that the manual clock expires it in one step.
const LEASE: Duration = Duration::from_secs(5);

on_both_backends! {
    outcome_defer_is_written_through_defer_until => outcome_defer_is_written;
}

/// Claims the one due job; panics when there is none.
async fn claim_one(store: &Store, worker: &str) -> LeasedJob {
    let mut claimed = store.claim(worker, None, 1, LEASE).await.unwrap();
    assert_eq!(claimed.len(), 1, "one job is due");
    claimed.remove(0)
}

async fn outcome_defer_is_written(db: &TestDb) {
    let (store, _clock) = db.manual().await;
    let e = store
        .enqueue(&NewRun::new("a", "p").max_attempts(1))
        .await
        .unwrap();
    let lease = claim_one(&store, "w").await;
    let until = store.now() + 5_000;
    let outcome = JobOutcome::Defer {
        until,
        error: "circuit open for model m".into(),
    };
    apply_outcome(&lease, &outcome, &Backoff::default())
        .await
        .unwrap();
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(
        (job.status, job.attempts, job.run_at),
        (JobState::Queued, 0, until),
        "on its only attempt, yet not dead"
    );
    assert_eq!(job.last_error.as_deref(), Some("circuit open for model m"));
}
