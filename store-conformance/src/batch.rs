//! Group commit (`Store::settle`, `Store::complete_many`): many jobs' ends and the claims that
//! refill their slots in one transaction, each end still fenced by its own lease token.
//! (PostgreSQL's kept settle connection closed by the server is its own test, in
//! `tests/postgres/main.rs`.)

use std::time::Duration;

use crate::TestDb;
use nightshift_store::{
    ClaimRequest, ConcurrencyPolicy, Error, JobState, LeaseLostReason, NewRun, RunEnd, RunStatus,
};

const LEASE: Duration = Duration::from_secs(30);

/// An end, and the run status, job state, result and error it should leave.
type Expected = (RunEnd, RunStatus, JobState, Option<String>, Option<String>);

/// Every kind of end in one batch, with results and errors that are awkward to carry (quotes,
/// backslashes, newlines, non-ASCII, text that looks like JSON or a number, a large one):
/// each run and job reads back exactly as a one-by-one write would leave it.
pub async fn batch_ends_round_trip(db: &TestDb) {
    let store = db.store().await;
    let awkward = [
        "say \"hi\" \\ back\nslash\ttab",
        "{\"looks\": [\"like\", \"json\"]}",
        "42",
        "naïve café — 日本語 🎉",
        "",
    ];
    let big = "x".repeat(200_000);
    let mut ends: Vec<Expected> = awkward
        .iter()
        .map(|text| {
            (
                RunEnd::Succeeded {
                    result: Some((*text).to_string()),
                },
                RunStatus::Succeeded,
                JobState::Succeeded,
                Some((*text).to_string()),
                None,
            )
        })
        .collect();
    ends.push((
        RunEnd::Succeeded {
            result: Some(big.clone()),
        },
        RunStatus::Succeeded,
        JobState::Succeeded,
        Some(big),
        None,
    ));
    ends.push((
        RunEnd::Succeeded { result: None },
        RunStatus::Succeeded,
        JobState::Succeeded,
        None,
        None,
    ));
    ends.push((
        RunEnd::Failed {
            error: "it broke: \"quoted\"\nline two".into(),
        },
        RunStatus::Failed,
        JobState::Dead,
        None,
        Some("it broke: \"quoted\"\nline two".into()),
    ));
    ends.push((
        RunEnd::BudgetExhausted {
            detail: "spent $5.00".into(),
        },
        RunStatus::BudgetExhausted,
        JobState::Succeeded,
        None,
        Some("spent $5.00".into()),
    ));
    ends.push((
        RunEnd::MaxRounds {
            detail: "50 rounds".into(),
        },
        RunStatus::MaxRounds,
        JobState::Succeeded,
        None,
        Some("50 rounds".into()),
    ));
    ends.push((
        RunEnd::Cancelled,
        RunStatus::Cancelled,
        JobState::Cancelled,
        None,
        Some("cancelled on request".into()),
    ));
    let mut enqueued = Vec::new();
    for _ in &ends {
        enqueued.push(store.enqueue(&NewRun::new("a", "p")).await.unwrap());
    }
    let leases = store.claim("w", None, ends.len(), LEASE).await.unwrap();
    assert_eq!(leases.len(), ends.len());
    let done: Vec<_> = leases
        .iter()
        .zip(&ends)
        .map(|(lease, (end, ..))| (lease, end.clone()))
        .collect();
    let ended = store.complete_many(&done).await.unwrap();
    assert!(ended.iter().all(Result::is_ok), "{ended:?}");
    for (lease, (_, status, job_state, result, error)) in leases.iter().zip(&ends) {
        let job = store.job(lease.id()).await.unwrap().unwrap();
        assert_eq!(
            (
                job.status,
                job.lease_owner.as_deref(),
                job.finished_at.is_some()
            ),
            (*job_state, None, true),
            "job {}",
            lease.id()
        );
        let run = store.run(&job.run_id).await.unwrap().unwrap();
        assert_eq!(
            (run.status, run.result.as_deref(), run.error.as_deref()),
            (*status, result.as_deref(), error.as_deref()),
            "run of job {}",
            lease.id()
        );
        assert!(run.finished_at.is_some());
    }
    assert_eq!(
        enqueued.len(),
        ends.len(),
        "every run was enqueued and ended once"
    );
}

