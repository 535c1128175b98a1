//! Which fires of a schedule are due when the timer takes it up: a pure decision from the
//! armed fire, the time now (the schedules' clock) and the misfire grace.
//!
//! The rule, the one the README states:
//! - **Each fire is judged on its own.** A fire taken up at most `grace` (one minute) after
//!   its time is on time and runs, however many such fires there are (a timer that was held
//!   up for 30 s runs all six fires of a 5-second schedule, in order).
//! - **Later ones are missed.** A fire taken up more than `grace` after its time follows the
//!   schedule's `missed` policy: `skip` drops it (counted), `run_once` runs the latest of the
//!   missed fires once and counts the others.
//! - **Then the next future fire is armed**: the first fire after now.

use std::time::Duration;

use nightshift_store::Millis;

use super::spec::{Missed, Schedule, to_utc};

/// Missed fires counted one by one, at most (more are logged as "at least").
pub const MISSED_COUNT_CAP: u64 = 100_000;
/// On-time fires run by one take-up, at most: a minute of a schedule with seconds is 61.
const ON_TIME_CAP: usize = 1_000;

/// What the timer does with a schedule it takes up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The fires to run, earliest first: with `run_once`, the latest missed fire, then every
    /// on-time fire.
    pub fires: Vec<Millis>,
    /// Missed fires that do not run (at most [`MISSED_COUNT_CAP`]).
    pub missed: u64,
    /// The earliest missed fire, when there is one (also one that `run_once` runs).
    pub first_missed: Option<Millis>,
    /// Whether the count of missed fires reached [`MISSED_COUNT_CAP`] (there may be more).
    pub missed_at_least: bool,
    /// The fire to arm once these are done: the first after now (`None`: it never fires
    /// again).
    pub next: Option<Millis>,
}

