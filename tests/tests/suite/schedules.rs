//! Cron schedules on both backends with a manual clock: DST transitions in Europe/Berlin and
//! America/New_York, missed fires after an outage, the overlap policies, and config
//! schedules. Several daemons and the leader lease are in `schedules_ha`.

use std::sync::Arc;
use std::time::Duration;

use nightshift_scheduler::cron::{
    self, FireOutcome, Missed, Overlap, Schedule, ScheduleError, SchedulePatch, ScheduleSpec,
    Timer, TimerConfig,
};
use nightshift_store::{ManualClock, Millis, ScheduleSource, Store};
use nightshift_tests::{TestDb, on_both_backends};

on_both_backends! {
    dst_berlin_spring_forward_fires_skipped_times_once_after_the_jump => dst_berlin_spring;
    dst_berlin_fall_back_fires_repeated_times_once => dst_berlin_fall;
    dst_new_york_spring_forward_fires_skipped_times_once_after_the_jump => dst_new_york_spring;
    dst_new_york_fall_back_fires_repeated_times_once => dst_new_york_fall;
    missed_fires_after_a_three_day_outage_follow_the_policy => missed_fires_after_outage;
    overlap_skip_queue_and_allow => overlap_policies;
    config_schedules_are_reapplied_and_read_only_in_the_api => config_schedules;
}

pub(crate) const AGENT: &str = "reporter";

pub(crate) fn at(rfc3339: &str) -> Millis {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .unwrap_or_else(|e| panic!("{rfc3339}: {e}"))
        .timestamp_millis()
}