pub async fn stale_end_and_reclaim_in_one_settle(db: &TestDb) {
    let store = db.store().await;
    let e = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    let first = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    first.release("given back").await.unwrap();
    let settled = store
        .settle(
            &[(
                &first,
                RunEnd::Succeeded {
                    result: Some("stale".into()),
                },
            )],
            "w",
            &[ClaimRequest {
                lanes: None,
                limit: 1,
            }],
            LEASE,
        )
        .await
        .unwrap();
    assert!(
        matches!(&settled.ended[0], Err(Error::LeaseLost { .. })),
        "{:?}",
        settled.ended[0]
    );
    let again: Vec<_> = settled.claimed[0]
        .iter()
        .map(|l| (l.id(), l.token()))
        .collect();
    assert_eq!(
        again,
        vec![(e.job_id, first.token() + 1)],
        "claimed again, new token"
    );
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(
        (job.status, job.lease_token),
        (JobState::Running, first.token() + 1)
    );
    let run = store.run(&e.run_id).await.unwrap().unwrap();
    assert_eq!((run.status, run.result), (RunStatus::Running, None));
    // The stale and the fresh end of one job in one batch: each is judged by its own token.
    let fresh = &settled.claimed[0][0];
    let ended = store
        .complete_many(&[
            (&first, RunEnd::Cancelled),
            (
                fresh,
                RunEnd::Succeeded {
                    result: Some("fresh".into()),
                },
            ),
        ])
        .await
        .unwrap();
    assert!(
        ended[0].as_ref().is_err_and(Error::is_lease_lost),
        "{:?}",
        ended[0]
    );
    assert!(ended[1].is_ok(), "{:?}", ended[1]);
    let run = store.run(&e.run_id).await.unwrap().unwrap();
    assert_eq!(
        (run.status, run.result.as_deref()),
        (RunStatus::Succeeded, Some("fresh"))
    );
}

