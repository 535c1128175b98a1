//! The timer loop: one daemon at a time (the leader) fires due schedules.
//!
//! What it guarantees:
//! - **One leader.** Each daemon tries to take or renew the store's `schedules` leader lease
//!   every [`TimerConfig::renew_every`]; the lease lasts [`TimerConfig::lease_ttl`]. A standby
//!   keeps trying, so when the leader dies its lease runs out and a standby leads within
//!   `lease_ttl + renew_every`. A clean shutdown releases the lease at once.
//! - **Exactly one run per fire**, also with several daemons and across crashes: the fire's
//!   idempotency key makes a repeated enqueue return the first run, and advancing the
//!   schedule past each fire is a compare-and-set on its armed fire, fenced by the leader's
//!   epoch.
//! - **One clock.** Which fires are due, and the next fire armed, are decided by the
//!   schedules' clock ([`Store::schedule_now`](nightshift_store::Store::schedule_now)): the
//!   database's on PostgreSQL, so daemons whose clocks differ fire on time by one clock and
//!   hand over without losing a fire. The loop sleeps by the monotonic clock for the time the
//!   schedules' clock says is left.
//! - **Edits are seen at once.** The loop wakes when a schedule is created, changed or
//!   deleted (by the API, the dashboard or a reload, on any daemon:
//!   [`Store::subscribe_schedules`](nightshift_store::Store::subscribe_schedules)), so an
//!   edit that moves the next fire earlier fires on time; otherwise it sleeps until the
//!   earliest armed fire, at most `renew_every`.
//! - **Missed fires.** Each schedule's next fire is stored, so a fire that came due while no
//!   daemon led is found later. Each fire is judged on its own ([`super::due`]): taken up
//!   within [`TimerConfig::misfire_grace`] (one minute) of its time it runs; later it is
//!   missed — with `missed = "skip"` dropped (logged and counted), with `run_once` the latest
//!   missed time fires once — and the next future fire is armed.

use std::time::Duration;

use nightshift_store::{LeaderFence, LeaderLease, Millis, ScheduleAdvance, ScheduleRow};

use crate::Intake;
use tokio_util::sync::CancellationToken;

use super::due::due;
use super::service::{FireOutcome, ScheduleError, fire};
use super::spec::Schedule;

