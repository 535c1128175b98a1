//! Cron schedules and leader leases (`leadership.rs`): the rows behind `nightshift serve`'s
//! timer loop.
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
//! - **One clock.** Every time these statements bind is [`Store::schedule_now`]: the
//!   database's clock on PostgreSQL (so daemons whose clocks disagree agree on leases and
//!   fires), the one daemon's on SQLite, a test's manual clock as given.
//! - **Edits wake the timers.** Creating, changing or deleting a schedule signals
//!   [`Store::subscribe_schedules`] after the commit, in every daemon on PostgreSQL.
//!
//! A backend supplies the statements (`ScheduleStatements`, one method per file of
//! `store/sql/<backend>/schedules/`, bound by `schedule_statements!`); which statement to
//! run, on which connection, and what a write that matched nothing means are decided once
//! here, over that trait.

use std::future::Future;

use crate::audit::{AuditStatements, NewAudit, record_in};
use crate::backend::{Backend, Conn};
use crate::clock::Millis;
use crate::postgres::PgBackend;
use crate::store::{Store, dispatch};
use crate::{Error, Result};

mod binds;
mod leadership;

pub(crate) use binds::{bind_schedule_insert, schedule_statements};
pub use leadership::{LeaderFence, LeaderLease};

crate::states::string_enum! {
    /// Where a schedule was defined.
    ScheduleSource("schedule source") {
        /// `[[schedules]]` in `nightshift.toml`: re-applied at start, read-only in the API.
        Config => "config",
        /// Made through the API.
        Api => "api",
    }
}

crate::states::string_enum! {
    /// What a fire does while the schedule's previous run is still active.
    #[derive(Default)]
    Overlap("overlap policy") {
        /// Do not start another run; the fire is counted as skipped (the default).
        #[default]
        Skip => "skip",
        /// Enqueue it; runs of the schedule run one at a time (concurrency key `schedule:{id}`).
        Queue => "queue",
        /// Enqueue it; runs may overlap.
        Allow => "allow",
    }
}

impl Overlap {
    /// The concurrency policy a fire's run is enqueued with under the schedule's own key
    /// (`schedule:{id}`): the overlap policy is that policy, named for schedules; `None`
    /// (`allow`) means no key at all.
    pub fn concurrency_policy(self) -> Option<crate::ConcurrencyPolicy> {
        match self {
            Overlap::Skip => Some(crate::ConcurrencyPolicy::Skip),
            Overlap::Queue => Some(crate::ConcurrencyPolicy::Queue),
            Overlap::Allow => None,
        }
    }
}

crate::states::string_enum! {
    /// What happens to fires that were due while no daemon was running.
    #[derive(Default)]
    Missed("missed-fire policy") {
        /// Drop them (logged with how many) and wait for the next fire, like cron (the default).
        #[default]
        Skip => "skip",
        /// Fire once, for the latest missed time, then wait for the next fire.
        RunOnce => "run_once",
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
    #[sqlx(try_from = "String")]
    pub overlap: Overlap,
    #[sqlx(try_from = "String")]
    pub missed: Missed,
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
    pub overlap: Overlap,
    pub missed: Missed,
    pub enabled: bool,
    /// The first fire to arm (`None` when disabled).
    pub next_fire_at: Option<Millis>,
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

/// A schedule row to write (`schedules/insert_schedule.sql`,
/// `schedules/apply_config_schedule.sql`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScheduleInsert<'a> {
    pub id: &'a str,
    pub def: &'a ScheduleDef,
    pub now: Millis,
}

/// A change of a schedule made through the API (`schedules/update_schedule.sql`); with
/// `rearm`, its next fire becomes `def.next_fire_at`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScheduleUpdate<'a> {
    pub def: &'a ScheduleDef,
    pub rearm: bool,
    pub now: Millis,
}

