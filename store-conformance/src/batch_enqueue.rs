//! Batch enqueue, group commit and webhook intake in one transaction, on both backends:
//! `Store::enqueue_many` answers per run exactly as single enqueues would, a bad run is refused
//! alone, concurrent enqueues and deliveries (which SQLite writes together) each get their own
//! answer, and a refused delivery leaves nothing. (A sleeping pool woken for an earlier job
//! armed elsewhere needs the worker: `tests/tests/suite/pool.rs`.)

use std::time::Duration;

use nightshift_store::{
    ConcurrencyPolicy, DeliveryTaken, DeliveryWork, Enqueued, Error, JobState, NewResume, NewRun,
    ResumeReason, RunStatus, Store, WebhookDeliveryStatus,
};

use crate::TestDb;

pub async fn a_batch_answers_per_run(db: &TestDb) {
    let store = db.store().await;
    let earlier = store
        .enqueue(&NewRun::new("a", "earlier").idempotency_key("k-old"))
        .await
        .unwrap();
    let holder = store
        .enqueue(&NewRun::new("a", "holder").concurrency("other", ConcurrencyPolicy::Queue))
        .await
        .unwrap();
    let runs = vec![
        NewRun::new("a", "p0").idempotency_key("k-new"),
        NewRun::new("a", "p1").idempotency_key("k-old"),
        NewRun::new("a", "p2").idempotency_key("k-new"),
        NewRun::new("a", "p3").max_attempts(0),
        NewRun::new("a", "p4").concurrency("repo", ConcurrencyPolicy::Queue),
        NewRun::new("a", "p5").concurrency("repo", ConcurrencyPolicy::Skip),
        NewRun::new("a", "p6").concurrency("other", ConcurrencyPolicy::Supersede),
        NewRun::new(" ", "p7"),
    ];
    let answers = store.enqueue_many(&runs).await.unwrap();
    assert_eq!(answers.len(), runs.len(), "one answer per run");
    let ok = |i: usize| -> &Enqueued { answers[i].as_ref().unwrap() };
    let created = |e: &Enqueued| !e.duplicate && !e.skipped;
    assert!(created(ok(0)));
    assert!(ok(1).duplicate, "a key used before");
    assert_eq!(
        (&ok(1).run_id, ok(1).job_id),
        (&earlier.run_id, earlier.job_id)
    );
    assert!(ok(2).duplicate, "a key used earlier in the batch");
    assert_eq!(ok(2).run_id, ok(0).run_id);
    assert!(
        matches!(&answers[3], Err(Error::Invalid(m)) if m.contains("max_attempts")),
        "{:?}",
        answers[3]
    );
    assert!(created(ok(4)));
    assert!(ok(5).skipped, "the key is held by item 4");
    assert_eq!(ok(5).run_id, ok(4).run_id);
    assert!(created(ok(6)));
    assert_eq!(ok(6).superseded, vec![holder.run_id.clone()]);
    assert!(matches!(&answers[7], Err(Error::Invalid(m)) if m.contains("agent")));
    // What was written: exactly the created runs, each with its start job.
    for i in [0, 4, 6] {
        let run = store.run(&ok(i).run_id).await.unwrap().unwrap();
        assert_eq!(run.input, format!("p{i}"));
        let jobs = store.jobs_of_run(&run.id).await.unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].id, ok(i).job_id);
    }
    let superseded = store.run(&holder.run_id).await.unwrap().unwrap();
    assert_eq!(superseded.status, RunStatus::Superseded);
    let all = store.list_runs(None, 100).await.unwrap();
    assert_eq!(
        all.len(),
        5,
        "earlier, holder and three new runs; the skipped and refused runs left nothing: {:?}",
        all.iter().map(|r| &r.input).collect::<Vec<_>>()
    );
    // An empty batch is an empty answer.
    assert!(store.enqueue_many(&[]).await.unwrap().is_empty());
}

