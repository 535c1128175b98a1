//! The timer loop: one daemon at a time (the leader) fires due schedules.
//!
//! What it guarantees:
//! - **One leader.** Each daemon tries to take or renew the store's `schedules` leader lease
//!   every [`TimerConfig::renew_every`]; the lease lasts [`TimerConfig::lease_ttl`]. A standby
//!   keeps trying, so when the leader dies its lease runs out and a standby leads within
//!   `lease_ttl + renew_every`. A clean shutdown releases the lease at once.
//! - **Exactly one run per fire**, also with several daemons and across crashes: the fire's
//!   idempotency key makes a repeated enqueue return the first run, and advancing the
//!   schedule is a compare-and-set on its armed fire, fenced by the leader's epoch.
//! - **Missed fires.** Each schedule's next fire is stored, so a fire that came due while no
//!   daemon ran is found later. A fire taken up within [`TimerConfig::misfire_grace`] of its
//!   time is on time and fires. Older ones are missed: with `missed = "skip"` they are dropped
//!   (logged and counted) and the next future fire is armed; with `run_once` the latest missed
//!   time fires once, then the next future fire is armed.
//! - **Time comes from the store's clock**; the loop sleeps until the earliest armed fire, at
//!   most `renew_every`, so schedules made through the API are seen within that.

use std::time::Duration;

use nightshift_store::{LeaderFence, LeaderLease, Millis, ScheduleAdvance, ScheduleRow};

use crate::Intake;
use tokio_util::sync::CancellationToken;

use super::service::{FireOutcome, ScheduleError, fire};
use super::spec::{Missed, Schedule, to_utc};

/// The name of the leader lease of the schedule timer.
pub const LEADER_LEASE: &str = "schedules";
/// Missed fires counted one by one, at most (more are logged as "at least").
const MISSED_COUNT_CAP: u64 = 100_000;
/// Schedules handled per tick, at most (more are handled by the next tick, at once).
const BATCH: i64 = 100;

/// The timer's timing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerConfig {
    /// How long a leader lease lasts without renewal.
    pub lease_ttl: Duration,
    /// How often the leader renews and a standby tries to take over; also the longest the
    /// loop sleeps.
    pub renew_every: Duration,
    /// A fire taken up this late is still on time; later it counts as missed.
    pub misfire_grace: Duration,
}

impl Default for TimerConfig {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
            misfire_grace: Duration::from_secs(60),
        }
    }
}

/// One fire the tick made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    pub schedule: String,
    pub fire_at: Millis,
    pub outcome: FireOutcome,
}

/// What one tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tick {
    /// Whether this daemon held the lease.
    pub leader: bool,
    pub fired: Vec<Fired>,
    /// Fires dropped because of downtime, over all schedules.
    pub missed: u64,
    /// The earliest armed fire after the tick.
    pub next_fire: Option<Millis>,
}

/// The schedule timer of one daemon.
#[derive(Debug)]
pub struct Timer {
    intake: Intake,
    holder: String,
    config: TimerConfig,
    lease: Option<LeaderLease>,
}

impl Timer {
    /// A timer for the daemon `holder` (unique per process, e.g. host:pid:uuid), firing
    /// through `intake`.
    pub fn new(intake: Intake, holder: impl Into<String>, config: TimerConfig) -> Self {
        Self {
            intake,
            holder: holder.into(),
            config,
            lease: None,
        }
    }

    /// The lease this timer holds, as of its last tick.
    pub fn lease(&self) -> Option<&LeaderLease> {
        self.lease.as_ref()
    }

    /// Takes or renews the lease; when leading, fires what is due.
    pub async fn tick(&mut self) -> Result<Tick, ScheduleError> {
        let lease = self
            .intake
            .store()
            .acquire_leadership(LEADER_LEASE, &self.holder, self.config.lease_ttl)
            .await?;
        match (&self.lease, &lease) {
            (None, Some(l)) => {
                tracing::info!(holder = %self.holder, epoch = l.epoch, "leading the schedule timer")
            }
            (Some(_), None) => {
                tracing::warn!(holder = %self.holder, "lost the schedule timer lease; standing by")
            }
            _ => {}
        }
        self.lease = lease;
        let Some(lease) = self.lease.clone() else {
            return Ok(Tick::default());
        };
        let fence = LeaderFence {
            lease: LEADER_LEASE.to_string(),
            holder: self.holder.clone(),
            epoch: lease.epoch,
        };
        let mut tick = Tick {
            leader: true,
            ..Tick::default()
        };
        for row in self.intake.store().due_schedules(BATCH).await? {
            if let Err(e) = self.process(&row, &fence, &mut tick).await {
                tracing::error!(schedule = %row.name, error = %e, "schedule fire failed; retrying next tick");
            }
        }
        tick.next_fire = self.intake.store().next_schedule_fire().await?;
        Ok(tick)
    }

