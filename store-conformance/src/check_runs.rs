//! Who makes a run's GitHub check run: one claimant at a time per name, the claim held while
//! fresh, taken over when stale, recorded for good once GitHub gave its id, and released at
//! once when nothing was made.

use std::time::Duration;

use crate::TestDb;

const CHECK: &str = "Nightshift review";

pub async fn claim_rules(db: &TestDb) {
    use nightshift_store::CheckRunClaim;
    let (store, clock) = db.manual().await;
    let run_id = store
        .enqueue(&nightshift_store::NewRun::new("checker", "go"))
        .await
        .unwrap()
        .run_id;
    let stale = Duration::from_secs(60);
    assert_eq!(store.check_run_claim(&run_id, CHECK).await.unwrap(), None);
    assert_eq!(
        store.claim_check_run(&run_id, CHECK, stale).await.unwrap(),
        CheckRunClaim::Yours
    );
    let since = store.now();
    // While fresh, everyone else hears it is being made; another name is its own claim.
    clock.advance(Duration::from_secs(59));
    assert_eq!(
        store.claim_check_run(&run_id, CHECK, stale).await.unwrap(),
        CheckRunClaim::BeingMade { since }
    );
    assert_eq!(
        store
            .claim_check_run(&run_id, "other", stale)
            .await
            .unwrap(),
        CheckRunClaim::Yours
    );
    // Stale without an id: taken over.
    clock.advance(Duration::from_secs(2));
    assert_eq!(
        store.claim_check_run(&run_id, CHECK, stale).await.unwrap(),
        CheckRunClaim::Yours
    );
    // Recorded: made, for good (never stale, never released).
    store.record_check_run(&run_id, CHECK, 4000).await.unwrap();
    clock.advance(Duration::from_secs(3600));
    store.release_check_run(&run_id, CHECK).await.unwrap();
    assert_eq!(
        store.claim_check_run(&run_id, CHECK, stale).await.unwrap(),
        CheckRunClaim::Made(4000)
    );
    // Released (GitHub refused, nothing made): the next caller claims it at once.
    store.release_check_run(&run_id, "other").await.unwrap();
    assert_eq!(
        store
            .claim_check_run(&run_id, "other", stale)
            .await
            .unwrap(),
        CheckRunClaim::Yours
    );
}