pub async fn plain_batch_rows(db: &TestDb) {
    let (store, _clock) = db.manual().await;
    let now = store.now();
    // Text PostgreSQL's TEXT cannot hold as it is (NUL, the escape character) must
    // round-trip through the batch's arrays as through a single enqueue.
    let asked = |key: &str| {
        let mut new = NewRun::new("reviewer", "a\0b \u{e000} é\n")
            .idempotency_key(key)
            .lane("batch")
            .priority(7)
            .run_at(now + 5_000)
            .max_attempts(4);
        new.trigger = nightshift_store::Trigger::Webhook;
        new.context = Some(r#"{"github":{"repo":"o/r"}}"#.into());
        new.trace_parent = Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
        new
    };
    let single = store.enqueue(&asked("single")).await.unwrap();
    let used = store.enqueue(&asked("used")).await.unwrap();
    let batch = store
        .enqueue_many(&[
            asked("batched"),
            asked("used"),
            asked("batched"),
            asked("other"),
        ])
        .await
        .unwrap();
    let batch: Vec<Enqueued> = batch.into_iter().map(Result::unwrap).collect();
    assert!(!batch[0].duplicate && !batch[3].duplicate);
    assert!(batch[1].duplicate && batch[2].duplicate);
    assert_eq!(batch[1].run_id, used.run_id);
    assert_eq!(batch[2].run_id, batch[0].run_id);
    let row = |id: String| {
        let store = store.clone();
        async move {
            let run = store.run(&id).await.unwrap().unwrap();
            let mut jobs = store.jobs_of_run(&id).await.unwrap();
            assert_eq!(jobs.len(), 1);
            (run, jobs.remove(0))
        }
    };
    let (single_run, single_job) = row(single.run_id).await;
    let (mut batch_run, mut batch_job) = row(batch[0].run_id.clone()).await;
    assert_eq!(batch_job.id, batch[0].job_id);
    assert_eq!(batch_run.input, "a\0b \u{e000} é\n");
    assert_eq!(batch_run.idempotency_key.as_deref(), Some("batched"));
    batch_run.id = single_run.id.clone();
    batch_run.idempotency_key = single_run.idempotency_key.clone();
    batch_job.id = single_job.id;
    batch_job.run_id = single_job.run_id.clone();
    assert_eq!(
        batch_run, single_run,
        "the batch writes the single path's run row"
    );
    assert_eq!(batch_job, single_job, "and its job row");
    assert_eq!(batch_job.status, JobState::Queued);
}

pub async fn concurrent_enqueues(db: &TestDb) {
    let store = db.store().await;
    let mut tasks = Vec::new();
    for i in 0..64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            // Every fourth run repeats an idempotency key of another producer's run.
            let new = NewRun::new("a", format!("run {i}")).idempotency_key(format!("k{}", i % 48));
            store.enqueue(&new).await.unwrap()
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    let created: Vec<&Enqueued> = answers.iter().filter(|e| !e.duplicate).collect();
    assert_eq!(created.len(), 48, "one run per key, whatever raced");
    for e in &answers {
        let run = store.run(&e.run_id).await.unwrap();
        assert!(run.is_some(), "every answer names a committed run");
    }
    let ids: std::collections::HashSet<&str> = created.iter().map(|e| e.run_id.as_str()).collect();
    assert_eq!(ids.len(), 48);
}

/// The route every delivery here is taken by.
fn route() -> &'static str {
    "prs"
}

/// A run waiting on a wakeup, with a concurrency key so that it can be resumed.
async fn waiting_run(store: &Store, key: &str) -> String {
    let e = store
        .enqueue(
            &NewRun::new("a", "sleep")
                .concurrency(key, ConcurrencyPolicy::Queue)
                .lane("sleepers"),
        )
        .await
        .unwrap();
    let lease = store
        .claim(
            "w",
            Some(&["sleepers".to_string()]),
            1,
            Duration::from_secs(30),
        )
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(lease.job().run_id, e.run_id);
    lease
        .park_until(
            store.now() + 3_600_000,
            &ResumeReason::Message { text: "x".into() }.to_payload(),
        )
        .await
        .unwrap();
    e.run_id
}

fn resume_of(run_id: &str) -> DeliveryWork {
    DeliveryWork::Resume(NewResume {
        run_id: run_id.to_string(),
        payload: ResumeReason::Message {
            text: "more".into(),
        }
        .to_payload(),
        dedupe_key: None,
        job: Default::default(),
    })
}