    async fn process(
        &self,
        row: &ScheduleRow,
        fence: &LeaderFence,
        tick: &mut Tick,
    ) -> Result<(), ScheduleError> {
        let Some(armed) = row.next_fire_at else {
            return Ok(());
        };
        let schedule =
            Schedule::from_row(row).map_err(|e| ScheduleError::Invalid(e.to_string()))?;
        let now = self.intake.store().now();
        let (due, latest) =
            schedule
                .expr
                .fires_between(&schedule.tz, to_utc(armed), to_utc(now), MISSED_COUNT_CAP);
        let latest = latest.map_or(armed, |t| t.timestamp_millis());
        let grace = i64::try_from(self.config.misfire_grace.as_millis()).unwrap_or(i64::MAX);
        let on_time = now.saturating_sub(latest) <= grace;
        let fire_at = (on_time || schedule.spec.missed == Missed::RunOnce).then_some(latest);
        let missed = due.max(1) - u64::from(fire_at.is_some());
        if missed > 0 {
            tracing::warn!(
                schedule = %row.name,
                missed,
                at_least = due >= MISSED_COUNT_CAP,
                first_missed = %schedule.local_rfc3339(armed),
                policy = schedule.spec.missed.as_str(),
                "fires were missed: no daemon was leading the schedule timer at their time"
            );
        }
        let outcome = match fire_at {
            Some(at) => Some(fire(&self.intake, row, &schedule, at, false).await?),
            None => None,
        };
        let advance = ScheduleAdvance {
            id: row.id.clone(),
            expected_next: armed,
            next: schedule.next_after(now),
            fired: match (&outcome, fire_at) {
                (Some(FireOutcome::Enqueued { run_id, .. }), Some(at)) => {
                    Some((at, run_id.clone()))
                }
                _ => None,
            },
            skipped: matches!(outcome, Some(FireOutcome::Skipped { .. })),
            missed: i64::try_from(missed).unwrap_or(i64::MAX),
            fence: Some(fence.clone()),
        };
        if !self.intake.store().advance_schedule(&advance).await? {
            // Another daemon moved it first, or this one is no longer leader; the fire's
            // idempotency key kept the run single either way.
            tracing::debug!(schedule = %row.name, "schedule already advanced elsewhere");
            return Ok(());
        }
        tick.missed += missed;
        nightshift_telemetry::schedule_missed(&row.name, missed);
        if let (Some(outcome), Some(at)) = (outcome, fire_at) {
            nightshift_telemetry::schedule_fire(&row.name, "timer", outcome.metric_name());
            match &outcome {
                FireOutcome::Enqueued { run_id, duplicate } => tracing::info!(
                    schedule = %row.name, fire_time = %schedule.local_rfc3339(at), %run_id,
                    duplicate, "schedule fired"
                ),
                FireOutcome::Skipped { active_run } => tracing::info!(
                    schedule = %row.name, fire_time = %schedule.local_rfc3339(at), %active_run,
                    "schedule fire skipped: its previous run is still active (overlap = skip)"
                ),
            }
            tick.fired.push(Fired {
                schedule: row.name.clone(),
                fire_at: at,
                outcome,
            });
        }
        Ok(())
    }

    /// How long to sleep after `tick`: until the earliest armed fire when leading, at most
    /// `renew_every`.
    pub fn sleep_after(&self, tick: &Tick) -> Duration {
        let cap = self.config.renew_every;
        match (tick.leader, tick.next_fire) {
            (true, Some(next)) => {
                let ms = u64::try_from(next.saturating_sub(self.intake.store().now())).unwrap_or(0);
                Duration::from_millis(ms).clamp(Duration::from_millis(5), cap)
            }
            _ => cap,
        }
    }

    /// Runs until `shutdown`, then releases the lease. Store errors are logged and retried.
    pub async fn run(mut self, shutdown: CancellationToken) {
        while !shutdown.is_cancelled() {
            let pause = match self.tick().await {
                Ok(tick) => self.sleep_after(&tick),
                Err(e) => {
                    tracing::warn!(error = %e, "schedule timer tick failed; retrying");
                    self.config.renew_every
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(pause) => {}
            }
        }
        if self.lease.is_some() {
            match self
                .intake
                .store()
                .release_leadership(LEADER_LEASE, &self.holder)
                .await
            {
                Ok(_) => tracing::info!(holder = %self.holder, "released the schedule timer lease"),
                Err(e) => tracing::warn!(error = %e, "could not release the schedule timer lease"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sleeps_until_the_next_fire_but_no_longer_than_the_renewal() {
        let dir = std::env::temp_dir().join(format!("ns-timer-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let config =
            nightshift_store::StoreConfig::for_url(format!("sqlite://{}/t.db", dir.display()));
        let clock = nightshift_store::ManualClock::new(1_000_000);
        let store = nightshift_store::Store::connect(&config, std::sync::Arc::new(clock))
            .await
            .unwrap();
        let timer = Timer::new(
            crate::Intake::new(store.clone(), ["a"]),
            "t",
            TimerConfig::default(),
        );
        let leading = |next| Tick {
            leader: true,
            next_fire: next,
            ..Tick::default()
        };
        assert_eq!(
            timer.sleep_after(&leading(Some(1_001_500))),
            Duration::from_millis(1500)
        );
        assert_eq!(
            timer.sleep_after(&leading(Some(9_000_000))),
            Duration::from_secs(5),
            "a far fire: wake to renew the lease and see new schedules"
        );
        assert_eq!(
            timer.sleep_after(&leading(Some(900_000))),
            Duration::from_millis(5),
            "an overdue fire: at once"
        );
        assert_eq!(timer.sleep_after(&leading(None)), Duration::from_secs(5));
        assert_eq!(
            timer.sleep_after(&Tick::default()),
            Duration::from_secs(5),
            "a standby retries every renewal period"
        );
        store.close().await;
        let _ = std::fs::remove_dir_all(dir);
    }
}