pub async fn lost_lease_in_a_batch(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let a = store.enqueue(&NewRun::new("a", "pa")).await.unwrap();
    let b = store.enqueue(&NewRun::new("a", "pb")).await.unwrap();
    let c = store.enqueue(&NewRun::new("a", "pc")).await.unwrap();
    // b's holder gets a short lease; a and c a long one.
    let lease_a = store.claim("w1", None, 1, LEASE).await.unwrap().remove(0);
    let old_b = store
        .claim("w1", None, 1, Duration::from_secs(5))
        .await
        .unwrap()
        .remove(0);
    let lease_c = store.claim("w1", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!(
        [lease_a.id(), old_b.id(), lease_c.id()],
        [a.job_id, b.job_id, c.job_id]
    );
    // b's lease expires and another worker takes the job with a newer token.
    clock.advance(Duration::from_secs(6));
    let new_b = store.claim("w2", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!(new_b.id(), b.job_id);

    let ended = store
        .complete_many(&[
            (
                &lease_a,
                RunEnd::Succeeded {
                    result: Some("ra".into()),
                },
            ),
            (
                &old_b,
                RunEnd::Succeeded {
                    result: Some("stale".into()),
                },
            ),
            (
                &lease_c,
                RunEnd::Failed {
                    error: "boom".into(),
                },
            ),
        ])
        .await
        .unwrap();
    assert_eq!(ended.len(), 3, "one result per job, in order");
    assert!(ended[0].is_ok(), "{:?}", ended[0]);
    match &ended[1] {
        Err(Error::LeaseLost {
            job_id,
            token,
            reason: LeaseLostReason::Reclaimed { current_token },
        }) => {
            assert_eq!((*job_id, *token), (old_b.id(), old_b.token()));
            assert_eq!(*current_token, new_b.token());
        }
        other => panic!("expected LeaseLost for the stale holder, got {other:?}"),
    }
    assert!(ended[2].is_ok(), "{:?}", ended[2]);

    let run_a = store.run(&a.run_id).await.unwrap().unwrap();
    assert_eq!(
        (run_a.status, run_a.result.as_deref()),
        (RunStatus::Succeeded, Some("ra"))
    );
    let job_a = store.job(a.job_id).await.unwrap().unwrap();
    assert_eq!(
        (job_a.status, job_a.lease_owner.as_deref()),
        (JobState::Succeeded, None)
    );
    let run_c = store.run(&c.run_id).await.unwrap().unwrap();
    assert_eq!(
        (run_c.status, run_c.error.as_deref()),
        (RunStatus::Failed, Some("boom"))
    );
    let job_c = store.job(c.job_id).await.unwrap().unwrap();
    assert_eq!(
        (job_c.status, job_c.last_error.as_deref()),
        (JobState::Dead, Some("boom"))
    );
    // Nothing of b changed: still running under the new holder, its run still running.
    let job_b = store.job(b.job_id).await.unwrap().unwrap();
    assert_eq!(
        (
            job_b.status,
            job_b.lease_owner.as_deref(),
            job_b.lease_token
        ),
        (JobState::Running, Some("w2"), new_b.token())
    );
    let run_b = store.run(&b.run_id).await.unwrap().unwrap();
    assert_eq!((run_b.status, run_b.result), (RunStatus::Running, None));
    // The new holder still ends it; the stale one cannot, alone or in a batch.
    assert!(
        old_b
            .ack(Some("stale".into()))
            .await
            .unwrap_err()
            .is_lease_lost()
    );
    new_b.ack(Some("fresh".into())).await.unwrap();
    let run_b = store.run(&b.run_id).await.unwrap().unwrap();
    assert_eq!(
        (run_b.status, run_b.result.as_deref()),
        (RunStatus::Succeeded, Some("fresh"))
    );
    // Ending an ended job again in a batch is LeaseLost too, and changes nothing.
    let again = store
        .complete_many(&[(&lease_a, RunEnd::Cancelled)])
        .await
        .unwrap();
    assert!(matches!(
        &again[0],
        Err(Error::LeaseLost {
            reason: LeaseLostReason::NotRunning { .. },
            ..
        })
    ));
    let run_a = store.run(&a.run_id).await.unwrap().unwrap();
    assert_eq!(run_a.status, RunStatus::Succeeded);
    assert!(store.complete_many(&[]).await.unwrap().is_empty());
}

pub async fn settle_ends_and_claims(db: &TestDb) {
    let store = db.store().await;
    let first = store.enqueue(&NewRun::new("a", "first")).await.unwrap();
    let held = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    let mut batch = Vec::new();
    for i in 0..3 {
        batch.push(
            store
                .enqueue(&NewRun::new("a", format!("batch {i}")).lane("batch"))
                .await
                .unwrap(),
        );
    }
    let interactive = store
        .enqueue(&NewRun::new("a", "interactive").lane("interactive"))
        .await
        .unwrap();
    let requests = [
        ClaimRequest {
            lanes: Some(vec!["interactive".into()]),
            limit: 2,
        },
        ClaimRequest {
            lanes: None,
            limit: 2,
        },
    ];
    let settled = store
        .settle(
            &[(
                &held,
                RunEnd::Succeeded {
                    result: Some("done".into()),
                },
            )],
            "w",
            &requests,
            LEASE,
        )
        .await
        .unwrap();
    assert_eq!(settled.ended.len(), 1);
    assert!(settled.ended[0].is_ok());
    assert_eq!(
        store.run(&first.run_id).await.unwrap().unwrap().status,
        RunStatus::Succeeded
    );
    assert_eq!(settled.claimed.len(), 2, "one list per request");
    let ids = |i: usize| -> Vec<i64> { settled.claimed[i].iter().map(|l| l.id()).collect() };
    assert_eq!(ids(0), vec![interactive.job_id], "only the lane asked for");
    assert_eq!(
        ids(1),
        vec![batch[0].job_id, batch[1].job_id],
        "any lane, in claim order"
    );
    for lease in settled.claimed.iter().flatten() {
        let job = store.job(lease.id()).await.unwrap().unwrap();
        assert_eq!(
            (job.status, job.lease_token, job.lease_owner.as_deref()),
            (JobState::Running, lease.token(), Some("w"))
        );
        let run = store.run(&job.run_id).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Running, "claimed runs are running");
        assert!(run.started_at.is_some());
    }
    // Claims only: the last batch job; nothing is claimed twice.
    let settled = store
        .settle(
            &[],
            "w",
            &[ClaimRequest {
                lanes: None,
                limit: 5,
            }],
            LEASE,
        )
        .await
        .unwrap();
    assert!(settled.ended.is_empty());
    let rest: Vec<i64> = settled.claimed[0].iter().map(|l| l.id()).collect();
    assert_eq!(rest, vec![batch[2].job_id]);
}

pub async fn batch_frees_concurrency_keys(db: &TestDb) {
    let store = db.store().await;
    let first = store
        .enqueue(&NewRun::new("a", "1").concurrency("k", ConcurrencyPolicy::Queue))
        .await
        .unwrap();
    let plain = store.enqueue(&NewRun::new("a", "plain")).await.unwrap();
    let leases = store.claim("w", None, 5, LEASE).await.unwrap();
    assert_eq!(leases.len(), 2);
    let second = store
        .enqueue(&NewRun::new("a", "2").concurrency("k", ConcurrencyPolicy::Queue))
        .await
        .unwrap();
    assert!(
        store.claim("w", None, 5, LEASE).await.unwrap().is_empty(),
        "the key is held"
    );
    let mut signal = store.subscribe();
    signal.wait(Duration::ZERO).await; // consume the enqueue's signal
    let ends: Vec<_> = leases
        .iter()
        .map(|l| (l, RunEnd::Succeeded { result: None }))
        .collect();
    let settled = store
        .settle(
            &ends,
            "w",
            &[ClaimRequest {
                lanes: None,
                limit: 5,
            }],
            LEASE,
        )
        .await
        .unwrap();
    assert!(settled.ended.iter().all(Result::is_ok));
    // SQLite claims the key's next job in the transaction that freed the key; PostgreSQL's
    // one statement sees the key still held (one snapshot) and leaves it to the next claim,
    // which the batch's signal prompts.
    let mut claimed: Vec<i64> = settled.claimed[0].iter().map(|l| l.id()).collect();
    if claimed.is_empty() {
        tokio::time::timeout(Duration::from_secs(5), signal.wait(Duration::from_secs(10)))
            .await
            .expect("the batch signals that keyed work may run");
        let next = store.claim("w", None, 5, LEASE).await.unwrap();
        claimed = next.iter().map(|l| l.id()).collect();
    }
    assert_eq!(claimed, vec![second.job_id], "the key's next job runs");
    for e in [&first, &plain] {
        assert_eq!(
            store.run(&e.run_id).await.unwrap().unwrap().status,
            RunStatus::Succeeded
        );
    }
}
