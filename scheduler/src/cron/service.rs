//! What the config loader, the API and the timer do with schedules: apply the config file,
//! create, change, delete and trigger schedules, and fire one.
//!
//! What it guarantees:
//! - **A fire is one run, once.** Every fire enqueues through [`Intake::submit`] with the
//!   idempotency key `schedule:{id}:{fire_time_utc_ms}`, so a fire repeated by a second daemon
//!   or after a crash returns the first run instead of starting another.
//! - **Overlap.** `skip`: while a run of the schedule is active (queued, running, waiting or
//!   awaiting approval) the fire starts nothing and is counted as skipped. The check is made
//!   here, and the run also carries the concurrency key `schedule:{id}` with
//!   [`ConcurrencyPolicy::Skip`], so a store that enforces concurrency policies closes the
//!   race between the check and the enqueue (its `skipped` answer counts as a skip too).
//!   `queue`: the run carries the key with [`ConcurrencyPolicy::Queue`]; the store runs a
//!   key's runs one at a time. `allow`: no key.
//! - **One clock, edits at once.** Next fires are computed from the schedules' clock
//!   ([`Store::schedule_now`]: the database's on PostgreSQL), and every create, change or
//!   delete wakes the schedule timers (the store signals them after the commit), so a change
//!   that moves a fire earlier fires on time.
//! - **Config schedules belong to the file.** At start every `[[schedules]]` entry is written
//!   (keeping its armed next fire while its timing is unchanged) and config schedules no longer
//!   in the file are deleted. The API can read and trigger them but not change them.

use nightshift_store::{
    AsOperator, Millis, RunStatus, ScheduleRow, ScheduleSource, Store, Trigger,
};
use serde::{Deserialize, Serialize};

use super::spec::{Overlap, Schedule, ScheduleSpec};
use crate::intake::{Intake, IntakeError, RunRequest};

/// Why a schedule operation was refused, or the store's error.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Store(nightshift_store::Error),
}

impl From<nightshift_store::Error> for ScheduleError {
    fn from(e: nightshift_store::Error) -> Self {
        match e {
            nightshift_store::Error::Conflict(m) => ScheduleError::Conflict(m),
            nightshift_store::Error::NotFound { what, id } => {
                ScheduleError::NotFound(format!("{what} '{id}' not found"))
            }
            e => ScheduleError::Store(e),
        }
    }
}

impl From<IntakeError> for ScheduleError {
    fn from(e: IntakeError) -> Self {
        match e {
            IntakeError::Invalid(m) => ScheduleError::Invalid(m),
            IntakeError::NotFound(m) => ScheduleError::NotFound(m),
            IntakeError::Store(e) => e.into(),
        }
    }
}

/// The concurrency key of a schedule's runs.
pub fn concurrency_key(schedule_id: &str) -> String {
    format!("schedule:{schedule_id}")
}

/// The idempotency key of a schedule's fire at `fire_at`.
pub fn fire_key(schedule_id: &str, fire_at: Millis) -> String {
    format!("schedule:{schedule_id}:{fire_at}")
}

/// What applying the config file did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigSync {
    /// The schedules written, by name.
    pub applied: Vec<String>,
    /// Config schedules deleted because the file no longer has them.
    pub removed: Vec<String>,
}

/// Writes the config file's schedules (already compiled) and deletes config schedules the
/// file no longer has.
pub async fn apply_config(
    store: &Store,
    schedules: &[Schedule],
) -> Result<ConfigSync, ScheduleError> {
    let now = store.schedule_now().await?;
    let mut sync = ConfigSync::default();
    for s in schedules {
        let def = s.to_def(ScheduleSource::Config, s.next_after(now));
        store.apply_config_schedule(&def).await?;
        sync.applied.push(s.name().to_string());
    }
    for row in store.schedules().await? {
        if row.source == ScheduleSource::Config
            && !schedules.iter().any(|s| s.name() == row.name)
            && store.delete_config_schedule(&row.name).await?
        {
            tracing::info!(schedule = %row.name, "schedule removed: it is no longer in the config");
            sync.removed.push(row.name);
        }
    }
    Ok(sync)
}

/// Creates a schedule through the API, armed for its first fire after now.
pub async fn create(
    op: AsOperator<'_>,
    spec: ScheduleSpec,
    agents: &[String],
) -> Result<ScheduleRow, ScheduleError> {
    let store = op.store();
    let s =
        Schedule::compile(spec, Some(agents)).map_err(|e| ScheduleError::Invalid(e.to_string()))?;
    let def = s.to_def(
        ScheduleSource::Api,
        s.next_after(store.schedule_now().await?),
    );
    Ok(op.create_schedule(&def).await?)
}