pub(crate) fn show(ms: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

pub(crate) fn spec(name: &str, cron: &str, tz: &str) -> ScheduleSpec {
    ScheduleSpec {
        name: name.into(),
        cron: cron.into(),
        timezone: tz.into(),
        agent: AGENT.into(),
        prompt: "Report for {{ schedule }} at {{ fire_time }}".into(),
        overlap: Overlap::Allow,
        missed: Missed::Skip,
        enabled: true,
    }
}

pub(crate) async fn manual_store(db: &TestDb, start: &str) -> (Store, ManualClock) {
    let clock = ManualClock::new(at(start));
    (db.store_with(Arc::new(clock.clone())).await, clock)
}

pub(crate) async fn create(store: &Store, s: ScheduleSpec) -> nightshift_store::ScheduleRow {
    cron::create(store.as_operator("cli:test"), s, &[AGENT.to_string()])
        .await
        .unwrap()
}

/// The intake the schedule tests fire through: their one agent.
pub(crate) fn intake(store: &Store) -> nightshift_scheduler::Intake {
    nightshift_scheduler::Intake::new(store.clone(), [AGENT])
}

pub(crate) fn timer(store: &Store, holder: &str, grace: Duration) -> Timer {
    Timer::new(
        intake(store),
        holder,
        TimerConfig {
            misfire_grace: grace,
            ..TimerConfig::default()
        },
    )
}

/// Moves the clock from `from` to `to` in `step`s, ticking at each; returns the fires as
/// (schedule, fire time in UTC).
async fn drive(
    timer: &mut Timer,
    clock: &ManualClock,
    from: &str,
    to: &str,
    step: Duration,
) -> Vec<(String, String)> {
    let mut fired = Vec::new();
    let mut now = at(from);
    while now <= at(to) {
        clock.set(now);
        let tick = timer.tick().await.unwrap();
        assert!(tick.leader, "the only timer leads");
        assert_eq!(tick.missed, 0, "stepping finely misses nothing");
        for f in tick.fired {
            assert!(
                matches!(
                    f.outcome,
                    FireOutcome::Enqueued {
                        duplicate: false,
                        ..
                    }
                ),
                "{f:?}"
            );
            fired.push((f.schedule, show(f.fire_at)));
        }
        now += i64::try_from(step.as_millis()).unwrap();
    }
    fired
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// Runs a DST scenario: an hourly and a daily schedule in `tz`, the clock stepped every five
/// minutes through the transition; checks the fires and that each made one run whose prompt
/// names the local fire time.
async fn dst_scenario(
    db: &TestDb,
    tz: &str,
    daily: &str,
    window: (&str, &str),
    expected: &[(&str, &str)],
    prompt_has: &str,
) {
    let (store, clock) = manual_store(db, window.0).await;
    create(&store, spec("hourly", "0 * * * *", tz)).await;
    create(&store, spec("daily", daily, tz)).await;
    let mut t = timer(&store, "solo", Duration::from_secs(600));
    let fired = drive(&mut t, &clock, window.0, window.1, Duration::from_secs(300)).await;
    assert_eq!(fired, pairs(expected));
    let runs = store.list_runs(None, 100).await.unwrap();
    assert_eq!(runs.len(), expected.len(), "one run per fire");
    assert!(
        runs.iter().any(|r| r.input.contains(prompt_has)),
        "a prompt has {prompt_has}: {:?}",
        runs.iter().map(|r| &r.input).collect::<Vec<_>>()
    );
}

async fn dst_berlin_spring(db: &TestDb) {
    // 2026-03-29 01:00Z: 02:00 CET jumps to 03:00 CEST.
    dst_scenario(
        db,
        "Europe/Berlin",
        "30 2 * * *",
        ("2026-03-28T22:00:00Z", "2026-03-29T03:00:00Z"),
        &[
            ("hourly", "2026-03-28T23:00:00Z"),
            ("hourly", "2026-03-29T00:00:00Z"),
            ("daily", "2026-03-29T01:00:00Z"), // 02:30 does not exist: 03:00 CEST
            ("hourly", "2026-03-29T01:00:00Z"), // 02:00 skipped and 03:00, once
            ("hourly", "2026-03-29T02:00:00Z"),
            ("hourly", "2026-03-29T03:00:00Z"),
        ],
        "Report for daily at 2026-03-29T03:00:00+02:00",
    )
    .await;
}

async fn dst_berlin_fall(db: &TestDb) {
    // 2026-10-25 01:00Z: 03:00 CEST goes back to 02:00 CET.
    dst_scenario(
        db,
        "Europe/Berlin",
        "30 2 * * *",
        ("2026-10-24T22:00:00Z", "2026-10-25T03:00:00Z"),
        &[
            ("hourly", "2026-10-24T23:00:00Z"),
            ("hourly", "2026-10-25T00:00:00Z"), // 02:00 CEST
            ("daily", "2026-10-25T00:30:00Z"),  // 02:30 CEST; not again at 02:30 CET
            ("hourly", "2026-10-25T02:00:00Z"), // 03:00 CET; 02:00 CET was a repeat
            ("hourly", "2026-10-25T03:00:00Z"),
        ],
        "Report for daily at 2026-10-25T02:30:00+02:00",
    )
    .await;
}

async fn dst_new_york_spring(db: &TestDb) {
    // 2026-03-08 07:00Z: 02:00 EST jumps to 03:00 EDT.
    dst_scenario(
        db,
        "America/New_York",
        "30 2 * * *",
        ("2026-03-08T04:00:00Z", "2026-03-08T09:00:00Z"),
        &[
            ("hourly", "2026-03-08T05:00:00Z"),
            ("hourly", "2026-03-08T06:00:00Z"),
            ("daily", "2026-03-08T07:00:00Z"),
            ("hourly", "2026-03-08T07:00:00Z"),
            ("hourly", "2026-03-08T08:00:00Z"),
            ("hourly", "2026-03-08T09:00:00Z"),
        ],
        "Report for daily at 2026-03-08T03:00:00-04:00",
    )
    .await;
}

async fn dst_new_york_fall(db: &TestDb) {
    // 2026-11-01 06:00Z: 02:00 EDT goes back to 01:00 EST.
    dst_scenario(
        db,
        "America/New_York",
        "30 1 * * *",
        ("2026-11-01T03:00:00Z", "2026-11-01T09:00:00Z"),
        &[
            ("hourly", "2026-11-01T04:00:00Z"),
            ("hourly", "2026-11-01T05:00:00Z"), // 01:00 EDT
            ("daily", "2026-11-01T05:30:00Z"),  // 01:30 EDT; not again at 01:30 EST
            ("hourly", "2026-11-01T07:00:00Z"), // 02:00 EST; 01:00 EST was a repeat
            ("hourly", "2026-11-01T08:00:00Z"),
            ("hourly", "2026-11-01T09:00:00Z"),
        ],
        "Report for daily at 2026-11-01T01:30:00-04:00",
    )
    .await;
}

async fn missed_fires_after_outage(db: &TestDb) {
    let (store, clock) = manual_store(db, "2026-06-01T00:30:00Z").await;
    create(&store, spec("skipper", "0 * * * *", "Europe/Berlin")).await;
    create(
        &store,
        ScheduleSpec {
            missed: Missed::RunOnce,
            ..spec("catcher", "0 * * * *", "Europe/Berlin")
        },
    )
    .await;
    let mut t = timer(&store, "solo", Duration::from_secs(60));
    // Down from before 01:00Z on June 1st until 00:40Z on June 4th: 72 hourly fires owed.
    clock.set(at("2026-06-04T00:40:00Z"));
    let tick = t.tick().await.unwrap();
    assert_eq!(
        tick.missed,
        72 + 71,
        "skip drops all 72; run_once runs the latest of them"
    );
    assert_eq!(tick.fired.len(), 1, "{:?}", tick.fired);
    assert_eq!(tick.fired[0].schedule, "catcher");
    assert_eq!(show(tick.fired[0].fire_at), "2026-06-04T00:00:00Z");
    for name in ["skipper", "catcher"] {
        let row = store.schedule(name).await.unwrap().unwrap();
        assert_eq!(
            row.next_fire_at.map(show).as_deref(),
            Some("2026-06-04T01:00:00Z"),
            "{name} waits for the next future fire"
        );
    }
    let skipper = store.schedule("skipper").await.unwrap().unwrap();
    let catcher = store.schedule("catcher").await.unwrap().unwrap();
    assert_eq!((skipper.missed_count, skipper.fired_count), (72, 0));
    assert_eq!((catcher.missed_count, catcher.fired_count), (71, 1));
    assert_eq!(store.list_runs(None, 100).await.unwrap().len(), 1);
    // Back in service: both fire on time.
    clock.set(at("2026-06-04T01:00:00Z"));
    let tick = t.tick().await.unwrap();
    assert_eq!(tick.missed, 0);
    assert_eq!(tick.fired.len(), 2);
    assert_eq!(store.list_runs(None, 100).await.unwrap().len(), 3);
    // Ticking again at the same time fires nothing more.
    assert!(t.tick().await.unwrap().fired.is_empty());
}

async fn overlap_policies(db: &TestDb) {
    let (store, clock) = manual_store(db, "2026-06-01T12:00:30Z").await;
    let mut ids = Vec::new();
    for (name, overlap) in [
        ("skip", Overlap::Skip),
        ("queue", Overlap::Queue),
        ("allow", Overlap::Allow),
    ] {
        let row = create(
            &store,
            ScheduleSpec {
                overlap,
                ..spec(name, "* * * * *", "UTC")
            },
        )
        .await;
        ids.push(row.id);
    }
    let mut t = timer(&store, "solo", Duration::from_secs(60));
    clock.set(at("2026-06-01T12:01:00Z"));
    let first = t.tick().await.unwrap();
    assert_eq!(first.fired.len(), 3);
    let run_of = |tick: &nightshift_scheduler::cron::Tick, name: &str| {
        tick.fired
            .iter()
            .find(|f| f.schedule == name)
            .map(|f| f.outcome.clone())
            .unwrap()
    };
    let FireOutcome::Enqueued {
        run_id: skip_run, ..
    } = run_of(&first, "skip")
    else {
        panic!("the first fire of skip runs");
    };
    // A minute later nothing has finished (no worker runs here).
    clock.set(at("2026-06-01T12:02:00Z"));
    let second = t.tick().await.unwrap();
    assert_eq!(
        run_of(&second, "skip"),
        FireOutcome::Skipped {
            active_run: skip_run.clone()
        }
    );
    for (name, id, key) in [
        ("queue", &ids[1], Some(format!("schedule:{}", ids[1]))),
        ("allow", &ids[2], None),
    ] {
        let FireOutcome::Enqueued { run_id, duplicate } = run_of(&second, name) else {
            panic!("{name} enqueues while its previous run is active");
        };
        assert!(!duplicate);
        let run = store.run(&run_id).await.unwrap().unwrap();
        assert_eq!(run.concurrency_key, key, "{name}'s concurrency key");
        assert_eq!(
            run.idempotency_key,
            Some(format!("schedule:{id}:{}", at("2026-06-01T12:02:00Z")))
        );
    }
    let skip_row = store.schedule("skip").await.unwrap().unwrap();
    assert_eq!((skip_row.fired_count, skip_row.skipped_count), (1, 1));
    assert_eq!(
        skip_row.next_fire_at,
        Some(at("2026-06-01T12:03:00Z")),
        "a skipped fire still advances"
    );
    // A manual trigger respects the policy too.
    assert!(matches!(
        cron::trigger(&intake(&store), "skip", "cli:test")
            .await
            .unwrap(),
        FireOutcome::Skipped { .. }
    ));
    // Once the run is over, skip fires again.
    store.cancel_run(&skip_run).await.unwrap();
    clock.set(at("2026-06-01T12:03:00Z"));
    let third = t.tick().await.unwrap();
    assert!(matches!(
        run_of(&third, "skip"),
        FireOutcome::Enqueued {
            duplicate: false,
            ..
        }
    ));
    let skip_row = store.schedule("skip").await.unwrap().unwrap();
    assert_eq!((skip_row.fired_count, skip_row.skipped_count), (2, 1));
}

async fn config_schedules(db: &TestDb) {
    let (store, clock) = manual_store(db, "2026-06-01T12:00:30Z").await;
    let agents = [AGENT.to_string()];
    let compile = |s: ScheduleSpec| Schedule::compile(s, Some(&agents)).unwrap();
    let digest = spec("digest", "0 7 * * 1-5", "Europe/Berlin");
    let old = spec("old", "@daily", "UTC");
    let sync = cron::apply_config(&store, &[compile(digest.clone()), compile(old)])
        .await
        .unwrap();
    assert_eq!(sync.applied, ["digest", "old"]);
    let row = store.schedule("digest").await.unwrap().unwrap();
    assert_eq!(row.source, ScheduleSource::Config);
    // 2026-06-02 (Tuesday) 07:00 CEST.
    assert_eq!(row.next_fire_at, Some(at("2026-06-02T05:00:00Z")));
    // A restart three days later with the same config keeps the armed (now missed) fire, so
    // the timer sees the downtime; a changed prompt does not re-arm, a changed time does.
    clock.set(at("2026-06-05T12:00:00Z"));
    let reworded = ScheduleSpec {
        prompt: "New wording {{ date }}".into(),
        ..digest.clone()
    };
    let sync = cron::apply_config(&store, &[compile(reworded)])
        .await
        .unwrap();
    assert_eq!(
        sync.removed,
        ["old"],
        "config schedules no longer in the file go"
    );
    let row = store.schedule("digest").await.unwrap().unwrap();
    assert_eq!(row.next_fire_at, Some(at("2026-06-02T05:00:00Z")));
    assert_eq!(row.prompt, "New wording {{ date }}");
    let retimed = ScheduleSpec {
        cron: "0 8 * * 1-5".into(),
        ..digest.clone()
    };
    cron::apply_config(&store, &[compile(retimed)])
        .await
        .unwrap();
    let row = store.schedule("digest").await.unwrap().unwrap();
    assert_eq!(
        row.next_fire_at,
        Some(at("2026-06-08T06:00:00Z")),
        "Monday 08:00 CEST"
    );
    // The API cannot change or delete it, nor take its name; it can trigger it.
    let patch = SchedulePatch {
        enabled: Some(false),
        ..SchedulePatch::default()
    };
    let err = cron::update(store.as_operator("cli:test"), "digest", patch, &agents)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ScheduleError::Conflict(m) if m.contains("defined in the config file")),
        "{err}"
    );
    assert!(matches!(
        store.delete_schedule("digest").await,
        Err(nightshift_store::Error::Conflict(_))
    ));
    let err = cron::create(store.as_operator("cli:test"), digest.clone(), &agents)
        .await
        .unwrap_err();
    assert!(matches!(err, ScheduleError::Conflict(_)), "{err}");
    let FireOutcome::Enqueued { run_id, .. } = cron::trigger(&intake(&store), "digest", "cli:test")
        .await
        .unwrap()
    else {
        panic!("trigger enqueues");
    };
    let run = store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(run.input, "Report for digest at 2026-06-05T14:00:00+02:00");
    // An API schedule with a config name blocks the config until it is deleted.
    let api = create(&store, spec("api-made", "@hourly", "UTC")).await;
    assert_eq!(api.source, ScheduleSource::Api);
    let clash = spec("api-made", "@daily", "UTC");
    let err = cron::apply_config(&store, &[compile(clash)])
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("also made through the API"),
        "{err}"
    );
    // API schedules can be changed: disabling disarms, enabling re-arms from now.
    let patch = SchedulePatch {
        enabled: Some(false),
        ..SchedulePatch::default()
    };
    let row = cron::update(store.as_operator("cli:test"), "api-made", patch, &agents)
        .await
        .unwrap();
    assert_eq!((row.enabled, row.next_fire_at), (false, None));
    let patch = SchedulePatch {
        enabled: Some(true),
        cron: Some("30 * * * *".into()),
        ..SchedulePatch::default()
    };
    let row = cron::update(store.as_operator("cli:test"), "api-made", patch, &agents)
        .await
        .unwrap();
    assert_eq!(row.next_fire_at, Some(at("2026-06-05T12:30:00Z")));
    store.delete_schedule("api-made").await.unwrap();
    assert!(store.schedule("api-made").await.unwrap().is_none());
}
