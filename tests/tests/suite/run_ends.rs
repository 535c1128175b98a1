//! Runs the store ends while no job of them runs — cancelled or superseded while queued —
//! are told of once, to the hook the daemon gives (`Store::on_run_ended_without_job`), by
//! every way a run is cancelled or superseded; a run whose job is running is not (its worker
//! tells of its end when the job stops), on both backends.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use nightshift_store::{
    CancelOutcome, ConcurrencyPolicy, DeliveryRecord, DeliveryTaken, DeliveryWork, Enqueued,
    NewRun, RunStatus, Store,
};
use nightshift_tests::{TestDb, on_both_backends};

on_both_backends! {
    runs_ended_while_no_job_runs_are_told_of_once => told_once;
}

type Told = Arc<Mutex<Vec<(String, RunStatus)>>>;

/// Runs of one key under the supersede policy.
fn keyed(prompt: &str) -> NewRun {
    NewRun::new("a", prompt).concurrency("k", ConcurrencyPolicy::Supersede)
}

/// What the hook was told since the last call.
fn drain(told: &Told) -> Vec<(String, RunStatus)> {
    std::mem::take(&mut *told.lock().unwrap())
}

async fn claim_one(store: &Store) -> String {
    let leased = store
        .claim("w", None, 1, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(leased.len(), 1, "one job claimed");
    leased[0].job().run_id.clone()
}

async fn told_once(db: &TestDb) {
    let store = db.store().await;
    let told: Told = Arc::default();
    let sink = told.clone();
    store.on_run_ended_without_job(Arc::new(move |run| {
        sink.lock().unwrap().push((run.id.clone(), run.status));
    }));

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

    let record: DeliveryRecord = Arc::new(|e: &Enqueued| e.run_id.clone());
    let taken = store
        .take_webhook_delivery(
            "gh",
            "d-1",
            "push",
            DeliveryWork::Start(keyed("fifth")),
            record,
        )
        .await
        .unwrap();
    assert!(matches!(taken, DeliveryTaken::Enqueued(_)), "{taken:?}");
    assert_eq!(
        drain(&told),
        [(fourth.run_id.clone(), RunStatus::Superseded)]
    );

    // A cancel refused (the run has ended) tells nothing.
    assert!(store.cancel_run(&queued.run_id).await.is_err());
    assert_eq!(drain(&told), []);
}
