//! Copies of one delivery make one run: taken concurrently by one daemon or by two, and when a
//! crash came between claiming a delivery and recording its runs, the redelivery finishes it.

use std::sync::Arc;

use nightshift_store::Trigger;
use nightshift_tests::TestDb;
use reqwest::StatusCode;
use serde_json::Value;

use super::harness::{Intake, fixture, run_id};

pub(super) async fn concurrent_copies_make_one_run(db: &TestDb) {
    let intake = Arc::new(Intake::start(db).await);
    let body = fixture("pull_request.opened");
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let intake = intake.clone();
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            intake.github("pull_request", "d-storm", body).await
        }));
    }
    let mut ids = std::collections::BTreeSet::new();
    let mut accepted = 0;
    for t in tasks {
        let (status, answer) = t.await.unwrap();
        match status {
            StatusCode::ACCEPTED => {
                accepted += 1;
                assert_eq!(answer["redelivery"], false, "{answer}");
            }
            // The README: a redelivery answers with the original run ids, also when copies
            // arrive at once.
            StatusCode::OK => assert_eq!(answer["redelivery"], true, "{answer}"),
            other => panic!("a copy was answered {other}: {answer}"),
        }
        ids.insert(run_id(&answer));
    }
    assert_eq!(accepted, 1, "exactly one copy is answered 202");
    assert_eq!(
        ids.len(),
        1,
        "every copy answers with the same run: {ids:?}"
    );
    let runs = intake.runs().await;
    assert_eq!(runs.len(), 1, "one run");
    assert_eq!(
        intake.store.jobs_of_run(&runs[0].id).await.unwrap().len(),
        1
    );
    let row = intake.delivery("d-storm").await.unwrap();
    assert_eq!(row.received, 12);
    assert_eq!(row.status, nightshift_store::WebhookDeliveryStatus::Done);
}

/// Two daemons (two APIs, each with its own hooks and in-process state) on one database take
/// copies of one delivery at once: one run, one 202, every other copy a 200 redelivery.
pub(super) async fn copies_across_two_daemons(db: &TestDb) {
    let daemons = [
        Arc::new(Intake::start(db).await),
        Arc::new(Intake::start(db).await),
    ];
    let body = fixture("pull_request.opened");
    let mut tasks = Vec::new();
    for i in 0..12 {
        let intake = daemons[i % 2].clone();
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            intake.github("pull_request", "d-split", body).await
        }));
    }
    let mut ids = std::collections::BTreeSet::new();
    let mut accepted = 0;
    for t in tasks {
        let (status, answer) = t.await.unwrap();
        match status {
            StatusCode::ACCEPTED => accepted += 1,
            StatusCode::OK => assert_eq!(answer["redelivery"], true, "{answer}"),
            other => panic!("a copy was answered {other}: {answer}"),
        }
        ids.insert(run_id(&answer));
    }
    assert_eq!(accepted, 1, "exactly one copy is answered 202");
    assert_eq!(ids.len(), 1, "every copy names the same run: {ids:?}");
    let runs = daemons[0].runs().await;
    assert_eq!(runs.len(), 1, "one run");
    let row = daemons[1]
        .store
        .webhook_delivery("github", "d-split")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.received, 12);
}

pub(super) async fn crash_between_steps(db: &TestDb) {
    let intake = Intake::start(db).await;
    // The daemon died right after claiming d-a: the row is claimed, nothing enqueued.
    intake
        .store
        .claim_webhook_delivery("github", "d-a", "pull_request")
        .await
        .unwrap();
    let (status, a) = intake
        .github("pull_request", "d-a", fixture("pull_request.opened"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "the retry finishes it: {a}");
    assert_eq!(a["runs"][0]["duplicate"], false);
    assert_eq!(intake.runs().await.len(), 1);

    // The daemon died after enqueuing d-b's run but before recording it.
    intake
        .store
        .claim_webhook_delivery("github", "d-b", "pull_request")
        .await
        .unwrap();
    let early = nightshift_scheduler::Intake::new(intake.store.clone(), ["reviewer"])
        .submit(nightshift_scheduler::RunRequest {
            idempotency_key: Some("webhook:github:review:d-b".into()),
            ..nightshift_scheduler::RunRequest::new(
                "reviewer",
                "enqueued before the crash",
                Trigger::Webhook,
            )
        })
        .await
        .unwrap();
    let (status, b) = intake
        .github("pull_request", "d-b", fixture("pull_request.synchronize"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{b}");
    assert_eq!(
        (run_id(&b), &b["runs"][0]["duplicate"]),
        (early.run_id.clone(), &Value::from(true)),
        "the retry finds the run the first attempt made"
    );
    assert_eq!(intake.runs().await.len(), 2, "nothing enqueued twice");
    let row = intake
        .store
        .webhook_delivery("github", "d-b")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.status, nightshift_store::WebhookDeliveryStatus::Done);
    assert!(row.runs.unwrap().contains(&early.run_id));
    // From now on it is a plain redelivery.
    let (status, again) = intake
        .github("pull_request", "d-b", fixture("pull_request.synchronize"))
        .await;
    assert_eq!((status, run_id(&again)), (StatusCode::OK, early.run_id));
}
