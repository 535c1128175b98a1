//! The notification outbox in the store: every terminal path of a run that notifies leaves
//! exactly one outbox row (and nothing else does, nor do runs of agents that do not notify),
//! expansion happens once, and deliveries follow their lifecycle (claim, retry, dead, a dead
//! claimant's lease running out) on both backends. (Two schemas in one PostgreSQL database each
//! keeping their own outbox is PostgreSQL's own test, in `tests/postgres/main.rs`.)

use std::time::Duration;

use crate::TestDb;
use nightshift_store::{
    AttemptOutcome, CancelOutcome, ConcurrencyPolicy, DeliveryStatus, Enqueued, ManualClock,
    NewDelivery, NewRun, RetryOutcome, RunEnd, RunProgress, RunStatus, Store,
};

const LEASE: Duration = Duration::from_secs(30);

pub async fn check_runs_are_recorded(db: &TestDb) {
    let (store, _clock) = notifying(db).await;
    let e = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    assert!(store.check_runs_of(&e.run_id).await.unwrap().is_empty());
    assert!(store.note_check_run(&e.run_id, "Review").await.unwrap());
    assert!(
        !store.note_check_run(&e.run_id, "Review").await.unwrap(),
        "a second start of the same check run records nothing"
    );
    assert!(
        store
            .note_check_run(&e.run_id, "Old \"review\" ✓")
            .await
            .unwrap()
    );
    assert_eq!(
        store.check_runs_of(&e.run_id).await.unwrap(),
        ["Review", "Old \"review\" ✓"]
    );
    // Recording is no status change: no outbox row, the run still queued.
    assert!(outbox(&store, &e.run_id).await.is_empty());
    let run = store.run(&e.run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Queued);
    // An unknown run: nothing recorded, nothing to complete.
    assert!(!store.note_check_run("run-nope", "Review").await.unwrap());
    assert!(store.check_runs_of("run-nope").await.unwrap().is_empty());
}

/// A store whose runs of agents "a" and "b" notify (as the daemon's are for agents with
/// notify URLs), and its manual clock.
async fn notifying(db: &TestDb) -> (Store, ManualClock) {
    let (store, clock) = db.manual().await;
    store.set_notifying_agents(["a", "b"]);
    (store, clock)
}

/// Enqueues `new` with one attempt, claims it for a worker that dies, and lets its lease
/// expire: the next claim (which finds nothing else) dead-letters it.
async fn dead_lettered_by_expiry(store: &Store, clock: &ManualClock, new: NewRun) -> Enqueued {
    let e = store.enqueue(&new.max_attempts(1)).await.unwrap();
    let _dead_worker = store
        .claim("w", None, 1, Duration::from_secs(1))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(2));
    assert!(store.claim("w2", None, 1, LEASE).await.unwrap().is_empty());
    e
}

/// The run's outbox statuses (also for PostgreSQL's own outbox test).
pub async fn outbox(store: &Store, run_id: &str) -> Vec<RunStatus> {
    store
        .run_outbox(run_id)
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.status)
        .collect()
}

