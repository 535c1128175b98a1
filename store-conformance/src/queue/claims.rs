//! Claim conformance: concurrent claimers take each job once, claims follow `run_at`,
//! priority and lane, take due jobs in exact order past sleeping ones, and `next_due` sees a
//! job however it was queued.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nightshift_store::{JobCount, JobState, NewRun, RunStatus};

use super::LEASE;
use crate::TestDb;

pub async fn eight_claimers_claim_each_job_once(db: &TestDb) {
    let store = db.store().await;
    for i in 0..2000 {
        store
            .enqueue(&NewRun::new("a", format!("{i}")))
            .await
            .unwrap();
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for w in 0..8 {
        let store = store.clone();
        let seen = seen.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let leases = store
                    .claim(&format!("w{w}"), None, 10, LEASE)
                    .await
                    .unwrap();
                if leases.is_empty() {
                    break;
                }
                for lease in leases {
                    assert_eq!(lease.job().attempts, 1);
                    seen.lock().unwrap().push(lease.id());
                    lease.ack(None).await.unwrap();
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(seen.len(), 2000, "claims in all");
    assert_eq!(unique.len(), 2000, "no job claimed twice");
    assert_eq!(
        store.job_counts().await.unwrap(),
        vec![JobCount {
            state: JobState::Succeeded,
            count: 2000
        }]
    );
}

pub async fn claims_follow_run_at_priority_and_lane(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let now = store.now();
    let later = store
        .enqueue(&NewRun::new("a", "later").run_at(now + 60_000).priority(100))
        .await
        .unwrap();
    let low = store
        .enqueue(&NewRun::new("a", "low").priority(-5))
        .await
        .unwrap();
    let high = store
        .enqueue(&NewRun::new("a", "high").priority(10))
        .await
        .unwrap();
    let mid1 = store.enqueue(&NewRun::new("a", "mid1")).await.unwrap();
    clock.advance(Duration::from_millis(5));
    let mid2 = store.enqueue(&NewRun::new("a", "mid2")).await.unwrap();
    let fast = store
        .enqueue(&NewRun::new("a", "fast").lane("interactive"))
        .await
        .unwrap();

    let only_interactive = vec!["interactive".to_string()];
    let got = store
        .claim("w", Some(&only_interactive), 5, LEASE)
        .await
        .unwrap();
    assert_eq!(
        got.iter().map(|l| l.id()).collect::<Vec<_>>(),
        vec![fast.job_id]
    );
    got[0].ack(None).await.unwrap();

    let got = store.claim("w", None, 10, LEASE).await.unwrap();
    let order: Vec<i64> = got.iter().map(|l| l.id()).collect();
    for lease in &got {
        lease.ack(None).await.unwrap();
    }
    assert_eq!(
        order,
        vec![high.job_id, mid1.job_id, mid2.job_id, low.job_id],
        "priority, then run_at, then id; the future job waits"
    );
    clock.advance(Duration::from_secs(60));
    let got = store.claim("w", None, 10, LEASE).await.unwrap();
    assert_eq!(
        got.iter().map(|l| l.id()).collect::<Vec<_>>(),
        vec![later.job_id]
    );
    assert_eq!(
        store.run(&later.run_id).await.unwrap().unwrap().status,
        RunStatus::Running
    );
}

/// Claims find due jobs among jobs that sleep until later at the same and at other
/// priorities (the statements skip from priority to priority), and take them one at a time in
/// exactly claim order: priority, then `run_at`, then id; from every lane, from one lane and
/// from a list of lanes. The sleeping jobs come out in the same order once due.
pub async fn claims_past_sleeping_jobs(db: &TestDb) {
    let (store, clock) = db.manual().await;
    // (priority, lane, sleeps): each enqueued 1 ms after the one before.
    let plan: [(i64, &str, bool); 14] = [
        (50, "default", true),
        (5, "default", false),
        (0, "batch", true),
        (0, "default", false),
        (5, "batch", true),
        (-5, "default", false),
        (0, "batch", false),
        (5, "default", false),
        (50, "batch", true),
        (0, "default", true),
        (-5, "batch", true),
        (0, "default", false),
        (-5, "batch", false),
        (7, "default", true),
    ];
    let mut jobs = Vec::new();
    for (i, (priority, lane, sleeps)) in plan.into_iter().enumerate() {
        let mut new = NewRun::new("a", format!("job {i}"))
            .priority(priority)
            .lane(lane);
        if sleeps {
            new = new.run_at(store.now() + 60_000);
        }
        let job_id = store.enqueue(&new).await.unwrap().job_id;
        let run_at = if sleeps {
            store.now() + 60_000
        } else {
            store.now()
        };
        jobs.push((priority, run_at, job_id, lane, sleeps));
        clock.advance(Duration::from_millis(1));
    }
    let in_claim_order = |sleeping: bool, lanes: &[&str]| {
        let mut due: Vec<_> = jobs
            .iter()
            .filter(|j| j.4 == sleeping && lanes.contains(&j.3))
            .copied()
            .collect();
        due.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        due.into_iter().map(|j| j.2).collect::<Vec<i64>>()
    };
    let claim_one = async |lanes: Option<&[&str]>| {
        let lanes = lanes.map(|l| l.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let got = store.claim("w", lanes.as_deref(), 1, LEASE).await.unwrap();
        assert!(got.len() <= 1, "a claim of one took {}", got.len());
        let id = got.first().map(|l| l.id());
        for lease in got {
            lease.ack(None).await.unwrap();
        }
        id
    };

    // One lane first: the batch lane's due jobs, then nothing though batch jobs sleep.
    let batch = in_claim_order(false, &["batch"]);
    for want in &batch {
        assert_eq!(claim_one(Some(&["batch"])).await, Some(*want));
    }
    assert_eq!(claim_one(Some(&["batch"])).await, None);
    // A list of lanes takes the first due job of either; every lane takes the rest.
    let rest = in_claim_order(false, &["default"]);
    assert_eq!(claim_one(Some(&["default", "batch"])).await, Some(rest[0]));
    for want in &rest[1..] {
        assert_eq!(claim_one(None).await, Some(*want));
    }
    assert_eq!(claim_one(None).await, None, "only sleeping jobs are left");

    clock.advance(Duration::from_secs(61));
    let sleepers = in_claim_order(true, &["default", "batch"]);
    assert_eq!(sleepers.len(), 7);
    for want in &sleepers {
        assert_eq!(claim_one(None).await, Some(*want));
    }
    assert_eq!(claim_one(None).await, None);
}

/// `next_due` (how long an idle pool sleeps) sees a job however it came to be queued: enqueued,
/// retried after a delay, released; and none while the only job is leased.
pub async fn next_due_sees_jobs_queued_every_way(db: &TestDb) {
    let (store, clock) = db.manual().await;
    store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    assert_eq!(
        store.next_due().await.unwrap(),
        Some(store.now()),
        "enqueued"
    );
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!(store.next_due().await.unwrap(), None, "leased");
    lease
        .retry_after(Duration::from_secs(60), "again")
        .await
        .unwrap();
    let due = store.now() + 60_000;
    assert_eq!(store.next_due().await.unwrap(), Some(due), "retried");
    clock.set(due);
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!(store.next_due().await.unwrap(), None, "leased again");
    lease.release("shutting down").await.unwrap();
    assert_eq!(store.next_due().await.unwrap(), Some(due), "released");
}
