//! Enqueue conformance: an idempotency key dedupes to the existing ids, both enqueue paths
//! write the same rows, concurrent enqueues of one key make one job, enqueues dropped midway
//! leave no transaction behind, and resumes dedupe and refuse finished runs.

use std::collections::HashSet;

use nightshift_store::{
    ConcurrencyPolicy, Error, JobCount, JobKind, JobOptions, JobState, NewResume, NewRun, RunStatus,
};

use crate::TestDb;

pub async fn dedupe_returns_the_existing_ids(db: &TestDb) {
    let store = db.store().await;
    let first = store
        .enqueue(&NewRun::new("a", "p1").idempotency_key("k"))
        .await
        .unwrap();
    let second = store
        .enqueue(&NewRun::new("a", "p2").idempotency_key("k"))
        .await
        .unwrap();
    assert!(!first.duplicate);
    assert!(second.duplicate);
    assert_eq!(
        (&first.run_id, first.job_id),
        (&second.run_id, second.job_id)
    );
    let run = store.run(&first.run_id).await.unwrap().unwrap();
    assert_eq!(run.input, "p1", "the duplicate changed nothing");
    let other = store
        .enqueue(&NewRun::new("a", "p3").idempotency_key("k2"))
        .await
        .unwrap();
    assert!(!other.duplicate && other.run_id != first.run_id);
    let listed = store.list_runs(Some(RunStatus::Queued), 10).await.unwrap();
    assert_eq!(listed.len(), 2, "the duplicate made no run");
    assert_eq!(listed[0].id, other.run_id, "newest first");
    assert!(
        store
            .list_runs(Some(RunStatus::Running), 10)
            .await
            .unwrap()
            .is_empty()
    );
    let without = store.enqueue(&NewRun::new("a", "p4")).await.unwrap();
    let without2 = store.enqueue(&NewRun::new("a", "p4")).await.unwrap();
    assert_ne!(without.run_id, without2.run_id, "no key, no dedupe");
    assert_eq!(
        store.job_counts().await.unwrap(),
        vec![JobCount {
            state: JobState::Queued,
            count: 4
        }]
    );
}

/// A run that decides nothing (no concurrency key, or the `queue` policy) is enqueued in one
/// statement (a writing CTE on PostgreSQL, the `enqueue_start` view's trigger on SQLite); a
/// run whose policy reads its key's runs takes the transactional path that locks its key.
/// Both write the same run and start job, field by field, the key on both.
pub async fn both_enqueue_paths_write_the_same_rows(db: &TestDb) {
    let (store, _clock) = db.manual().await;
    let now = store.now();
    let asked = |key: &str| {
        let mut new = NewRun::new("reviewer", "{\"pr\": 7, \"note\": \"é\\n\"}")
            .idempotency_key(key)
            .lane("batch")
            .priority(7)
            .run_at(now + 5_000)
            .max_attempts(4);
        new.trigger = nightshift_store::Trigger::Webhook;
        new
    };
    let plain = store.enqueue(&asked("plain")).await.unwrap();
    // `queue` decides nothing: the one-statement path, with the key on the run and its job.
    let queued = store
        .enqueue(&asked("queued").concurrency("repo", ConcurrencyPolicy::Queue))
        .await
        .unwrap();
    // `skip` reads the key's runs (none here): the transactional path.
    let keyed = store
        .enqueue(&asked("keyed").concurrency("other", ConcurrencyPolicy::Skip))
        .await
        .unwrap();
    assert!(!plain.duplicate && !queued.duplicate && !keyed.duplicate && !keyed.skipped);
    let row = |id: String| {
        let store = store.clone();
        async move {
            let run = store.run(&id).await.unwrap().expect("the run was written");
            let jobs = store.jobs_of_run(&id).await.unwrap();
            assert_eq!(jobs.len(), 1, "one start job");
            (run, jobs.into_iter().next().unwrap())
        }
    };
    let (plain_run, plain_job) = row(plain.run_id.clone()).await;
    assert_eq!(plain_job.id, plain.job_id, "the id enqueue returned");
    assert_eq!(plain_run.idempotency_key.as_deref(), Some("plain"));
    assert_eq!(plain_run.concurrency_key, None);
    assert_eq!(plain_job.concurrency_key, None);
    assert_eq!(
        (plain_job.kind, plain_job.status, plain_job.run_at),
        (JobKind::Start, JobState::Queued, now + 5_000)
    );
    for (enqueued, key) in [(&queued, "repo"), (&keyed, "other")] {
        let (mut run, mut job) = row(enqueued.run_id.clone()).await;
        assert_eq!(job.id, enqueued.job_id, "the id enqueue returned");
        assert_eq!(run.concurrency_key.as_deref(), Some(key));
        assert_eq!(
            job.concurrency_key.as_deref(),
            Some(key),
            "the job has its run's key"
        );
        // Apart from ids and keys, each path's rows must be the plain path's.
        run.id = plain_run.id.clone();
        run.idempotency_key = plain_run.idempotency_key.clone();
        run.concurrency_key = None;
        job.id = plain_job.id;
        job.run_id = plain_job.run_id.clone();
        job.concurrency_key = None;
        assert_eq!(plain_run, run, "{key}");
        assert_eq!(plain_job, job, "{key}");
    }
    let again = store.enqueue(&asked("plain")).await.unwrap();
    assert!(again.duplicate);
    assert_eq!((again.run_id, again.job_id), (plain.run_id, plain.job_id));
    // Both paths write the notify flag: off while the agent does not notify, on once it does.
    assert!(!plain_run.notify);
    store.set_notifying_agents(["reviewer"]);
    let plain = store.enqueue(&asked("plain, notifying")).await.unwrap();
    let queued = store
        .enqueue(&asked("queued, notifying").concurrency("repo", ConcurrencyPolicy::Queue))
        .await
        .unwrap();
    let keyed = store
        .enqueue(&asked("keyed, notifying").concurrency("third", ConcurrencyPolicy::Skip))
        .await
        .unwrap();
    for e in [plain, queued, keyed] {
        assert!(store.run(&e.run_id).await.unwrap().unwrap().notify);
    }
}