pub async fn every_terminal_path_leaves_one_row(db: &TestDb) {
    let (store, clock) = notifying(db).await;

    // complete (succeeded)
    let done = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!(outbox(&store, &done.run_id).await, [], "running: no notice");
    lease.ack(Some("ok".into())).await.unwrap();
    assert_eq!(outbox(&store, &done.run_id).await, [RunStatus::Succeeded]);
    let row = store.run_outbox(&done.run_id).await.unwrap().remove(0);
    let run = store.run(&done.run_id).await.unwrap().unwrap();
    assert_eq!(
        (row.agent.as_str(), Some(row.created_at), row.expanded_at),
        ("a", run.finished_at, None)
    );

    // complete with the other ends the loop reports
    for (end, status) in [
        (RunEnd::Failed { error: "x".into() }, RunStatus::Failed),
        (
            RunEnd::BudgetExhausted { detail: "x".into() },
            RunStatus::BudgetExhausted,
        ),
        (
            RunEnd::MaxRounds { detail: "x".into() },
            RunStatus::MaxRounds,
        ),
    ] {
        let e = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
        let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
        lease.complete(end).await.unwrap();
        assert_eq!(outbox(&store, &e.run_id).await, [status]);
    }

    // retry on the last attempt dead-letters
    let retried = store
        .enqueue(&NewRun::new("a", "p").max_attempts(1))
        .await
        .unwrap();
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    let outcome = lease.retry_after(Duration::ZERO, "boom").await.unwrap();
    assert_eq!(outcome, RetryOutcome::DeadLettered);
    assert_eq!(outbox(&store, &retried.run_id).await, [RunStatus::Failed]);

    // lease expiry on the last attempt dead-letters (found by the next claim)
    let expired = dead_lettered_by_expiry(&store, &clock, NewRun::new("a", "p")).await;
    assert_eq!(outbox(&store, &expired.run_id).await, [RunStatus::Failed]);

    // cancel of a queued run
    let queued = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    assert_eq!(
        store.cancel_run(&queued.run_id).await.unwrap(),
        CancelOutcome::Cancelled
    );
    assert_eq!(outbox(&store, &queued.run_id).await, [RunStatus::Cancelled]);

    // cancel of a running run: the notice comes when the worker stops
    let running = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!(
        store.cancel_run(&running.run_id).await.unwrap(),
        CancelOutcome::Requested
    );
    assert_eq!(outbox(&store, &running.run_id).await, [], "only requested");
    lease.complete(RunEnd::Cancelled).await.unwrap();
    assert_eq!(
        outbox(&store, &running.run_id).await,
        [RunStatus::Cancelled]
    );

    // cancellation winning the race with parking
    let parking = store.enqueue(&NewRun::new("a", "p")).await.unwrap();
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    store.cancel_run(&parking.run_id).await.unwrap();
    let until = store.now() + 60_000;
    assert_eq!(lease.park_until(until, "{}").await.unwrap(), None);
    assert_eq!(
        outbox(&store, &parking.run_id).await,
        [RunStatus::Cancelled]
    );

    // supersession at enqueue: the old run gets its notice, the new one none (yet)
    let key = |p: &str| NewRun::new("a", p).concurrency("k", ConcurrencyPolicy::Supersede);
    let old = store.enqueue(&key("old")).await.unwrap();
    let new = store.enqueue(&key("new")).await.unwrap();
    assert_eq!(new.superseded, vec![old.run_id.clone()]);
    assert_eq!(outbox(&store, &old.run_id).await, [RunStatus::Superseded]);
    assert_eq!(outbox(&store, &new.run_id).await, []);

    // A terminal run stays terminal: its worker finishing later adds nothing.
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    assert_eq!(lease.job().run_id, new.run_id);
    let newer = store.enqueue(&key("newer")).await.unwrap();
    assert_eq!(newer.superseded, vec![new.run_id.clone()]);
    lease.complete(RunEnd::Cancelled).await.unwrap();
    assert_eq!(outbox(&store, &new.run_id).await, [RunStatus::Superseded]);
    assert!(store.cancel_run(&done.run_id).await.is_err());
    assert_eq!(outbox(&store, &done.run_id).await, [RunStatus::Succeeded]);
}

