//! Several daemons on one database, with a manual clock on both backends: each fire is one
//! run, a fire repeated after a crash makes no second run, advancing a schedule is a
//! compare-and-set, and the leader lease fails over and fences a deposed leader.

use std::sync::Arc;
use std::time::Duration;

use nightshift_scheduler::cron::{self, FireOutcome, Schedule};
use nightshift_store::{LeaderFence, ScheduleAdvance};
use nightshift_tests::{TestDb, on_both_backends};

use crate::schedules::{at, create, manual_store, spec, timer};

on_both_backends! {
    two_daemons_fire_each_fire_exactly_once => two_daemons_fire_each_fire_once;
    a_fire_repeated_after_a_crash_makes_no_second_run => repeated_fire_after_crash;
    advancing_a_schedule_is_a_compare_and_set => advance_is_compare_and_set;
    standby_takes_over_when_the_leader_stops_renewing => leader_takeover;
}

async fn two_daemons_fire_each_fire_once(db: &TestDb) {
    let (a, clock) = manual_store(db, "2026-06-01T12:00:30Z").await;
    let b = db.store_with(Arc::new(clock.clone())).await;
    create(&a, spec("every-minute", "* * * * *", "UTC")).await;
    create(&b, spec("every-10s", "*/10 * * * * *", "UTC")).await;
    let mut ta = timer(&a, "daemon-a", Duration::from_secs(60));
    let mut tb = timer(&b, "daemon-b", Duration::from_secs(60));
    let mut fires = 0;
    for step in 1..=60 {
        clock.set(at("2026-06-01T12:00:30Z") + step * 10_000);
        let (ra, rb) = tokio::join!(ta.tick(), tb.tick());
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert!(ra.leader ^ rb.leader, "exactly one leader at step {step}");
        fires += ra.fired.len() + rb.fired.len();
    }
    // 10 minutes: 10 minute fires and 60 ten-second fires, each one run.
    assert_eq!(fires, 70);
    let runs = a.list_runs(None, 1000).await.unwrap();
    assert_eq!(runs.len(), 70);
    let keys: std::collections::HashSet<_> =
        runs.iter().map(|r| r.idempotency_key.clone()).collect();
    assert_eq!(keys.len(), 70, "every run is a different fire");
}

async fn repeated_fire_after_crash(db: &TestDb) {
    let (a, clock) = manual_store(db, "2026-06-01T12:00:30Z").await;
    let b = db.store_with(Arc::new(clock.clone())).await;
    let row = create(&a, spec("every-minute", "* * * * *", "UTC")).await;
    clock.set(at("2026-06-01T12:01:00Z"));
    // Daemon A enqueued the fire and died before advancing the schedule.
    let schedule = Schedule::from_row(&row).unwrap();
    let fire_at = row.next_fire_at.unwrap();
    let FireOutcome::Enqueued { run_id, .. } = cron::fire(
        &crate::schedules::intake(&a),
        &row,
        &schedule,
        fire_at,
        false,
    )
    .await
    .unwrap() else {
        panic!("the fire enqueues");
    };
    // Daemon B leads next and fires the same armed time: the run is the same one.
    let mut tb = timer(&b, "daemon-b", Duration::from_secs(60));
    let tick = tb.tick().await.unwrap();
    assert_eq!(
        tick.fired[0].outcome,
        FireOutcome::Enqueued {
            run_id: run_id.clone(),
            duplicate: true
        }
    );
    assert_eq!(a.list_runs(None, 10).await.unwrap().len(), 1);
    let row = a.schedule("every-minute").await.unwrap().unwrap();
    assert_eq!(row.last_run_id.as_deref(), Some(run_id.as_str()));
    assert_eq!(row.next_fire_at, Some(at("2026-06-01T12:02:00Z")));
}