/// What is due of `schedule`, armed for `armed`, taken up at `now`. `armed` later than `now`
/// is nothing due (only the next fire is given).
pub fn due(schedule: &Schedule, armed: Millis, now: Millis, grace: Duration) -> Due {
    let grace = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
    // Fires before `cutoff` are more than `grace` late.
    let cutoff = now.saturating_sub(grace);
    let next = schedule.next_after(now);
    if armed > now {
        return Due {
            fires: Vec::new(),
            missed: 0,
            first_missed: None,
            missed_at_least: false,
            next: Some(armed),
        };
    }
    let (late, latest_late) = if armed < cutoff {
        schedule.expr.fires_between(
            &schedule.tz,
            to_utc(armed),
            to_utc(cutoff - 1),
            MISSED_COUNT_CAP,
        )
    } else {
        (0, None)
    };
    let mut on_time = Vec::new();
    let mut at = armed.max(cutoff) - 1;
    while on_time.len() < ON_TIME_CAP {
        match schedule.next_after(at) {
            Some(t) if t <= now => {
                on_time.push(t);
                at = t;
            }
            _ => break,
        }
    }
    let mut late = late;
    let mut latest_late = latest_late.map(|t| t.timestamp_millis());
    if late == 0 && on_time.is_empty() {
        // The armed time is not one of the expression's fires (a value armed by an older
        // definition): it is still owed, as one fire at that time.
        if armed < cutoff {
            (late, latest_late) = (1, Some(armed));
        } else {
            on_time.push(armed);
        }
    }
    let mut fires = Vec::with_capacity(on_time.len() + 1);
    let mut missed = late;
    if late > 0 && schedule.spec.missed == Missed::RunOnce {
        fires.extend(latest_late);
        missed -= 1;
    }
    fires.extend(on_time);
    Due {
        fires,
        missed,
        // The armed fire is the earliest one owed.
        first_missed: (late > 0).then_some(armed),
        missed_at_least: late >= MISSED_COUNT_CAP,
        next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cron::spec::{Overlap, ScheduleSpec};

    const MIN: Duration = Duration::from_secs(60);

    fn schedule(cron: &str, missed: Missed) -> Schedule {
        Schedule::compile(
            ScheduleSpec {
                name: "s".into(),
                cron: cron.into(),
                timezone: "UTC".into(),
                agent: "a".into(),
                prompt: "p".into(),
                overlap: Overlap::Allow,
                missed,
                enabled: true,
            },
            None,
        )
        .unwrap()
    }

    /// Seconds after 2026-06-01T12:00:00Z, in ms.
    fn t(secs: i64) -> Millis {
        1_780_315_200_000 + secs * 1000
    }

    #[test]
    fn a_fire_taken_up_on_time_runs_alone() {
        let s = schedule("*/5 * * * * *", Missed::Skip);
        let d = due(&s, t(10), t(10), MIN);
        assert_eq!(d.fires, [t(10)]);
        assert_eq!((d.missed, d.first_missed, d.next), (0, None, Some(t(15))));
    }

    #[test]
    fn every_fire_less_than_a_minute_late_runs() {
        // Held up 32 s: seven 5-second fires, the oldest 32 s late; none is missed.
        let s = schedule("*/5 * * * * *", Missed::Skip);
        let d = due(&s, t(10), t(42), MIN);
        assert_eq!(d.fires, [t(10), t(15), t(20), t(25), t(30), t(35), t(40)]);
        assert_eq!((d.missed, d.first_missed, d.next), (0, None, Some(t(45))));
    }

    #[test]
    fn a_fire_exactly_a_minute_late_is_on_time_and_a_millisecond_more_is_missed() {
        let s = schedule("0 * * * * *", Missed::Skip);
        assert_eq!(due(&s, t(0), t(60), MIN).fires, [t(0), t(60)]);
        let d = due(&s, t(0), t(60) + 1, MIN);
        assert_eq!(d.fires, [t(60)]);
        assert_eq!((d.missed, d.first_missed), (1, Some(t(0))));
    }

    #[test]
    fn three_minutes_late_is_missed_and_skip_drops_it() {
        let s = schedule("0 0 12 * * *", Missed::Skip);
        let d = due(&s, t(0), t(180), MIN);
        assert!(d.fires.is_empty());
        assert_eq!((d.missed, d.first_missed), (1, Some(t(0))));
        assert_eq!(d.next, Some(t(86_400)));
    }

    #[test]
    fn run_once_runs_the_latest_missed_fire_then_the_on_time_ones() {
        // Down 3 minutes with a 20-second schedule: fires up to 60 s old run, older ones are
        // missed; run_once runs the latest of those once.
        let s = schedule("*/20 * * * * *", Missed::RunOnce);
        let d = due(&s, t(0), t(180), MIN);
        assert_eq!(d.fires, [t(100), t(120), t(140), t(160), t(180)]);
        assert_eq!((d.missed, d.first_missed), (5, Some(t(0))));
        let skip = due(&schedule("*/20 * * * * *", Missed::Skip), t(0), t(180), MIN);
        assert_eq!(skip.fires, [t(120), t(140), t(160), t(180)]);
        assert_eq!(skip.missed, 6);
    }

    #[test]
    fn a_fire_not_yet_due_is_left_armed() {
        let s = schedule("*/5 * * * * *", Missed::Skip);
        let d = due(&s, t(15), t(12), MIN);
        assert!(d.fires.is_empty());
        assert_eq!((d.missed, d.next), (0, Some(t(15))));
    }

    #[test]
    fn an_armed_time_the_expression_does_not_have_is_still_one_fire() {
        let s = schedule("0 0 12 * * *", Missed::Skip);
        let d = due(&s, t(7), t(30), MIN);
        assert_eq!(d.fires, [t(7)]);
        let d = due(&s, t(7), t(300), MIN);
        assert_eq!(
            (d.fires.len(), d.missed, d.first_missed),
            (0, 1, Some(t(7)))
        );
    }

    #[test]
    fn years_of_downtime_count_up_to_the_cap() {
        let s = schedule("* * * * * *", Missed::Skip);
        let d = due(&s, t(0), t(10_000_000), MIN);
        assert_eq!(d.missed, MISSED_COUNT_CAP);
        assert!(d.missed_at_least);
        assert_eq!(d.fires.len(), 61, "the last minute's fires run");
    }
}
