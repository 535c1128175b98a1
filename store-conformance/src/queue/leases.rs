//! Lease conformance: an expired lease is reclaimed and its old holder fenced, an expiry on
//! the last attempt dead-letters, `rescue_expired` returns expired jobs to the queue, and a
//! claim rescues at most once a second.

use std::time::Duration;

use nightshift_store::{Error, Heartbeat, JobState, NewRun, RunProgress, RunStatus};

use super::LEASE;
use crate::TestDb;

pub async fn expired_lease_is_reclaimed(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let e = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    let old = store
        .claim("old", None, 1, Duration::from_secs(10))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(old.job().lease_owner.as_deref(), Some("old"));
    assert!(
        store.claim("new", None, 1, LEASE).await.unwrap().is_empty(),
        "lease holds"
    );
    clock.advance(Duration::from_secs(11));
    let new = store.claim("new", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!(new.id(), e.job_id);
    assert!(new.token() > old.token(), "a fresh, larger token");
    assert_eq!(new.job().attempts, 2);

    let lost = |r: Result<_, Error>| match r {
        Err(Error::LeaseLost { job_id, token, .. }) => {
            assert_eq!((job_id, token), (old.id(), old.token()))
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    };
    lost(old.heartbeat(LEASE).await.map(|_| ()));
    lost(
        old.append_event("tool_started", &long_document("stale event"))
            .await
            .map(|_| ()),
    );
    lost(old.write_checkpoint(0, 1, &long_document("stale")).await);
    lost(old.ack(Some("stale".into())).await);
    lost(old.retry_after(Duration::ZERO, "stale").await.map(|_| ()));
    lost(old.park_until(0, "{}").await.map(|_| ()));
    lost(old.release("stale").await);
    let progress = RunProgress {
        turns: 3,
        input_tokens: 100,
        cost_usd: 0.25,
        agent_hash: Some("h".into()),
        ..RunProgress::default()
    };
    lost(old.record_progress(&progress).await);
    assert_eq!(
        store.run(&e.run_id).await.unwrap().unwrap().turns,
        0,
        "stale progress not written"
    );
    assert!(
        store.events(&e.run_id, 0).await.unwrap().is_empty(),
        "no event written"
    );
    assert!(store.latest_checkpoint(&e.run_id).await.unwrap().is_none());
    assert_eq!(
        store.run_storage(&e.run_id).await.unwrap(),
        nightshift_store::RunStorage::default(),
        "the refused writes stored no content either"
    );
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(
        (job.status, job.lease_owner.as_deref()),
        (JobState::Running, Some("new"))
    );
    assert_eq!(
        store.jobs_of_run(&e.run_id).await.unwrap().len(),
        1,
        "no job armed"
    );

    assert_eq!(
        new.append_event("tool_started", "{\"n\":1}").await.unwrap(),
        1
    );
    assert_eq!(
        new.append_event("tool_result", "{\"n\":2}").await.unwrap(),
        2
    );
    let document = long_document("new");
    new.write_checkpoint(2, 1, &document).await.unwrap();
    let cp = store.latest_checkpoint(&e.run_id).await.unwrap().unwrap();
    assert_eq!(
        (cp.through_seq, cp.lease_token, cp.document.as_str()),
        (2, new.token(), document.as_str())
    );
    let events = store.events(&e.run_id, 0).await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.lease_token).collect::<Vec<_>>(),
        vec![new.token(); 2]
    );
    assert!(matches!(
        new.heartbeat(LEASE).await.unwrap(),
        Heartbeat::Extended { .. }
    ));
    new.record_progress(&progress).await.unwrap();
    let run = store.run(&e.run_id).await.unwrap().unwrap();
    assert_eq!(
        (
            run.turns,
            run.input_tokens,
            run.cost_usd,
            run.agent_hash.as_deref()
        ),
        (3, 100, 0.25, Some("h"))
    );
    new.ack(Some("done".into())).await.unwrap();
    let run = store.run(&e.run_id).await.unwrap().unwrap();
    assert_eq!(
        (run.status, run.result.as_deref()),
        (RunStatus::Succeeded, Some("done"))
    );
    lost(old.ack(None).await);
}

pub async fn expired_lease_on_last_attempt_dead_letters(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let e = store
        .enqueue(&NewRun::new("a", "p").max_attempts(1))
        .await
        .unwrap();
    let _crashed = store
        .claim("gone", None, 1, Duration::from_secs(5))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(6));
    assert!(store.claim("w", None, 1, LEASE).await.unwrap().is_empty());
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(job.status, JobState::Dead);
    assert!(
        job.last_error
            .unwrap()
            .contains("worker gone stopped heartbeating during attempt 1 of 1")
    );
    let run = store.run(&e.run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert!(run.error.unwrap().contains("lease expired"));
}

/// `rescue_expired` (what a worker pool runs apart from its claims) returns a job whose lease
/// expired to the queue and its run with it, leaves a job whose lease holds alone, and fences
/// the old holder; the next claim takes the job with a fresh token.
pub async fn rescue_expired_returns_expired_jobs(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let expiring = store.enqueue(&NewRun::new("a", "short")).await.unwrap();
    let old = store
        .claim("old", None, 1, Duration::from_secs(10))
        .await
        .unwrap()
        .remove(0);
    store.enqueue(&NewRun::new("a", "long")).await.unwrap();
    let holding = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!(
        store.rescue_expired().await.unwrap(),
        0,
        "every lease holds"
    );
    clock.advance(Duration::from_secs(11));
    assert_eq!(store.rescue_expired().await.unwrap(), 1);
    let job = store.job(expiring.job_id).await.unwrap().unwrap();
    assert_eq!((job.status, job.lease_owner), (JobState::Queued, None));
    assert_eq!(
        store.run(&expiring.run_id).await.unwrap().unwrap().status,
        RunStatus::Queued
    );
    assert_eq!(
        store.job(holding.id()).await.unwrap().unwrap().status,
        JobState::Running,
        "a lease that holds is left alone"
    );
    assert!(matches!(
        old.heartbeat(LEASE).await,
        Err(Error::LeaseLost { .. })
    ));
    assert_eq!(
        store.rescue_expired().await.unwrap(),
        0,
        "nothing left to rescue"
    );
    let again = store.claim("new", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!(again.id(), expiring.job_id);
    assert!(again.token() > old.token());
}

/// A claim returns expired leases to the queue itself only when no rescue ran in the last
/// second (by the store's clock), on both backends: a worker pool's own `rescue_expired`
/// every 500 ms spares its claims the statement.
pub async fn claims_rescue_once_a_second(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let expiring = store.enqueue(&NewRun::new("a", "short")).await.unwrap();
    let old = store
        .claim("old", None, 1, Duration::from_millis(100))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(store.rescue_expired().await.unwrap(), 0, "the lease holds");
    clock.advance(Duration::from_millis(500));
    // The lease expired, but a rescue ran half a second ago: this claim does not rescue.
    let claimed = store.claim("new", None, 1, LEASE).await.unwrap();
    assert!(claimed.is_empty(), "{claimed:?}");
    assert_eq!(
        store.job(expiring.job_id).await.unwrap().unwrap().status,
        JobState::Running
    );
    clock.advance(Duration::from_millis(600));
    // A second after the last rescue the claim rescues first, then takes the job.
    let again = store.claim("new", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!(again.id(), expiring.job_id);
    assert!(again.token() > old.token());
}

/// A JSON document with a string long enough to be stored as a blob.
fn long_document(what: &str) -> String {
    serde_json::json!({"what": what, "text": format!("{what} ").repeat(100)}).to_string()
}
