//! The schedule timer's counts: after an outage on a manual clock, a `skip` schedule's missed
//! fires and a `run_once` one's misses and latest fire, then both firing on time.

use std::time::Duration;

use nightshift_telemetry::exposition::parse;
use nightshift_tests::TestDb;

use super::value;

/// The timer after a three-hour outage, on a manual clock: a `skip` schedule misses all three
/// fires; a `run_once` one misses two and fires the latest; both then fire on time.
pub(super) async fn timer_fires_and_misses(db: &TestDb) {
    use crate::schedules::{at, create, manual_store, spec, timer};
    use nightshift_scheduler::cron::{Missed, ScheduleSpec};

    nightshift_telemetry::install();
    let p = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let (skipper, catcher) = (format!("skip-{p}"), format!("catch-{p}"));
    let (store, clock) = manual_store(db, "2026-06-01T00:30:00Z").await;
    create(&store, spec(&skipper, "0 * * * *", "UTC")).await;
    let catching = ScheduleSpec {
        missed: Missed::RunOnce,
        ..spec(&catcher, "0 * * * *", "UTC")
    };
    create(&store, catching).await;
    let mut t = timer(&store, "solo", Duration::from_secs(60));
    clock.set(at("2026-06-01T03:40:00Z"));
    t.tick().await.unwrap();
    clock.set(at("2026-06-01T04:00:00Z"));
    t.tick().await.unwrap();

    let samples = parse(&nightshift_telemetry::render());
    let missed = |name: &str| {
        value(
            &samples,
            "nightshift_schedule_missed_fires_total",
            &[("schedule", name)],
        )
    };
    let fired = |name: &str| {
        value(
            &samples,
            "nightshift_schedule_fires_total",
            &[
                ("schedule", name),
                ("trigger", "timer"),
                ("outcome", "enqueued"),
            ],
        )
    };
    assert_eq!(missed(&skipper), Some(3.0));
    assert_eq!(missed(&catcher), Some(2.0));
    assert_eq!(fired(&skipper), Some(1.0), "the on-time fire at 04:00");
    assert_eq!(
        fired(&catcher),
        Some(2.0),
        "the latest missed fire, then 04:00"
    );
    store.close().await;
}