/// The statements of schedules and leader leases (`store/sql/<backend>/schedules/`).
pub(crate) trait ScheduleStatements: Backend {
    /// `schedules/insert_schedule.sql`: the new row, `None` when the name is taken.
    fn insert_schedule(
        c: &mut Conn<Self>,
        row: ScheduleInsert<'_>,
    ) -> impl Future<Output = Result<Option<ScheduleRow>>> + Send;
    /// `schedules/apply_config_schedule.sql`: creates or re-applies a config schedule;
    /// `None` when one made through the API has the name.
    fn apply_config_schedule(
        c: &mut Conn<Self>,
        row: ScheduleInsert<'_>,
    ) -> impl Future<Output = Result<Option<ScheduleRow>>> + Send;
    /// `schedules/update_schedule.sql`: `None` when there is no such schedule from the API.
    fn update_schedule(
        c: &mut Conn<Self>,
        update: ScheduleUpdate<'_>,
    ) -> impl Future<Output = Result<Option<ScheduleRow>>> + Send;
    /// `schedules/delete_schedule.sql`: whether a schedule of `source` was deleted.
    fn delete_schedule(
        c: &mut Conn<Self>,
        name: &str,
        source: ScheduleSource,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// `schedules/get_schedule.sql`.
    fn get_schedule(
        c: &mut Conn<Self>,
        name: &str,
    ) -> impl Future<Output = Result<Option<ScheduleRow>>> + Send;
    /// `schedules/list_schedules.sql`: by name.
    fn list_schedules(c: &mut Conn<Self>) -> impl Future<Output = Result<Vec<ScheduleRow>>> + Send;
    /// `schedules/due_schedules.sql`: earliest first.
    fn due_schedules(
        c: &mut Conn<Self>,
        now: Millis,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<ScheduleRow>>> + Send;
    /// `schedules/next_schedule_fire.sql`.
    fn next_schedule_fire(
        c: &mut Conn<Self>,
    ) -> impl Future<Output = Result<Option<Millis>>> + Send;
    /// `schedules/advance_schedule.sql`: whether the schedule was still armed for
    /// `expected_next` (and the fence's lease held) and moved.
    fn advance_schedule(
        c: &mut Conn<Self>,
        adv: &ScheduleAdvance,
        now: Millis,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// `schedules/record_fire.sql`.
    fn record_fire(
        c: &mut Conn<Self>,
        id: &str,
        fired_at: Millis,
        run_id: &str,
        now: Millis,
    ) -> impl Future<Output = Result<()>> + Send;
    /// `schedules/acquire_leader.sql`: the lease taken or renewed, `None` while another
    /// holder's is live.
    fn acquire_leader(
        c: &mut Conn<Self>,
        name: &str,
        holder: &str,
        ttl_ms: i64,
        now: Millis,
    ) -> impl Future<Output = Result<Option<LeaderLease>>> + Send;
    /// `schedules/get_leader.sql`.
    fn get_leader(
        c: &mut Conn<Self>,
        name: &str,
    ) -> impl Future<Output = Result<Option<LeaderLease>>> + Send;
    /// `schedules/release_leader.sql`: whether `holder` held the lease and gave it up.
    fn release_leader(
        c: &mut Conn<Self>,
        name: &str,
        holder: &str,
        now: Millis,
    ) -> impl Future<Output = Result<bool>> + Send;
}

/// Why a change through the API matched no schedule: `exists` when one of the name is there
/// (so it came from the config file).
fn refusal(name: &str, exists: bool) -> Error {
    if exists {
        return Error::Conflict(format!(
            "schedule '{name}' is defined in the config file; change it there (the API can \
             only read and trigger it)"
        ));
    }
    Error::NotFound {
        what: "schedule",
        id: name.to_string(),
    }
}

async fn insert<B: ScheduleStatements + AuditStatements>(
    b: &B,
    row: ScheduleInsert<'_>,
    audit: Option<Stamped<'_>>,
) -> Result<Option<ScheduleRow>> {
    let mut tx = b.begin().await?;
    let created = B::insert_schedule(&mut tx, row).await?;
    if created.is_some() {
        record::<B>(&mut tx, audit).await?;
    }
    B::commit(tx).await?;
    Ok(created)
}

/// An audit entry and when it happened (the store's clock, not the schedules').
#[derive(Clone, Copy)]
pub(crate) struct Stamped<'a> {
    entry: &'a NewAudit<'a>,
    at: Millis,
}

async fn record<B: AuditStatements>(c: &mut Conn<B>, audit: Option<Stamped<'_>>) -> Result<()> {
    match audit {
        Some(a) => record_in::<B>(c, Some(a.entry), a.at).await,
        None => Ok(()),
    }
}

async fn apply_config<B: ScheduleStatements>(
    b: &B,
    row: ScheduleInsert<'_>,
) -> Result<Option<ScheduleRow>> {
    B::apply_config_schedule(&mut *b.writer().await?, row).await
}

async fn update<B: ScheduleStatements + AuditStatements>(
    b: &B,
    update: ScheduleUpdate<'_>,
    audit: Option<Stamped<'_>>,
) -> Result<Option<ScheduleRow>> {
    let mut tx = b.begin().await?;
    let updated = B::update_schedule(&mut tx, update).await?;
    if updated.is_some() {
        record::<B>(&mut tx, audit).await?;
    }
    B::commit(tx).await?;
    Ok(updated)
}

async fn delete<B: ScheduleStatements + AuditStatements>(
    b: &B,
    name: &str,
    source: ScheduleSource,
    audit: Option<Stamped<'_>>,
) -> Result<bool> {
    let mut tx = b.begin().await?;
    let deleted = B::delete_schedule(&mut tx, name, source).await?;
    if deleted {
        record::<B>(&mut tx, audit).await?;
    }
    B::commit(tx).await?;
    Ok(deleted)
}

async fn get<B: ScheduleStatements>(b: &B, name: &str) -> Result<Option<ScheduleRow>> {
    B::get_schedule(&mut *b.writer().await?, name).await
}

async fn list<B: ScheduleStatements>(b: &B) -> Result<Vec<ScheduleRow>> {
    B::list_schedules(&mut *b.reader().await?).await
}

async fn due<B: ScheduleStatements>(b: &B, now: Millis, limit: i64) -> Result<Vec<ScheduleRow>> {
    B::due_schedules(&mut *b.writer().await?, now, limit).await
}

async fn next_fire<B: ScheduleStatements>(b: &B) -> Result<Option<Millis>> {
    B::next_schedule_fire(&mut *b.writer().await?).await
}

async fn advance<B: ScheduleStatements>(b: &B, adv: &ScheduleAdvance, now: Millis) -> Result<bool> {
    B::advance_schedule(&mut *b.writer().await?, adv, now).await
}

async fn record_fire<B: ScheduleStatements>(
    b: &B,
    id: &str,
    fired_at: Millis,
    run_id: &str,
    now: Millis,
) -> Result<()> {
    B::record_fire(&mut *b.writer().await?, id, fired_at, run_id, now).await
}

/// The database's clock in milliseconds since the epoch (`schedules/now.sql`).
async fn database_now(b: &PgBackend) -> Result<Millis> {
    Ok(
        sqlx::query_scalar(crate::backend::sql!("postgres", "schedules/now"))
            .fetch_one(&mut *b.reader().await?)
            .await?,
    )
}

impl Store {
    /// The schedules' clock: the time the timer decides which fires are due by, and every
    /// schedule statement binds. On PostgreSQL it is the database's (`now()`), so several
    /// daemons agree whatever their own clocks say; on SQLite, where one daemon owns the file,
    /// it is that daemon's. A store on a clock that is not the wall clock (a test's manual
    /// clock) uses that clock on both.
    pub async fn schedule_now(&self) -> Result<Millis> {
        match &self.inner.backend {
            crate::store::AnyBackend::Postgres(b) if self.clock().is_wall_clock() => {
                database_now(b).await
            }
            _ => Ok(self.now()),
        }
    }

    /// Creates a schedule; `Conflict` when the name is taken.
    pub async fn create_schedule(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        self.create_schedule_recorded(def, None).await
    }

    /// [`Store::create_schedule`], writing `audit` in its transaction when it creates.
    pub(crate) async fn create_schedule_recorded(
        &self,
        def: &ScheduleDef,
        audit: Option<&NewAudit<'_>>,
    ) -> Result<ScheduleRow> {
        let audit = self.stamp(audit);
        let id = uuid::Uuid::now_v7().to_string();
        let row = ScheduleInsert {
            id: &id,
            def,
            now: self.schedule_now().await?,
        };
        let created = dispatch!(self, b => insert(b, row, audit))?.ok_or_else(|| {
            Error::Conflict(format!(
                "a schedule named '{}' already exists; pick another name or change that one",
                def.name
            ))
        })?;
        self.schedules_changed().await;
        Ok(created)
    }

    /// Creates or re-applies a schedule from the config file. Its armed next fire is kept
    /// while the expression, zone and enabled flag are unchanged. `Conflict` when a schedule
    /// made through the API has the name.
    pub async fn apply_config_schedule(&self, def: &ScheduleDef) -> Result<ScheduleRow> {
        let id = uuid::Uuid::now_v7().to_string();
        let row = ScheduleInsert {
            id: &id,
            def,
            now: self.schedule_now().await?,
        };
        let applied = dispatch!(self, b => apply_config(b, row))?.ok_or_else(|| {
            Error::Conflict(format!(
                "schedule '{}' is in the config file but was also made through the API; delete \
                 it with `DELETE /v1/schedules/{}` or rename the one in the config",
                def.name, def.name
            ))
        })?;
        self.schedules_changed().await;
        Ok(applied)
    }

    /// Changes a schedule made through the API; with `rearm`, its next fire becomes
    /// `def.next_fire_at`, else the armed one is kept. `NotFound`, or `Conflict` for a
    /// config-defined schedule.
    pub async fn update_schedule(&self, def: &ScheduleDef, rearm: bool) -> Result<ScheduleRow> {
        self.update_schedule_recorded(def, rearm, None).await
    }

    /// [`Store::update_schedule`], writing `audit` in its transaction when it changes it.
    pub(crate) async fn update_schedule_recorded(
        &self,
        def: &ScheduleDef,
        rearm: bool,
        audit: Option<&NewAudit<'_>>,
    ) -> Result<ScheduleRow> {
        let audit = self.stamp(audit);
        let change = ScheduleUpdate {
            def,
            rearm,
            now: self.schedule_now().await?,
        };
        if let Some(row) = dispatch!(self, b => update(b, change, audit))? {
            self.schedules_changed().await;
            return Ok(row);
        }
        Err(self.not_changeable(&def.name).await)
    }

    /// Deletes a schedule made through the API (`NotFound`, or `Conflict` for one from the
    /// config file).
    pub async fn delete_schedule(&self, name: &str) -> Result<()> {
        self.delete_schedule_recorded(name, None).await
    }

    /// [`Store::delete_schedule`], writing `audit` in its transaction when it deletes.
    pub(crate) async fn delete_schedule_recorded(
        &self,
        name: &str,
        audit: Option<&NewAudit<'_>>,
    ) -> Result<()> {
        let audit = self.stamp(audit);
        if dispatch!(self, b => delete(b, name, ScheduleSource::Api, audit))? {
            self.schedules_changed().await;
            return Ok(());
        }
        Err(self.not_changeable(name).await)
    }

    /// Deletes a config-defined schedule (one no longer in the config file); false if there
    /// was none.
    pub async fn delete_config_schedule(&self, name: &str) -> Result<bool> {
        let deleted = dispatch!(self, b => delete(b, name, ScheduleSource::Config, None))?;
        if deleted {
            self.schedules_changed().await;
        }
        Ok(deleted)
    }

    fn stamp<'a>(&self, audit: Option<&'a NewAudit<'a>>) -> Option<Stamped<'a>> {
        audit.map(|entry| Stamped {
            entry,
            at: self.now(),
        })
    }

    async fn not_changeable(&self, name: &str) -> Error {
        match self.schedule(name).await {
            Ok(found) => refusal(name, found.is_some()),
            Err(e) => e,
        }
    }

    /// A schedule by name.
    pub async fn schedule(&self, name: &str) -> Result<Option<ScheduleRow>> {
        dispatch!(self, b => get(b, name))
    }

    /// Every schedule, by name.
    pub async fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        dispatch!(self, b => list(b))
    }

    /// Enabled schedules whose next fire is due at `now` (by [`Store::schedule_now`]),
    /// earliest first, at most `limit`.
    pub async fn due_schedules(&self, now: Millis, limit: i64) -> Result<Vec<ScheduleRow>> {
        dispatch!(self, b => due(b, now, limit.max(1)))
    }

    /// The earliest armed fire of any enabled schedule.
    pub async fn next_schedule_fire(&self) -> Result<Option<Millis>> {
        dispatch!(self, b => next_fire(b))
    }

    /// Moves a schedule past its armed fire (see [`ScheduleAdvance`]); false when it was no
    /// longer armed for `expected_next` or the fence's lease is no longer held.
    pub async fn advance_schedule(&self, adv: &ScheduleAdvance) -> Result<bool> {
        let now = self.schedule_now().await?;
        dispatch!(self, b => advance(b, adv, now))
    }

    /// Records a fire made outside the timer (a manual trigger).
    pub async fn record_schedule_fire(
        &self,
        id: &str,
        fired_at: Millis,
        run_id: &str,
    ) -> Result<()> {
        let now = self.schedule_now().await?;
        dispatch!(self, b => record_fire(b, id, fired_at, run_id, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_the_api_cannot_change_is_one_from_the_config_file() {
        let e = refusal("nightly", true);
        assert!(
            matches!(&e, Error::Conflict(m) if m.contains("config file")),
            "{e}"
        );
    }

    #[test]
    fn a_schedule_that_is_not_there_is_not_found() {
        assert!(matches!(
            refusal("nightly", false),
            Error::NotFound { what: "schedule", id } if id == "nightly"
        ));
    }

    #[test]
    fn sources_round_trip_through_their_stored_names() {
        for source in [ScheduleSource::Config, ScheduleSource::Api] {
            assert_eq!(
                ScheduleSource::try_from(source.as_str().to_string()),
                Ok(source)
            );
        }
        assert!(ScheduleSource::try_from("cli".to_string()).is_err());
    }
}