async fn leader_takeover(db: &TestDb) {
    let (a, clock) = manual_store(db, "2026-06-01T12:00:00Z").await;
    let b = db.store_with(Arc::new(clock.clone())).await;
    let row = create(&a, spec("every-minute", "* * * * *", "UTC")).await;
    let mut ta = timer(&a, "daemon-a", Duration::from_secs(60));
    let mut tb = timer(&b, "daemon-b", Duration::from_secs(60));
    assert!(ta.tick().await.unwrap().leader);
    assert!(
        !tb.tick().await.unwrap().leader,
        "a live lease is not taken"
    );
    let epoch_a = ta.lease().unwrap().epoch;
    // A renews within the TTL and keeps leading.
    clock.advance(Duration::from_secs(10));
    assert!(ta.tick().await.unwrap().leader);
    clock.advance(Duration::from_secs(10));
    assert!(!tb.tick().await.unwrap().leader);
    // A stops renewing (dies); B takes over once A's 15 s lease (renewed at +10 s) ran out.
    clock.advance(Duration::from_secs(4));
    assert!(!tb.tick().await.unwrap().leader, "A's lease still has 1 s");
    clock.advance(Duration::from_secs(2));
    let tick = tb.tick().await.unwrap();
    assert!(tick.leader, "B leads after A's lease expired");
    let epoch_b = tb.lease().unwrap().epoch;
    assert!(
        epoch_b > epoch_a,
        "the epoch grows when the lease changes hands"
    );
    // A comes back thinking it leads: its fenced write is refused, and its tick stands by.
    let stale = ScheduleAdvance {
        id: row.id.clone(),
        expected_next: a
            .schedule("every-minute")
            .await
            .unwrap()
            .unwrap()
            .next_fire_at
            .unwrap(),
        next: Some(0),
        fired: None,
        skipped: false,
        missed: 0,
        fence: Some(LeaderFence {
            lease: cron::LEADER_LEASE.into(),
            holder: "daemon-a".into(),
            epoch: epoch_a,
        }),
    };
    assert!(
        !a.advance_schedule(&stale).await.unwrap(),
        "the deposed leader is fenced"
    );
    assert!(!ta.tick().await.unwrap().leader);
    // B shuts down cleanly: the lease is free at once, without waiting for the TTL.
    assert!(
        b.release_leadership(cron::LEADER_LEASE, "daemon-b")
            .await
            .unwrap()
    );
    assert!(
        ta.tick().await.unwrap().leader,
        "A takes over at its next try"
    );
    let lease = a.leader(cron::LEADER_LEASE).await.unwrap().unwrap();
    assert_eq!(lease.holder, "daemon-a");
    assert!(lease.epoch > epoch_b);
}

async fn advance_is_compare_and_set(db: &TestDb) {
    let (a, clock) = manual_store(db, "2026-06-01T12:00:30Z").await;
    let b = db.store_with(Arc::new(clock.clone())).await;
    let row = create(&a, spec("every-minute", "* * * * *", "UTC")).await;
    let armed = row.next_fire_at.unwrap();
    let advance = |next: i64| ScheduleAdvance {
        id: row.id.clone(),
        expected_next: armed,
        next: Some(next),
        fired: None,
        skipped: true,
        missed: 0,
        fence: None,
    };
    // Two daemons advance the same armed fire at once: exactly one wins.
    let (first, second) = (advance(armed + 60_000), advance(armed + 120_000));
    let (x, y) = tokio::join!(a.advance_schedule(&first), b.advance_schedule(&second));
    assert!(x.unwrap() ^ y.unwrap(), "one advance wins");
    let row = a.schedule("every-minute").await.unwrap().unwrap();
    assert_eq!(row.skipped_count, 1, "the loser changed nothing");
    // A fence on a lease that has expired is refused, even for the right holder and epoch.
    let lease = a
        .acquire_leadership(cron::LEADER_LEASE, "daemon-a", Duration::from_secs(15))
        .await
        .unwrap()
        .unwrap();
    clock.advance(Duration::from_secs(16));
    let fenced = ScheduleAdvance {
        expected_next: row.next_fire_at.unwrap(),
        fence: Some(LeaderFence {
            lease: cron::LEADER_LEASE.into(),
            holder: "daemon-a".into(),
            epoch: lease.epoch,
        }),
        ..advance(0)
    };
    assert!(
        !a.advance_schedule(&fenced).await.unwrap(),
        "an expired lease fences"
    );
    a.acquire_leadership(cron::LEADER_LEASE, "daemon-a", Duration::from_secs(15))
        .await
        .unwrap()
        .unwrap();
    assert!(
        !a.advance_schedule(&fenced).await.unwrap(),
        "the epoch of the lapsed lease is stale after re-acquiring"
    );
    let current = a.leader(cron::LEADER_LEASE).await.unwrap().unwrap();
    let fenced = ScheduleAdvance {
        fence: Some(LeaderFence {
            lease: cron::LEADER_LEASE.into(),
            holder: "daemon-a".into(),
            epoch: current.epoch,
        }),
        ..fenced
    };
    assert!(
        a.advance_schedule(&fenced).await.unwrap(),
        "the current epoch writes"
    );
}