/// A change to a schedule made through the API: the fields given replace the stored ones.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulePatch {
    pub cron: Option<String>,
    pub timezone: Option<String>,
    pub agent: Option<String>,
    pub prompt: Option<String>,
    pub overlap: Option<Overlap>,
    pub missed: Option<super::spec::Missed>,
    pub enabled: Option<bool>,
}

impl SchedulePatch {
    /// The keys this change sets, in declaration order (for the audit trail).
    pub fn changed_keys(&self) -> Vec<&'static str> {
        [
            ("cron", self.cron.is_some()),
            ("timezone", self.timezone.is_some()),
            ("agent", self.agent.is_some()),
            ("prompt", self.prompt.is_some()),
            ("overlap", self.overlap.is_some()),
            ("missed", self.missed.is_some()),
            ("enabled", self.enabled.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, set)| set.then_some(key))
        .collect()
    }
}

/// Changes a schedule made through the API. A new expression, zone, or enabling re-arms it
/// from now (fires missed while it was disabled are not owed).
pub async fn update(
    op: AsOperator<'_>,
    name: &str,
    patch: SchedulePatch,
    agents: &[String],
) -> Result<ScheduleRow, ScheduleError> {
    let store = op.store();
    let changed = patch.changed_keys().join(", ");
    let row = store
        .schedule(name)
        .await?
        .ok_or_else(|| ScheduleError::NotFound(format!("schedule '{name}' not found")))?;
    let old = Schedule::from_row(&row)
        .map_err(|e| ScheduleError::Invalid(e.to_string()))?
        .spec;
    let spec = ScheduleSpec {
        name: old.name.clone(),
        cron: patch.cron.unwrap_or_else(|| old.cron.clone()),
        timezone: patch.timezone.unwrap_or_else(|| old.timezone.clone()),
        agent: patch.agent.unwrap_or_else(|| old.agent.clone()),
        prompt: patch.prompt.unwrap_or_else(|| old.prompt.clone()),
        overlap: patch.overlap.unwrap_or(old.overlap),
        missed: patch.missed.unwrap_or(old.missed),
        enabled: patch.enabled.unwrap_or(old.enabled),
    };
    let rearm = spec.cron.trim() != old.cron.trim()
        || spec.timezone != old.timezone
        || spec.enabled != old.enabled
        || (spec.enabled && row.next_fire_at.is_none());
    let s =
        Schedule::compile(spec, Some(agents)).map_err(|e| ScheduleError::Invalid(e.to_string()))?;
    let def = s.to_def(
        ScheduleSource::Api,
        s.next_after(store.schedule_now().await?),
    );
    let detail = (!changed.is_empty()).then_some(changed.as_str());
    Ok(op.update_schedule(&def, rearm, detail).await?)
}

/// What one fire did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum FireOutcome {
    /// A run was enqueued (or, with `duplicate`, this fire's run already existed).
    Enqueued { run_id: String, duplicate: bool },
    /// The overlap policy `skip` held it back: `active_run` is still going.
    Skipped { active_run: String },
}

impl FireOutcome {
    /// The run this fire concerns and what became of it, as the audit trail words it: the
    /// run it enqueued (`enqueued`, a duplicate fire's too), or the active run that held it
    /// back (`skipped`).
    pub fn run(&self) -> (&str, &'static str) {
        match self {
            FireOutcome::Enqueued { run_id, .. } => (run_id, "enqueued"),
            FireOutcome::Skipped { active_run } => (active_run, "skipped"),
        }
    }

    /// Its name in the metrics: `enqueued`, `duplicate` or `skipped`.
    pub fn metric_name(&self) -> &'static str {
        match self {
            FireOutcome::Enqueued {
                duplicate: false, ..
            } => "enqueued",
            FireOutcome::Enqueued {
                duplicate: true, ..
            } => "duplicate",
            FireOutcome::Skipped { .. } => "skipped",
        }
    }
}

/// Fires `schedule` (stored as `row`) for `fire_at`: renders its prompt and enqueues the run
/// under the fire's idempotency key and the schedule's overlap policy.
pub async fn fire(
    intake: &Intake,
    row: &ScheduleRow,
    schedule: &Schedule,
    fire_at: Millis,
    manual: bool,
) -> Result<FireOutcome, ScheduleError> {
    fire_by(intake, row, schedule, fire_at, manual, None).await
}

