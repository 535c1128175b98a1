//! Cron schedules and leader leases: the rows behind `nightshift serve`'s timer loop.
//!
//! What it guarantees:
//! - **A schedule's next fire is durable.** `next_fire_at` is the fire the daemons owe; it only
//!   moves by [`Store::advance_schedule`], a compare-and-set on the value the caller read, so
//!   two daemons can never both move a schedule past the same fire.
//! - **At most one leader per lease name.** [`Store::acquire_leadership`] takes or renews a
//!   lease in one guarded upsert; a live lease of another holder is never taken. The epoch
//!   grows whenever the lease changes hands, and an advance made as leader is fenced by it: a
//!   deposed leader's write matches no row.
//! - Config-defined schedules are never changed or deleted through the API calls here (they
//!   carry `source = 'config'` and the statements check it).
//!
//! The operations are written once as a macro and expanded for both backends with their SQL
//! in `store/sql/<backend>/schedules/`, like the queue operations in `backend.rs`.

use std::time::Duration;

use crate::clock::{Millis, duration_millis};
use crate::store::{Store, dispatch};
use crate::{Error, Result};

/// Where a schedule was defined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleSource {
    /// `[[schedules]]` in `nightshift.toml`: re-applied at start, read-only in the API.
    Config,
    /// Made through the API.
    Api,
}

impl ScheduleSource {
    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleSource::Config => "config",
            ScheduleSource::Api => "api",
        }
    }
}

impl TryFrom<String> for ScheduleSource {
    type Error = String;
    fn try_from(s: String) -> std::result::Result<Self, String> {
        match s.as_str() {
            "config" => Ok(ScheduleSource::Config),
            "api" => Ok(ScheduleSource::Api),
            other => Err(format!("unknown schedule source '{other}'")),
        }
    }
}

/// A schedule, as stored.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct ScheduleRow {
    pub id: String,
    pub name: String,
    #[sqlx(try_from = "String")]
    pub source: ScheduleSource,
    pub cron: String,
    pub timezone: String,
    pub agent: String,
    #[sqlx(try_from = "crate::text::DbText")]
    pub prompt: String,
    pub overlap: String,
    pub missed: String,
    pub enabled: bool,
    /// The fire the daemons owe next; `None` while disabled.
    pub next_fire_at: Option<Millis>,
    pub last_fire_at: Option<Millis>,
    pub last_run_id: Option<String>,
    pub fired_count: i64,
    pub skipped_count: i64,
    pub missed_count: i64,
    pub created_at: Millis,
    pub updated_at: Millis,
}

/// A schedule to create or change (checked by the scheduler before it gets here).
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleDef {
    pub name: String,
    pub source: ScheduleSource,
    pub cron: String,
    pub timezone: String,
    pub agent: String,
    pub prompt: String,
    pub overlap: String,
    pub missed: String,
    pub enabled: bool,
    /// The first fire to arm (`None` when disabled).
    pub next_fire_at: Option<Millis>,
}

/// The leader writing an advance, checked in the same statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderFence {
    pub lease: String,
    pub holder: String,
    pub epoch: i64,
}

/// Moving a schedule past its armed fire.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleAdvance {
    pub id: String,
    /// The `next_fire_at` the caller read; the advance happens only if it is still armed.
    pub expected_next: Millis,
    /// The next fire to arm.
    pub next: Option<Millis>,
    /// The fire time and run when this advance fired one.
    pub fired: Option<(Millis, String)>,
    /// True when an overlap policy skipped the fire.
    pub skipped: bool,
    /// How many fires were missed (dropped by downtime).
    pub missed: i64,
    pub fence: Option<LeaderFence>,
}

/// A leader lease, as stored.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct LeaderLease {
    pub name: String,
    pub holder: String,
    /// Grows whenever the lease changes hands.
    pub epoch: i64,
    pub acquired_at: Millis,
    pub expires_at: Millis,
}