pub async fn non_terminal_changes_leave_none(db: &TestDb) {
    let (store, clock) = notifying(db).await;
    let e = store
        .enqueue(&NewRun::new("a", "p").max_attempts(3))
        .await
        .unwrap();
    // claim (running), progress, retry (queued), lease expiry (queued), release, park
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    lease
        .record_progress(&RunProgress {
            turns: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    lease
        .retry_after(Duration::ZERO, "transient")
        .await
        .unwrap();
    let _dead = store
        .claim("w", None, 1, Duration::from_secs(1))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(2));
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    lease.release("shutting down").await.unwrap();
    let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
    lease.park_until(store.now() + 60_000, "{}").await.unwrap();
    let run = store.run(&e.run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Waiting);
    assert_eq!(outbox(&store, &e.run_id).await, []);
    assert!(
        store
            .unexpanded_outbox(&["a".to_string()], 100)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn quiet_agents_leave_none(db: &TestDb) {
    let (store, clock) = notifying(db).await;
    // "q" has no notify URLs: none of its runs' ends leaves a row, whichever path ends them
    // (the one-statement enqueue and the keyed one; ack, dead letter by lease expiry, cancel,
    // supersession). A run of "a" ended alongside each shows the flag is per run.
    let plain = |agent: &str| NewRun::new(agent, "p");
    let keyed = |agent: &str| {
        NewRun::new(agent, "p").concurrency(format!("k-{agent}"), ConcurrencyPolicy::Supersede)
    };
    let mut quiet = Vec::new();
    let mut loud = Vec::new();
    for agent in ["q", "a"] {
        let acked = store.enqueue(&plain(agent)).await.unwrap();
        let lease = store.claim("w", None, 1, LEASE).await.unwrap().remove(0);
        assert_eq!(lease.job().run_id, acked.run_id);
        lease.ack(Some("ok".into())).await.unwrap();

        let expired = dead_lettered_by_expiry(&store, &clock, plain(agent)).await;

        let cancelled = store.enqueue(&plain(agent)).await.unwrap();
        store.cancel_run(&cancelled.run_id).await.unwrap();

        let superseded = store.enqueue(&keyed(agent)).await.unwrap();
        let newer = store.enqueue(&keyed(agent)).await.unwrap();
        assert_eq!(newer.superseded, vec![superseded.run_id.clone()]);
        store.cancel_run(&newer.run_id).await.unwrap();

        let ids = [acked, expired, cancelled, superseded, newer].map(|e| e.run_id);
        if agent == "q" {
            quiet.extend(ids);
        } else {
            loud.extend(ids);
        }
    }
    for id in &quiet {
        let run = store.run(id).await.unwrap().unwrap();
        assert!(run.status.is_terminal(), "{id}: {:?}", run.status);
        assert!(!run.notify, "{id}");
        assert_eq!(outbox(&store, id).await, [], "{id} ({:?})", run.status);
    }
    for id in &loud {
        let run = store.run(id).await.unwrap().unwrap();
        assert!(run.notify, "{id}");
        assert_eq!(outbox(&store, id).await, [run.status], "{id}");
    }
    let offered = store
        .unexpanded_outbox(&["a".to_string(), "q".to_string()], 100)
        .await
        .unwrap();
    assert_eq!(offered.len(), loud.len());
    assert!(offered.iter().all(|o| o.agent == "a"));

    // The set applies to runs enqueued from then on: a run enqueued before "q" notified
    // stays quiet, one enqueued after notifies.
    let before = store.enqueue(&plain("q")).await.unwrap();
    store.set_notifying_agents(["a", "q"]);
    let after = store.enqueue(&plain("q")).await.unwrap();
    store.cancel_run(&before.run_id).await.unwrap();
    store.cancel_run(&after.run_id).await.unwrap();
    assert_eq!(outbox(&store, &before.run_id).await, []);
    assert_eq!(outbox(&store, &after.run_id).await, [RunStatus::Cancelled]);
}

fn target(url: &str, max_attempts: i64) -> NewDelivery {
    NewDelivery {
        url: url.into(),
        secret_env: "NOTIFY_SECRET".into(),
        max_attempts,
    }
}

/// A finished run of `agent`; returns its id and its outbox row's id.
async fn finished(store: &Store, agent: &str) -> (String, i64) {
    let e = store.enqueue(&NewRun::new(agent, "p")).await.unwrap();
    store.cancel_run(&e.run_id).await.unwrap();
    let row = store.run_outbox(&e.run_id).await.unwrap().remove(0);
    (e.run_id, row.id)
}

pub async fn expansion_happens_once(db: &TestDb) {
    let (store, _) = notifying(db).await;
    let (run_a, outbox_a) = finished(&store, "a").await;
    let (_, outbox_b) = finished(&store, "b").await;
    let known = ["a".to_string()];
    let pending = store.unexpanded_outbox(&known, 100).await.unwrap();
    assert_eq!(
        pending.iter().map(|o| o.id).collect::<Vec<_>>(),
        vec![outbox_a],
        "only the agents this daemon knows"
    );
    let targets = [
        target("http://127.0.0.1:1/a", 3),
        target("http://127.0.0.1:1/b", 3),
    ];
    assert!(store.expand_outbox(outbox_a, &targets).await.unwrap());
    assert!(
        !store.expand_outbox(outbox_a, &targets).await.unwrap(),
        "a second expansion adds nothing"
    );
    let made = store.notifications(Some(&run_a), None, 100).await.unwrap();
    assert_eq!(made.len(), 2);
    assert!(made.iter().all(|n| n.status == DeliveryStatus::Pending
        && n.attempts == 0
        && n.outbox_id == outbox_a));
    assert_ne!(made[0].delivery_id, made[1].delivery_id);
    assert!(
        store
            .unexpanded_outbox(&known, 100)
            .await
            .unwrap()
            .is_empty()
    );
    // An agent without notify URLs: expanded into nothing, and not offered again.
    assert!(store.expand_outbox(outbox_b, &[]).await.unwrap());
    let all = ["a".to_string(), "b".to_string()];
    assert!(store.unexpanded_outbox(&all, 100).await.unwrap().is_empty());
    assert_eq!(store.notifications(None, None, 100).await.unwrap().len(), 2);
}

pub async fn deliveries_retry_then_die(db: &TestDb) {
    let (store, clock) = notifying(db).await;
    let (run_id, outbox_id) = finished(&store, "a").await;
    store
        .expand_outbox(outbox_id, &[target("http://127.0.0.1:1/x", 3)])
        .await
        .unwrap();
    for attempt in 1..=3 {
        let mut got = store.claim_notifications(10, LEASE).await.unwrap();
        assert_eq!(got.len(), 1, "attempt {attempt} is due");
        let d = got.remove(0);
        assert_eq!(d.attempts, attempt);
        assert!(
            store
                .claim_notifications(10, LEASE)
                .await
                .unwrap()
                .is_empty()
        );
        let retry_at = store.now() + 5_000;
        let outcome = AttemptOutcome::Failed {
            error: format!("HTTP 500 on attempt {attempt}"),
            status_code: Some(500),
            retry_at,
        };
        assert!(store.record_attempt(&d, &outcome).await.unwrap());
        clock.advance(Duration::from_secs(4));
        assert!(
            store
                .claim_notifications(10, LEASE)
                .await
                .unwrap()
                .is_empty(),
            "not before its retry time"
        );
        clock.advance(Duration::from_secs(2));
    }
    let d = store
        .notifications(Some(&run_id), None, 10)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(d.status, DeliveryStatus::Dead);
    assert_eq!(d.attempts, 3);
    assert_eq!(d.last_error.as_deref(), Some("HTTP 500 on attempt 3"));
    assert_eq!(d.last_status_code, Some(500));
    assert!(
        store
            .claim_notifications(10, LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    let dead = store
        .notifications(None, Some(DeliveryStatus::Dead), 10)
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);

    // Delivered on the second attempt: the earlier error stays for the record.
    let (run_id, outbox_id) = finished(&store, "a").await;
    store
        .expand_outbox(outbox_id, &[target("http://127.0.0.1:1/y", 3)])
        .await
        .unwrap();
    let d = store
        .claim_notifications(10, LEASE)
        .await
        .unwrap()
        .remove(0);
    let fail = AttemptOutcome::Failed {
        error: "connection refused".into(),
        status_code: None,
        retry_at: store.now(),
    };
    store.record_attempt(&d, &fail).await.unwrap();
    let d = store
        .claim_notifications(10, LEASE)
        .await
        .unwrap()
        .remove(0);
    let ok = AttemptOutcome::Delivered { status_code: 204 };
    assert!(store.record_attempt(&d, &ok).await.unwrap());
    let d = store
        .notifications(Some(&run_id), None, 10)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(
        (d.status, d.attempts, d.last_status_code, d.delivered_at),
        (DeliveryStatus::Delivered, 2, Some(204), Some(store.now()))
    );
    assert_eq!(d.last_error.as_deref(), Some("connection refused"));
}

pub async fn dead_claimant(db: &TestDb) {
    let (store, clock) = notifying(db).await;
    let (run_id, outbox_id) = finished(&store, "a").await;
    store
        .expand_outbox(outbox_id, &[target("http://127.0.0.1:1/x", 2)])
        .await
        .unwrap();
    let lease = Duration::from_secs(10);
    let first = store
        .claim_notifications(10, lease)
        .await
        .unwrap()
        .remove(0);
    // The claimant dies mid-POST; nothing is due until its lease runs out.
    clock.advance(Duration::from_secs(9));
    assert!(
        store
            .claim_notifications(10, lease)
            .await
            .unwrap()
            .is_empty()
    );
    clock.advance(Duration::from_secs(2));
    let second = store
        .claim_notifications(10, lease)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(
        second.delivery_id, first.delivery_id,
        "the same delivery id"
    );
    assert_eq!(second.attempts, 2);
    assert!(second.claim_token > first.claim_token);
    // The first claimant's late outcome is refused.
    let late = AttemptOutcome::Delivered { status_code: 200 };
    assert!(!store.record_attempt(&first, &late).await.unwrap());
    // The second claimant dies too, on the last attempt: the delivery is dead, and says why.
    clock.advance(Duration::from_secs(11));
    assert!(
        store
            .claim_notifications(10, lease)
            .await
            .unwrap()
            .is_empty()
    );
    let d = store
        .notifications(Some(&run_id), None, 10)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(d.status, DeliveryStatus::Dead);
    let error = d.last_error.unwrap();
    assert!(error.contains("attempt 2 of 2 stopped"), "{error}");
    assert!(!store.record_attempt(&second, &late).await.unwrap());
}