pub async fn delivery_in_one_commit(db: &TestDb) {
    let store = db.store().await;
    // A resume of a finished run is refused, and the refusal leaves no delivery row.
    let finished = waiting_run(&store, "pr-1").await;
    store.cancel_run(&finished).await.unwrap();
    let jobs_before = store.jobs_of_run(&finished).await.unwrap().len();
    let refused = store
        .take_webhook_delivery("gh", "d-1", "issue_comment", resume_of(&finished), route())
        .await;
    assert!(matches!(refused, Err(Error::Conflict(_))), "{refused:?}");
    assert_eq!(store.webhook_delivery("gh", "d-1").await.unwrap(), None);
    assert_eq!(
        store.jobs_of_run(&finished).await.unwrap().len(),
        jobs_before,
        "the refused resume job was rolled back"
    );
    // A start is claimed, enqueued and recorded together.
    let start = DeliveryWork::Start(NewRun::new("a", "review").idempotency_key("webhook:gh:r:d-2"));
    let taken = store
        .take_webhook_delivery("gh", "d-2", "pull_request", start.clone(), route())
        .await
        .unwrap();
    let DeliveryTaken::Enqueued(e) = taken else {
        panic!("a new delivery enqueues: {taken:?}");
    };
    let row = store.webhook_delivery("gh", "d-2").await.unwrap().unwrap();
    assert_eq!(row.status, WebhookDeliveryStatus::Done);
    assert_eq!(row.received, 1);
    // The store writes the record itself: the route, what it did, the run and its job.
    let recorded = row.recorded_runs().unwrap();
    assert_eq!(
        recorded,
        nightshift_store::delivery_runs("prs", "start", &e)
    );
    assert_eq!(
        (recorded[0].route.as_str(), recorded[0].kind.as_str()),
        ("prs", "start")
    );
    assert_eq!(
        (&recorded[0].run_id, recorded[0].job_id),
        (&e.run_id, e.job_id)
    );
    // Taken again: counted, answered from the row, nothing enqueued.
    let again = store
        .take_webhook_delivery("gh", "d-2", "pull_request", start, route())
        .await
        .unwrap();
    let DeliveryTaken::Done(row) = again else {
        panic!("a done delivery is not taken twice: {again:?}");
    };
    assert_eq!(row.received, 2);
    assert_eq!(store.list_runs(None, 10).await.unwrap().len(), 2);
    // A resume of a waiting run is enqueued with its record.
    let waiting = waiting_run(&store, "pr-3").await;
    let taken = store
        .take_webhook_delivery("gh", "d-3", "issue_comment", resume_of(&waiting), route())
        .await
        .unwrap();
    assert!(matches!(taken, DeliveryTaken::Enqueued(ref e) if e.run_id == waiting));
    let jobs = store.jobs_of_run(&waiting).await.unwrap();
    assert_eq!(
        jobs.len(),
        3,
        "start, the cancelled wakeup, and the delivery's resume"
    );
}

pub async fn concurrent_deliveries(db: &TestDb) {
    let store = db.store().await;
    let finished = waiting_run(&store, "done-key").await;
    store.cancel_run(&finished).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..24 {
        let (store, finished) = (store.clone(), finished.clone());
        tasks.push(tokio::spawn(async move {
            // Odd deliveries resume the finished run (refused), even ones start runs.
            let work = if i % 2 == 1 {
                resume_of(&finished)
            } else {
                DeliveryWork::Start(
                    NewRun::new("a", format!("d{i}")).idempotency_key(format!("w{i}")),
                )
            };
            let id = format!("d-{i}");
            (
                i,
                store
                    .take_webhook_delivery("gh", &id, "e", work, route())
                    .await,
            )
        }));
    }
    for t in tasks {
        let (i, taken) = t.await.unwrap();
        let row = store
            .webhook_delivery("gh", &format!("d-{i}"))
            .await
            .unwrap();
        if i % 2 == 1 {
            assert!(matches!(taken, Err(Error::Conflict(_))), "{i}: {taken:?}");
            assert_eq!(row, None, "{i}: a refused delivery leaves no row");
        } else {
            let Ok(DeliveryTaken::Enqueued(e)) = taken else {
                panic!("{i}: {taken:?}");
            };
            let row = row.expect("an accepted delivery is recorded");
            assert_eq!(row.status, WebhookDeliveryStatus::Done);
            assert!(row.runs.unwrap().contains(&e.run_id));
            assert!(store.run(&e.run_id).await.unwrap().is_some());
        }
    }
    assert_eq!(store.list_runs(None, 100).await.unwrap().len(), 13);
}