/// The name of the leader lease of the schedule timer.
pub const LEADER_LEASE: &str = "schedules";
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
    /// The time by the schedules' clock the tick decided by.
    pub now: Millis,
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

    /// Takes or renews the lease; when leading, fires what is due by the schedules' clock.
    pub async fn tick(&mut self) -> Result<Tick, ScheduleError> {
        let now = self.intake.store().schedule_now().await?;
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
            return Ok(Tick {
                now,
                ..Tick::default()
            });
        };
        let fence = LeaderFence {
            lease: LEADER_LEASE.to_string(),
            holder: self.holder.clone(),
            epoch: lease.epoch,
        };
        let mut tick = Tick {
            leader: true,
            now,
            ..Tick::default()
        };
        for row in self.intake.store().due_schedules(now, BATCH).await? {
            if let Err(e) = self.process(&row, &fence, &mut tick).await {
                tracing::error!(schedule = %row.name, error = %e, "schedule fire failed; retrying next tick");
            }
        }
        tick.next_fire = self.intake.store().next_schedule_fire().await?;
        Ok(tick)
    }

    /// Runs what is due of one schedule, advancing it past each fire in turn (so a crash
    /// midway leaves the rest owed, and a repeat of a fire finds its run).
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
        let plan = due(&schedule, armed, tick.now, self.config.misfire_grace);
        let mut expected = armed;
        let mut missed = i64::try_from(plan.missed).unwrap_or(i64::MAX);
        let mut steps = plan.fires.iter().map(|at| Some(*at)).collect::<Vec<_>>();
        if steps.is_empty() {
            // Nothing runs: only the missed fires are counted and the next fire armed.
            steps.push(None);
        }
        for (i, at) in steps.iter().enumerate() {
            let outcome = match at {
                Some(at) => Some(fire(&self.intake, row, &schedule, *at, false).await?),
                None => None,
            };
            let next = plan.fires.get(i + 1).copied().or(plan.next);
            let advance = ScheduleAdvance {
                id: row.id.clone(),
                expected_next: expected,
                next,
                fired: match (&outcome, at) {
                    (Some(FireOutcome::Enqueued { run_id, .. }), Some(at)) => {
                        Some((*at, run_id.clone()))
                    }
                    _ => None,
                },
                skipped: matches!(outcome, Some(FireOutcome::Skipped { .. })),
                missed,
                fence: Some(fence.clone()),
            };
            if !self.intake.store().advance_schedule(&advance).await? {
                // Another daemon moved it first, or this one is no longer leader; the fire's
                // idempotency key kept the run single either way.
                tracing::debug!(schedule = %row.name, "schedule already advanced elsewhere");
                return Ok(());
            }
            if missed > 0 {
                tracing::warn!(
                    schedule = %row.name,
                    missed,
                    at_least = plan.missed_at_least,
                    first_missed = %schedule.local_rfc3339(plan.first_missed.unwrap_or(armed)),
                    grace_secs = self.config.misfire_grace.as_secs(),
                    policy = schedule.spec.missed.as_str(),
                    "fires were missed: taken up more than the grace after their time (no \
                     daemon led the schedule timer then, or it could not reach the store)"
                );
                tick.missed += plan.missed;
                nightshift_telemetry::schedule_missed(&row.name, plan.missed);
                missed = 0;
            }
            if let (Some(outcome), Some(at)) = (outcome, at) {
                self.record(row, &schedule, *at, tick, outcome);
            }
            match next {
                Some(n) => expected = n,
                None => break,
            }
        }
        Ok(())
    }

    /// Logs and counts a fire made and advanced.
    fn record(
        &self,
        row: &ScheduleRow,
        schedule: &Schedule,
        at: Millis,
        tick: &mut Tick,
        outcome: FireOutcome,
    ) {
        let late_ms = tick.now.saturating_sub(at);
        nightshift_telemetry::schedule_fire(&row.name, "timer", outcome.metric_name());
        match &outcome {
            FireOutcome::Enqueued { run_id, duplicate } => tracing::info!(
                schedule = %row.name, fire_time = %schedule.local_rfc3339(at), %run_id,
                duplicate, late_ms, "schedule fired"
            ),
            FireOutcome::Skipped { active_run } => tracing::info!(
                schedule = %row.name, fire_time = %schedule.local_rfc3339(at), %active_run,
                late_ms, "schedule fire skipped: its previous run is still active (overlap = skip)"
            ),
        }
        tick.fired.push(Fired {
            schedule: row.name.clone(),
            fire_at: at,
            outcome,
        });
    }

    /// How long to sleep after `tick` (by the schedules' clock at the tick): until the
    /// earliest armed fire when leading, at most `renew_every`.
    pub fn sleep_after(&self, tick: &Tick) -> Duration {
        let cap = self.config.renew_every;
        match (tick.leader, tick.next_fire) {
            (true, Some(next)) => {
                let ms = u64::try_from(next.saturating_sub(tick.now)).unwrap_or(0);
                Duration::from_millis(ms).clamp(Duration::from_millis(5), cap)
            }
            _ => cap,
        }
    }

    /// Runs until `shutdown`, then releases the lease. Store errors are logged and retried.
    /// A schedule created, changed or deleted anywhere ends the sleep at once.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut edits = self.intake.store().subscribe_schedules();
        while !shutdown.is_cancelled() {
            let started = tokio::time::Instant::now();
            let pause = match self.tick().await {
                // The tick read the clock when it started: what it took is already gone.
                Ok(tick) => self.sleep_after(&tick).saturating_sub(started.elapsed()),
                Err(e) => {
                    tracing::warn!(error = %e, "schedule timer tick failed; retrying");
                    self.config.renew_every
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = edits.wait(pause) => {}
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
            now: 1_000_000,
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
