//! The queue's gauges mean their names: `queued` only when due, `delayed` apart, `parked`
//! only while the run is live, the oldest due job's age per lane, and the backlogs of pending
//! approvals and undelivered notices.

use std::time::Duration;

use nightshift_store::{JobState, NewRun, RunEnd};

use super::LEASE;
use crate::TestDb;

/// The metrics' view of the queue: `queued` only when due, `delayed` apart, `parked` only
/// while its run has not ended, and the oldest due job's age per lane.
pub async fn gauges_mean_their_names(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let count = |g: &nightshift_store::JobGauges, state: &str, lane: &str| {
        g.counts
            .iter()
            .find(|(s, l, _)| s == state && l == lane)
            .map_or(0, |(_, _, n)| *n)
    };
    // A run that sleeps once, then ends: its first job stays `parked` in the table.
    let slept = store.enqueue(&NewRun::new("a", "sleep")).await.unwrap();
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    let until = store.now() + 1_000;
    lease.park_until(until, "{}").await.unwrap();
    let g = store.job_gauges().await.unwrap();
    assert_eq!(
        count(&g, "parked", "default"),
        1,
        "parked while the run waits"
    );
    clock.set(until);
    let woke = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    woke.complete(RunEnd::Succeeded { result: None })
        .await
        .unwrap();
    assert_eq!(
        store.job(slept.job_id).await.unwrap().unwrap().status,
        JobState::Parked,
        "the parking job's row stays parked"
    );
    // One due job that has waited 90 s, and one delayed by an hour, in lane `batch`.
    let mut due = NewRun::new("a", "due");
    due.job.lane = "batch".into();
    store.enqueue(&due).await.unwrap();
    let mut later = NewRun::new("a", "later");
    later.job.lane = "batch".into();
    later.job.run_at = Some(store.now() + 3_600_000);
    store.enqueue(&later).await.unwrap();
    clock.advance(Duration::from_secs(90));

    let g = store.job_gauges().await.unwrap();
    assert_eq!(count(&g, "parked", "default"), 0, "the run ended: {g:?}");
    assert_eq!(count(&g, "queued", "batch"), 1, "{g:?}");
    assert_eq!(count(&g, "delayed", "batch"), 1, "{g:?}");
    assert_eq!(g.oldest_due_age_seconds, vec![("batch".to_string(), 90.0)]);
    // The overview (`nightshift queue`) still lists every live row.
    let overview = store.queue_overview().await.unwrap();
    assert!(
        overview
            .by_state_lane
            .iter()
            .any(|c| c.state == JobState::Parked && c.count == 1),
        "{overview:?}"
    );
}

/// The metrics' backlogs: pending approvals and undelivered notices, with the age of the
/// oldest of each; decided approvals and delivered notices leave them.
pub async fn backlog_gauges(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let empty = store.backlog_gauges().await.unwrap();
    assert_eq!(
        (empty.approvals_pending, empty.notifications_pending),
        (0, 0)
    );
    assert_eq!(empty.oldest_approval_age_seconds, 0.0);

    // A run that ends makes a notice; expanded to one receiver, it waits to be delivered.
    store.set_notifying_agents(["a"]);
    store.enqueue(&NewRun::new("a", "done")).await.unwrap();
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    lease.ack(None).await.unwrap();
    let outbox = store.unexpanded_outbox(&["a".into()], 10).await.unwrap();
    assert_eq!(outbox.len(), 1, "{outbox:?}");
    store
        .expand_outbox(
            outbox[0].id,
            &[nightshift_store::NewDelivery {
                url: "http://127.0.0.1:9/hook".into(),
                secret_env: "S".into(),
                max_attempts: 3,
            }],
        )
        .await
        .unwrap();
    // Two calls wait for a decision, asked 30 s apart.
    let mut runs = Vec::new();
    for call in ["c1", "c2"] {
        let run_id = store.enqueue(&NewRun::new("b", "p")).await.unwrap().run_id;
        store
            .request_approval(&nightshift_store::NewApproval {
                run_id: &run_id,
                call_id: call,
                tool: "deploy",
                input: "{}",
                input_hash: "h",
                expires_at: store.now() + 3_600_000,
            })
            .await
            .unwrap();
        runs.push(run_id);
        clock.advance(Duration::from_secs(30));
    }

    let g = store.backlog_gauges().await.unwrap();
    assert_eq!(g.approvals_pending, 2, "{g:?}");
    assert_eq!(g.oldest_approval_age_seconds, 60.0, "{g:?}");
    assert_eq!(g.notifications_pending, 1, "{g:?}");
    assert_eq!(g.oldest_notification_age_seconds, 60.0, "{g:?}");

    store
        .decide_approval(&runs[0], "c1", true, None)
        .await
        .unwrap();
    let g = store.backlog_gauges().await.unwrap();
    assert_eq!(g.approvals_pending, 1, "{g:?}");
    assert_eq!(
        g.oldest_approval_age_seconds, 30.0,
        "the next oldest: {g:?}"
    );
}