/// Expands the schedule operations for one backend (see the module docs).
macro_rules! schedule_operations {
    ($backend:ty, $dir:literal) => {
        macro_rules! schedule_sql {
            ($name:literal) => {
                include_str!(concat!("../sql/", $dir, "/schedules/", $name, ".sql"))
            };
        }

        impl $backend {
            pub(crate) async fn insert_schedule(
                &self,
                config: bool,
                id: &str,
                def: &$crate::schedules::ScheduleDef,
                now: i64,
            ) -> $crate::Result<Option<$crate::schedules::ScheduleRow>> {
                let statement = if config {
                    schedule_sql!("apply_config_schedule")
                } else {
                    schedule_sql!("insert_schedule")
                };
                Ok(sqlx::query_as(statement)
                    .bind(id)
                    .bind(&def.name)
                    .bind(def.source.as_str())
                    .bind(&def.cron)
                    .bind(&def.timezone)
                    .bind(&def.agent)
                    .bind($crate::text::Text(&def.prompt))
                    .bind(&def.overlap)
                    .bind(&def.missed)
                    .bind(def.enabled)
                    .bind(def.next_fire_at)
                    .bind(now)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn update_schedule(
                &self,
                def: &$crate::schedules::ScheduleDef,
                rearm: bool,
                now: i64,
            ) -> $crate::Result<Option<$crate::schedules::ScheduleRow>> {
                Ok(sqlx::query_as(schedule_sql!("update_schedule"))
                    .bind(&def.name)
                    .bind(&def.cron)
                    .bind(&def.timezone)
                    .bind(&def.agent)
                    .bind($crate::text::Text(&def.prompt))
                    .bind(&def.overlap)
                    .bind(&def.missed)
                    .bind(def.enabled)
                    .bind(rearm)
                    .bind(def.next_fire_at)
                    .bind(now)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn delete_schedule(
                &self,
                name: &str,
                source: &str,
            ) -> $crate::Result<bool> {
                let gone: Option<String> = sqlx::query_scalar(schedule_sql!("delete_schedule"))
                    .bind(name)
                    .bind(source)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?;
                Ok(gone.is_some())
            }

            pub(crate) async fn get_schedule(
                &self,
                name: &str,
            ) -> $crate::Result<Option<$crate::schedules::ScheduleRow>> {
                Ok(sqlx::query_as(schedule_sql!("get_schedule"))
                    .bind(name)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn list_schedules(
                &self,
            ) -> $crate::Result<Vec<$crate::schedules::ScheduleRow>> {
                Ok(sqlx::query_as(schedule_sql!("list_schedules"))
                    .fetch_all(&mut *self.reader().await?)
                    .await?)
            }

            pub(crate) async fn due_schedules(
                &self,
                now: i64,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::schedules::ScheduleRow>> {
                Ok(sqlx::query_as(schedule_sql!("due_schedules"))
                    .bind(now)
                    .bind(limit)
                    .fetch_all(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn next_schedule_fire(&self) -> $crate::Result<Option<i64>> {
                Ok(sqlx::query_scalar(schedule_sql!("next_schedule_fire"))
                    .fetch_one(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn advance_schedule(
                &self,
                adv: &$crate::schedules::ScheduleAdvance,
                now: i64,
            ) -> $crate::Result<bool> {
                let (fired_at, run_id) = match &adv.fired {
                    Some((at, run)) => (Some(*at), Some(run.as_str())),
                    None => (None, None),
                };
                let fence = adv.fence.as_ref();
                let moved: Option<String> = sqlx::query_scalar(schedule_sql!("advance_schedule"))
                    .bind(&adv.id)
                    .bind(adv.expected_next)
                    .bind(adv.next)
                    .bind(fired_at)
                    .bind(run_id)
                    .bind(i64::from(adv.fired.is_some()))
                    .bind(i64::from(adv.skipped))
                    .bind(adv.missed)
                    .bind(now)
                    .bind(fence.map(|f| f.lease.as_str()))
                    .bind(fence.map(|f| f.holder.as_str()))
                    .bind(fence.map(|f| f.epoch))
                    .fetch_optional(&mut *self.writer().await?)
                    .await?;
                Ok(moved.is_some())
            }

            pub(crate) async fn record_schedule_fire(
                &self,
                id: &str,
                fired_at: i64,
                run_id: &str,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query(schedule_sql!("record_fire"))
                    .bind(id)
                    .bind(fired_at)
                    .bind(run_id)
                    .bind(now)
                    .execute(&mut *self.writer().await?)
                    .await?;
                Ok(())
            }

            pub(crate) async fn acquire_leader(
                &self,
                name: &str,
                holder: &str,
                ttl_ms: i64,
                now: i64,
            ) -> $crate::Result<Option<$crate::schedules::LeaderLease>> {
                Ok(sqlx::query_as(schedule_sql!("acquire_leader"))
                    .bind(name)
                    .bind(holder)
                    .bind(now)
                    .bind(ttl_ms)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn get_leader(
                &self,
                name: &str,
            ) -> $crate::Result<Option<$crate::schedules::LeaderLease>> {
                Ok(sqlx::query_as(schedule_sql!("get_leader"))
                    .bind(name)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn release_leader(
                &self,
                name: &str,
                holder: &str,
                now: i64,
            ) -> $crate::Result<bool> {
                let released: Option<i64> = sqlx::query_scalar(schedule_sql!("release_leader"))
                    .bind(name)
                    .bind(holder)
                    .bind(now)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?;
                Ok(released.is_some())
            }
        }
    };
}

pub(crate) use schedule_operations;

impl Store {
    /// Creates a schedule; `Conflict` when the name is taken.
    pub async fn create_schedule(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        let id = uuid::Uuid::now_v7().to_string();
        let now = self.now();
        dispatch!(self, b => b.insert_schedule(false, &id, def, now))?.ok_or_else(|| {
            Error::Conflict(format!(
                "a schedule named '{}' already exists; pick another name or change that one",
                def.name
            ))
        })
    }

    /// Creates or re-applies a schedule from the config file. Its armed next fire is kept
    /// while the expression, zone and enabled flag are unchanged. `Conflict` when a schedule
    /// made through the API has the name.
    pub async fn apply_config_schedule(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        let id = uuid::Uuid::now_v7().to_string();
        let now = self.now();
        dispatch!(self, b => b.insert_schedule(true, &id, def, now))?.ok_or_else(|| {
            Error::Conflict(format!(
                "schedule '{}' is in the config file but was also made through the API; delete \
                 it with `DELETE /v1/schedules/{}` or rename the one in the config",
                def.name, def.name
            ))
        })
    }

    /// Changes a schedule made through the API; with `rearm`, its next fire becomes
    /// `def.next_fire_at`, else the armed one is kept. `NotFound`, or `Conflict` for a
    /// config-defined schedule.
    pub async fn update_schedule(&self, def: &ScheduleDef, rearm: bool) -> Result<ScheduleRow> {
        let now = self.now();
        if let Some(row) = dispatch!(self, b => b.update_schedule(def, rearm, now))? {
            return Ok(row);
        }
        Err(self.not_changeable(&def.name).await)
    }

    /// Deletes a schedule made through the API (`NotFound`, or `Conflict` for one from the
    /// config file).
    pub async fn delete_schedule(&self, name: &str) -> Result<()> {
        if dispatch!(self, b => b.delete_schedule(name, "api"))? {
            return Ok(());
        }
        Err(self.not_changeable(name).await)
    }

    /// Deletes a config-defined schedule (one no longer in the config file); false if there
    /// was none.
    pub async fn delete_config_schedule(&self, name: &str) -> Result<bool> {
        dispatch!(self, b => b.delete_schedule(name, "config"))
    }

    async fn not_changeable(&self, name: &str) -> Error {
        match self.schedule(name).await {
            Ok(Some(_)) => Error::Conflict(format!(
                "schedule '{name}' is defined in the config file; change it there (the API can \
                 only read and trigger it)"
            )),
            Ok(None) => Error::NotFound {
                what: "schedule",
                id: name.to_string(),
            },
            Err(e) => e,
        }
    }

    /// A schedule by name.
    pub async fn schedule(&self, name: &str) -> Result<Option<ScheduleRow>> {
        dispatch!(self, b => b.get_schedule(name))
    }

    /// Every schedule, by name.
    pub async fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        dispatch!(self, b => b.list_schedules())
    }

    /// Enabled schedules whose next fire is due now, earliest first, at most `limit`.
    pub async fn due_schedules(&self, limit: i64) -> Result<Vec<ScheduleRow>> {
        let now = self.now();
        dispatch!(self, b => b.due_schedules(now, limit.max(1)))
    }

    /// The earliest armed fire of any enabled schedule.
    pub async fn next_schedule_fire(&self) -> Result<Option<Millis>> {
        dispatch!(self, b => b.next_schedule_fire())
    }

    /// Moves a schedule past its armed fire (see [`ScheduleAdvance`]); false when it was no
    /// longer armed for `expected_next` or the fence's lease is no longer held.
    pub async fn advance_schedule(&self, adv: &ScheduleAdvance) -> Result<bool> {
        let now = self.now();
        dispatch!(self, b => b.advance_schedule(adv, now))
    }

    /// Records a fire made outside the timer (a manual trigger).
    pub async fn record_schedule_fire(
        &self,
        id: &str,
        fired_at: Millis,
        run_id: &str,
    ) -> Result<()> {
        let now = self.now();
        dispatch!(self, b => b.record_schedule_fire(id, fired_at, run_id, now))
    }

    /// Takes or renews lease `name` for `holder` for `ttl` from now; `None` while another
    /// holder's lease is live.
    pub async fn acquire_leadership(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<LeaderLease>> {
        let now = self.now();
        let ttl = duration_millis(ttl).max(1);
        dispatch!(self, b => b.acquire_leader(name, holder, ttl, now))
    }

    /// Lease `name` as stored (it may have expired).
    pub async fn leader(&self, name: &str) -> Result<Option<LeaderLease>> {
        dispatch!(self, b => b.get_leader(name))
    }

    /// Gives up lease `name` if `holder` holds it, so a standby can take it at once.
    pub async fn release_leadership(&self, name: &str, holder: &str) -> Result<bool> {
        let now = self.now();
        dispatch!(self, b => b.release_leader(name, holder, now))
    }
}