pub async fn concurrent_enqueues_of_one_key_make_one_job(db: &TestDb) {
    let store = db.store().await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store
                .enqueue(&NewRun::new("a", format!("p{i}")).idempotency_key("same"))
                .await
                .unwrap()
        }));
    }
    let results: Vec<_> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let ids: HashSet<_> = results
        .iter()
        .map(|e| (e.run_id.clone(), e.job_id))
        .collect();
    assert_eq!(ids.len(), 1, "every caller got the same run and job");
    assert_eq!(results.iter().filter(|e| !e.duplicate).count(), 1);
    assert_eq!(
        store.job_counts().await.unwrap(),
        vec![JobCount {
            state: JobState::Queued,
            count: 1
        }]
    );
}

pub async fn resume_dedupe_and_finished_runs(db: &TestDb) {
    let store = db.store().await;
    let e = store
        .enqueue(&NewRun::new("a", "p").concurrency("k", ConcurrencyPolicy::Queue))
        .await
        .unwrap();
    let resume = |key: &str| NewResume {
        run_id: e.run_id.clone(),
        payload: "{}".into(),
        dedupe_key: Some(key.into()),
        job: JobOptions::default(),
    };
    let r1 = store.enqueue_resume(&resume("wake:1")).await.unwrap();
    let r2 = store.enqueue_resume(&resume("wake:1")).await.unwrap();
    assert!(!r1.duplicate && r2.duplicate && r1.job_id == r2.job_id);
    store.cancel_run(&e.run_id).await.unwrap();
    let err = store.enqueue_resume(&resume("wake:2")).await.unwrap_err();
    assert!(
        matches!(&err, Error::Conflict(m) if m.contains("cannot be resumed")),
        "{err}"
    );
    let missing = NewResume {
        run_id: "nope".into(),
        ..resume("wake:3")
    };
    assert!(matches!(
        store.enqueue_resume(&missing).await,
        Err(Error::NotFound { .. })
    ));
    let bad = store
        .enqueue(&NewRun::new("a", "p").max_attempts(0))
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("max_attempts must be at least 1"));
}

/// Callers that give up on an enqueue (an HTTP client that hangs up) drop its future at
/// various points; every enqueue either happened whole or not at all, and the store keeps
/// working: in particular no connection is left inside a transaction, where the next
/// statements would never be committed (with sqlx's own `begin`, a drop while `BEGIN` was on
/// the wire did that on PostgreSQL in about one run in five of this test).
pub async fn dropped_enqueues_leave_no_transaction(db: &TestDb) {
    let store = db.store().await;
    for i in 0..400 {
        let s = store.clone();
        // Odd ones have a concurrency key: they take the transactional path, the rest the
        // one-statement one.
        let mut new = NewRun::new("a", format!("dropped {i}"));
        if i % 2 == 1 {
            new = new.concurrency(format!("key {i}"), ConcurrencyPolicy::Queue);
        }
        let pending = tokio::spawn(async move { s.enqueue(&new).await });
        for _ in 0..(i % 7) {
            tokio::task::yield_now().await;
        }
        pending.abort();
        let _ = pending.await;
    }
    let kept = store.enqueue(&NewRun::new("a", "kept")).await.unwrap();
    assert!(!kept.duplicate);
    let runs = store.list_runs(None, 1000).await.unwrap();
    for run in &runs {
        let jobs = store.jobs_of_run(&run.id).await.unwrap();
        assert_eq!(jobs.len(), 1, "run {} has its start job, whole", run.id);
    }
    assert!(runs.iter().any(|r| r.id == kept.run_id));
}
