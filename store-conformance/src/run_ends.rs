//! Runs whose end the store decides — cancelled or superseded while no job of them runs,
//! failed by a retry on the last attempt, cancelled by a deferral or park that finds a cancel
//! pending, failed or cancelled by the rescue of a lost worker's job — are told of once, to
//! the hook the daemon gives (`Store::on_run_ended_by_store`); a run whose job is running is
//! not (its worker tells of its end when the job stops), on both backends.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::TestDb;
use nightshift_store::{
    CancelOutcome, ConcurrencyPolicy, DeliveryTaken, DeliveryWork, LeasedJob, ManualClock, NewRun,
    RunStatus, Store,
};

type Told = Arc<Mutex<Vec<(String, RunStatus)>>>;

/// Runs of one key under the supersede policy.
fn keyed(prompt: &str) -> NewRun {
    NewRun::new("a", prompt).concurrency("k", ConcurrencyPolicy::Supersede)
}

/// What the hook was told since the last call.
fn drain(told: &Told) -> Vec<(String, RunStatus)> {
    std::mem::take(&mut *told.lock().unwrap())
}

/// The one job a claim leases.
async fn lease_one(store: &Store) -> LeasedJob {
    let mut leased = store
        .claim("w", None, 1, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(leased.len(), 1, "one job claimed");
    leased.remove(0)
}

/// The run of the one job a claim leases.
async fn claim_one(store: &Store) -> String {
    lease_one(store).await.job().run_id.clone()
}

/// A hook on `store` recording what it is told.
fn listen(store: &Store) -> Told {
    let told: Told = Arc::default();
    let sink = told.clone();
    store.on_run_ended_by_store(Arc::new(move |run| {
        sink.lock().unwrap().push((run.id.clone(), run.status));
    }));
    told
}

pub async fn told_once(db: &TestDb) {
    let store = db.store().await;
    let told = listen(&store);

    // Cancelled while queued: told, as it was ended.
    let queued = store.enqueue(&NewRun::new("a", "queued")).await.unwrap();
    let outcome = store.cancel_run(&queued.run_id).await.unwrap();
    assert_eq!(outcome, CancelOutcome::Cancelled);
    assert_eq!(
        drain(&told),
        [(queued.run_id.clone(), RunStatus::Cancelled)]
    );

    // Cancelled while its job runs: only asked to stop; nothing told.
    let running = store.enqueue(&NewRun::new("a", "running")).await.unwrap();
    assert_eq!(claim_one(&store).await, running.run_id);
    let outcome = store.cancel_run(&running.run_id).await.unwrap();
    assert_eq!(outcome, CancelOutcome::Requested);
    assert_eq!(drain(&told), []);

    // Superseded while its job runs: not told; superseded while queued: told, by each way
    // of enqueueing.
    let first = store.enqueue(&keyed("first")).await.unwrap();
    assert_eq!(claim_one(&store).await, first.run_id);
    let second = store.enqueue(&keyed("second")).await.unwrap();
    assert_eq!(second.superseded, std::slice::from_ref(&first.run_id));
    assert!(second.superseded_idle.is_empty());
    assert_eq!(drain(&told), [], "the running run's worker tells of it");

    let third = store.enqueue(&keyed("third")).await.unwrap();
    assert_eq!(third.superseded_idle, std::slice::from_ref(&second.run_id));
    assert_eq!(
        drain(&told),
        [(second.run_id.clone(), RunStatus::Superseded)]
    );

    let batch = store.enqueue_many(&[keyed("fourth")]).await.unwrap();
    let fourth = batch[0].as_ref().unwrap();
    assert_eq!(
        drain(&told),
        [(third.run_id.clone(), RunStatus::Superseded)]
    );

    let taken = store
        .take_webhook_delivery(
            "gh",
            "d-1",
            "push",
            DeliveryWork::Start(keyed("fifth")),
            "pushes",
        )
        .await
        .unwrap();
    assert!(matches!(taken, DeliveryTaken::Enqueued(_)), "{taken:?}");
    assert_eq!(
        drain(&told),
        [(fourth.run_id.clone(), RunStatus::Superseded)]
    );

    // A job that parks with a cancel pending: the park ends the run, and tells of it.
    let parking = store.enqueue(&NewRun::new("a", "parking")).await.unwrap();
    let leased = lease_one(&store).await;
    assert_eq!(leased.job().run_id, parking.run_id);
    let outcome = store.cancel_run(&parking.run_id).await.unwrap();
    assert_eq!(outcome, CancelOutcome::Requested);
    assert_eq!(drain(&told), []);
    assert_eq!(leased.park_until(i64::MAX / 2, "{}").await.unwrap(), None);
    assert_eq!(
        drain(&told),
        [(parking.run_id.clone(), RunStatus::Cancelled)]
    );

    // A retry with attempts to spare ends nothing; on the last attempt it fails the run, and
    // a deferral finding a cancel pending cancels it: the store tells of both.
    let failing = store
        .enqueue(&NewRun::new("a", "failing").max_attempts(2))
        .await
        .unwrap();
    for attempt in 1..=2 {
        let leased = lease_one(&store).await;
        assert_eq!(leased.job().run_id, failing.run_id);
        leased.retry_after(Duration::ZERO, "boom").await.unwrap();
        let want = if attempt == 2 {
            vec![(failing.run_id.clone(), RunStatus::Failed)]
        } else {
            Vec::new()
        };
        assert_eq!(drain(&told), want, "attempt {attempt}");
    }
    let deferred = store.enqueue(&NewRun::new("a", "deferred")).await.unwrap();
    let leased = lease_one(&store).await;
    assert_eq!(leased.job().run_id, deferred.run_id);
    store.cancel_run(&deferred.run_id).await.unwrap();
    leased.defer_until(0, "outage").await.unwrap();
    assert_eq!(
        drain(&told),
        [(deferred.run_id.clone(), RunStatus::Cancelled)]
    );

    // A cancel refused (the run has ended) tells nothing.
    assert!(store.cancel_run(&queued.run_id).await.is_err());
    assert_eq!(drain(&told), []);
}

pub async fn rescue_told_once(db: &TestDb) {
    let clock = Arc::new(ManualClock::starting_now());
    let store = db.store_with(clock.clone()).await;
    let told = listen(&store);
    let lease = Duration::from_secs(30);

    // Three runs claimed by a worker that is then lost: one on its last attempt, one with a
    // cancel pending, one with attempts to spare.
    let last = store
        .enqueue(&NewRun::new("a", "last").max_attempts(1))
        .await
        .unwrap();
    let cancelled = store.enqueue(&NewRun::new("a", "cancelled")).await.unwrap();
    let again = store.enqueue(&NewRun::new("a", "again")).await.unwrap();
    let leased = store.claim("lost", None, 3, lease).await.unwrap();
    assert_eq!(leased.len(), 3);
    let outcome = store.cancel_run(&cancelled.run_id).await.unwrap();
    assert_eq!(outcome, CancelOutcome::Requested);
    assert_eq!(
        drain(&told),
        [],
        "the running runs are their worker's to tell of"
    );

    clock.advance(lease + Duration::from_secs(1));
    assert_eq!(store.rescue_expired().await.unwrap(), 3);
    let mut got = drain(&told);
    got.sort_by(|a, b| a.0.cmp(&b.0));
    let mut want = vec![
        (last.run_id.clone(), RunStatus::Failed),
        (cancelled.run_id.clone(), RunStatus::Cancelled),
    ];
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got, want, "the queued-again run did not end");
    let again = store.run(&again.run_id).await.unwrap().unwrap();
    assert_eq!(again.status, RunStatus::Queued);

    // The same through a claim that finds a rescue due.
    let lost = store
        .enqueue(&NewRun::new("a", "lost in a claim").max_attempts(1))
        .await
        .unwrap();
    let leased = store.claim("lost", None, 2, lease).await.unwrap();
    assert_eq!(leased.len(), 2, "the run queued again and the new one");
    clock.advance(lease + Duration::from_secs(1));
    // The claim rescues first: the lost run fails, the other is queued again (and claimed).
    let claimed = store.claim("w", None, 1, lease).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].job().run_id, again.id);
    let got = drain(&told);
    assert!(
        got.contains(&(lost.run_id.clone(), RunStatus::Failed)),
        "{got:?}"
    );
    assert_eq!(got.len(), 1, "{got:?}");
}
