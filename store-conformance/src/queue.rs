//! Queue conformance: the same behaviour on every backend — enqueue and dedupe, claims in
//! order, leases reclaimed and fenced, retries and dead letters, parking, cancel, release,
//! rescue, and the gauges.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::TestDb;
use nightshift_store::{
    Backoff, CancelOutcome, ConcurrencyPolicy, Error, Heartbeat, JobCount, JobKind, JobOptions,
    JobState, NewResume, NewRun, RetryOutcome, RunEnd, RunProgress, RunStatus, StopRequest,
};

const LEASE: Duration = Duration::from_secs(30);

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
    lost(old.append_event("tool_started", "{}").await.map(|_| ()));
    lost(old.write_checkpoint(0, 1, b"gz").await);
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
    new.write_checkpoint(2, 1, b"\x1f\x8b body").await.unwrap();
    let cp = store.latest_checkpoint(&e.run_id).await.unwrap().unwrap();
    assert_eq!(
        (cp.through_seq, cp.lease_token, cp.body.as_slice()),
        (2, new.token(), &b"\x1f\x8b body"[..])
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

pub async fn retry_backoff_grows_then_dead_letters(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let backoff = Backoff {
        base: Duration::from_secs(1),
        cap: Duration::from_secs(3600),
    };
    let e = store
        .enqueue(&NewRun::new("a", "p").max_attempts(4))
        .await
        .unwrap();
    let mut delays = Vec::new();
    for attempt in 1..=4 {
        let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
        assert_eq!(lease.job().attempts, attempt);
        let now = store.now();
        match lease
            .retry(&backoff, &format!("boom {attempt}"))
            .await
            .unwrap()
        {
            RetryOutcome::Scheduled { run_at } => {
                assert!(attempt < 4);
                assert!(
                    store.claim("w", None, 1, LEASE).await.unwrap().is_empty(),
                    "not before run_at"
                );
                let run = store.run(&e.run_id).await.unwrap().unwrap();
                assert_eq!(run.status, RunStatus::Queued);
                delays.push(run_at - now);
                clock.set(run_at);
            }
            RetryOutcome::DeadLettered => assert_eq!(attempt, 4, "dead-lettered at max attempts"),
        }
    }
    for (i, d) in delays.iter().enumerate() {
        let ceiling = backoff.ceiling(i as i64 + 1).as_millis() as i64;
        assert!(
            *d >= ceiling / 2 && *d <= ceiling,
            "delay {d} for attempt {} outside [{}, {ceiling}]",
            i + 1,
            ceiling / 2
        );
    }
    assert!(
        delays.windows(2).all(|w| w[1] >= w[0]),
        "delays grow: {delays:?}"
    );
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(
        (job.status, job.last_error.as_deref()),
        (JobState::Dead, Some("boom 4"))
    );
    let run = store.run(&e.run_id).await.unwrap().unwrap();
    assert_eq!(
        (run.status, run.error.as_deref()),
        (RunStatus::Failed, Some("boom 4"))
    );
    assert!(run.finished_at.is_some());
    assert!(store.claim("w", None, 1, LEASE).await.unwrap().is_empty());
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

pub async fn park_arms_a_resume_job_for_later(db: &TestDb) {
    let (store, clock) = db.manual().await;
    let e = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    lease.append_event("assistant", "{}").await.unwrap();
    let until = store.now() + 3_600_000;
    let resume_id = lease
        .park_until(until, "{\"reason\":\"nightly\"}")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store.run(&e.run_id).await.unwrap().unwrap().status,
        RunStatus::Waiting
    );
    assert_eq!(
        store.job(e.job_id).await.unwrap().unwrap().status,
        JobState::Parked
    );
    assert!(
        store.claim("w", None, 1, LEASE).await.unwrap().is_empty(),
        "asleep until the wake time"
    );
    assert_eq!(store.next_due().await.unwrap(), Some(until));
    clock.set(until);
    let woke = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!((woke.id(), woke.job().kind), (resume_id, JobKind::Resume));
    assert_eq!(woke.job().payload, "{\"reason\":\"nightly\"}");
    assert_eq!(
        woke.append_event("wake", "{}").await.unwrap(),
        2,
        "the same run's log continues"
    );
    assert_eq!(
        store.run(&e.run_id).await.unwrap().unwrap().status,
        RunStatus::Running
    );
}

pub async fn cancel_stops_queued_and_flags_running_jobs(db: &TestDb) {
    let store = db.store().await;
    let queued = store.enqueue(&NewRun::new("a", "q")).await.unwrap();
    assert_eq!(
        store.cancel_run(&queued.run_id).await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(
        store.run(&queued.run_id).await.unwrap().unwrap().status,
        RunStatus::Cancelled
    );
    assert_eq!(
        store.job(queued.job_id).await.unwrap().unwrap().status,
        JobState::Cancelled
    );
    assert!(
        matches!(store.cancel_run(&queued.run_id).await, Err(Error::Conflict(m)) if m.contains("already finished as cancelled"))
    );
    assert!(matches!(
        store.cancel_run("nope").await,
        Err(Error::NotFound { .. })
    ));

    let running = store.enqueue(&NewRun::new("a", "r")).await.unwrap();
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!(
        store.cancel_run(&running.run_id).await.unwrap(),
        CancelOutcome::Requested
    );
    let before = store
        .job(running.job_id)
        .await
        .unwrap()
        .unwrap()
        .lease_expires_at;
    assert_eq!(
        lease.heartbeat(LEASE * 10).await.unwrap(),
        Heartbeat::CancelRequested
    );
    // A side effect's start is refused, and says it was a cancel.
    assert_eq!(
        lease
            .append_event_unless_stopped("tool_started", "{}")
            .await
            .unwrap(),
        Err(StopRequest::Cancel)
    );
    assert_eq!(
        store
            .job(running.job_id)
            .await
            .unwrap()
            .unwrap()
            .lease_expires_at,
        before,
        "not extended"
    );
    lease
        .append_event("cancelled", "{}")
        .await
        .expect("the holder may still record its end");
    lease.complete(RunEnd::Cancelled).await.unwrap();
    assert_eq!(
        store.run(&running.run_id).await.unwrap().unwrap().status,
        RunStatus::Cancelled
    );
}

pub async fn release_returns_the_job_at_once(db: &TestDb) {
    let store = db.store().await;
    let e = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    lease.release("shutting down").await.unwrap();
    let job = store.job(e.job_id).await.unwrap().unwrap();
    assert_eq!(
        (job.status, job.attempts, job.lease_owner),
        (JobState::Queued, 0, None)
    );
    assert_eq!(
        store.run(&e.run_id).await.unwrap().unwrap().status,
        RunStatus::Queued
    );
    let again = store.claim("w2", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!((again.id(), again.job().attempts), (e.job_id, 1));
    assert!(again.token() > lease.token());
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