/// [`fire`], by operator `by` when given: the enqueue then writes the `schedule_trigger`
/// audit row in its own transaction.
async fn fire_by(
    intake: &Intake,
    row: &ScheduleRow,
    schedule: &Schedule,
    fire_at: Millis,
    manual: bool,
    by: Option<&str>,
) -> Result<FireOutcome, ScheduleError> {
    let key = fire_key(&row.id, fire_at);
    // The overlap policy is the run's concurrency policy under the schedule's key; the
    // enqueue decides it once: the fire's own idempotency key first (this very fire,
    // enqueued before a crash or by another daemon, is a duplicate), then `skip`.
    let concurrency_policy = schedule.spec.overlap.concurrency_policy();
    let concurrency_key = concurrency_policy.map(|_| concurrency_key(&row.id));
    let prompt = schedule.render(fire_at, manual).map_err(|m| {
        ScheduleError::Invalid(format!("schedules.{}.prompt: {m}", schedule.name()))
    })?;
    let req = RunRequest {
        idempotency_key: Some(key),
        concurrency_key,
        concurrency_policy,
        ..RunRequest::new(&schedule.spec.agent, prompt, Trigger::Schedule)
    };
    let enqueued = match by {
        Some(by) => {
            intake
                .submit_as(req, by, "schedule_trigger", &row.name)
                .await?
        }
        None => intake.submit(req).await?,
    };
    if enqueued.skipped {
        return Ok(FireOutcome::Skipped {
            active_run: enqueued.run_id,
        });
    }
    Ok(FireOutcome::Enqueued {
        run_id: enqueued.run_id,
        duplicate: enqueued.duplicate,
    })
}

/// Fires schedule `name` now (the API's trigger) for operator `by`, whether or not it is
/// enabled; its armed next fire is unchanged. The enqueue and its audit row
/// (`schedule_trigger`) commit together.
pub async fn trigger(intake: &Intake, name: &str, by: &str) -> Result<FireOutcome, ScheduleError> {
    let store = intake.store();
    let row = store
        .schedule(name)
        .await?
        .ok_or_else(|| ScheduleError::NotFound(format!("schedule '{name}' not found")))?;
    let schedule = Schedule::from_row(&row).map_err(|e| ScheduleError::Invalid(e.to_string()))?;
    let now = store.schedule_now().await?;
    let outcome = fire_by(intake, &row, &schedule, now, true, Some(by)).await?;
    nightshift_telemetry::schedule_fire(&row.name, "manual", outcome.metric_name());
    if let FireOutcome::Enqueued {
        run_id,
        duplicate: false,
    } = &outcome
    {
        store.record_schedule_fire(&row.id, now, run_id).await?;
    }
    Ok(outcome)
}

/// A schedule as the API and CLI show it: the row, its next fire in its zone and in UTC, and
/// the status of its last run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScheduleView {
    #[serde(flatten)]
    pub row: ScheduleRow,
    pub next_fire_local: Option<String>,
    pub next_fire_utc: Option<String>,
    pub last_fire_local: Option<String>,
    pub last_run_status: Option<RunStatus>,
}

/// Describes `row` for people.
pub async fn describe(store: &Store, row: ScheduleRow) -> Result<ScheduleView, ScheduleError> {
    let tz: chrono_tz::Tz = row.timezone.parse().unwrap_or(chrono_tz::Tz::UTC);
    let local = |t: Millis| super::spec::to_utc(t).with_timezone(&tz).to_rfc3339();
    let last_run_status = match &row.last_run_id {
        Some(id) => store.run(id).await?.map(|r| r.status),
        None => None,
    };
    Ok(ScheduleView {
        next_fire_local: row.next_fire_at.map(local),
        next_fire_utc: row
            .next_fire_at
            .map(|t| super::spec::to_utc(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        last_fire_local: row.last_fire_at.map(local),
        last_run_status,
        row,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fire_names_its_run_and_what_became_of_it() {
        let fired = |duplicate| FireOutcome::Enqueued {
            run_id: "r1".into(),
            duplicate,
        };
        assert_eq!(fired(false).run(), ("r1", "enqueued"));
        assert_eq!(fired(true).run(), ("r1", "enqueued"));
        let held = FireOutcome::Skipped {
            active_run: "r0".into(),
        };
        assert_eq!(held.run(), ("r0", "skipped"));
    }
}
