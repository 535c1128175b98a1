//! Run notifications: the outbox of terminal runs and the deliveries made from it.
//!
//! What it guarantees:
//! - **Every terminal transition of a run that notifies leaves exactly one outbox row,
//!   atomically.** A database trigger (`migrations/*/0005_notifications.sql`, and `0011` for
//!   its `notify` test) on `UPDATE OF status ON runs` writes the row in the same transaction
//!   as the status change, whichever of the many paths made it (complete, retry into
//!   dead-letter, lease rescue, cancel, park racing a cancel, supersession). A terminal run
//!   never changes status again, so there is never a second row; non-terminal changes write
//!   none. No queue operation had to change for this, and a crash can only lose the
//!   transition and its notice together.
//! - **Only runs that notify.** `runs.notify` is set at enqueue, from the agents the store
//!   was told notify ([`Store::set_notifying_agents`]: the daemon's agents with notify URLs).
//!   Runs of other agents leave no row: nobody would be told, and writing and expanding it
//!   cost each such run two writes for nothing.
//! - **Expansion is once.** A daemon turns an outbox row into one delivery per configured URL
//!   ([`Store::expand_outbox`]) in one transaction that first takes the row; a second daemon
//!   finds it taken and adds nothing. `(outbox row, url)` is unique as well.
//! - **Deliveries are at-least-once and never lost.** Claiming a delivery counts the attempt,
//!   issues a fresh claim token and pushes `next_attempt_at` out by a lease: if the daemon dies
//!   mid-delivery the row comes due again by itself (on any daemon). Outcomes are recorded only
//!   under the current claim token. A receiver can therefore see a delivery twice (the first
//!   POST arrived, the crash came before the outcome was recorded); every delivery carries a
//!   stable `delivery_id` so it can dedupe.
//! - **Bounded.** A delivery is tried at most `max_attempts` times, then `dead` with its last
//!   error kept, including when the daemon making the last attempt died. An operator can send
//!   a dead one again ([`Store::redeliver`]), under the same delivery id.
//!
//! A backend supplies the statements (`NotificationStatements`, one method per file of
//! `store/sql/<backend>/notifications/`, bound by `notification_statements!`); the
//! transactions of expansion and claiming and what an attempt's outcome writes
//! (`attempt_row`, a pure function) are written once here, over that trait.

use std::future::Future;
use std::time::Duration;

use crate::audit::{AuditStatements, NewAudit, record_in};
use crate::backend::{Backend, Conn};
use crate::clock::{Millis, duration_millis};
use crate::states::RunStatus;
use crate::store::{Store, dispatch};
use crate::{Error, Result};

mod binds;
mod rules;

pub(crate) use binds::notification_statements;
pub use rules::shown_url;
use rules::{attempt_row, check_deliveries};

crate::states::string_enum! {
    /// Where a delivery is.
    DeliveryStatus("delivery status") {
        /// Not delivered yet; tried again at `next_attempt_at`.
        Pending => "pending",
        /// The receiver answered 2xx.
        Delivered => "delivered",
        /// Out of attempts; `last_error` says why.
        Dead => "dead",
    }
}

/// A run's terminal transition, as the trigger recorded it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct OutboxEntry {
    pub id: i64,
    pub run_id: String,
    pub agent: String,
    /// The terminal status the run reached.
    #[sqlx(try_from = "String")]
    pub status: RunStatus,
    /// When the run reached it (its `finished_at`).
    pub created_at: Millis,
    /// When its deliveries were made; `None` until a daemon expanded it.
    pub expanded_at: Option<Millis>,
}

/// One delivery to make for an outbox row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDelivery {
    pub url: String,
    /// The name of the environment variable holding the signing secret (never the secret).
    pub secret_env: String,
    pub max_attempts: i64,
}

/// One delivery of a run's notice to one URL.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct Notification {
    pub id: i64,
    /// Stable across attempts: receivers dedupe on it.
    pub delivery_id: String,
    pub outbox_id: i64,
    pub run_id: String,
    pub url: String,
    pub secret_env: String,
    #[sqlx(try_from = "String")]
    pub status: DeliveryStatus,
    /// Attempts made (a claimed attempt counts, whatever its outcome).
    pub attempts: i64,
    pub max_attempts: i64,
    pub next_attempt_at: Millis,
    pub claim_token: i64,
    #[sqlx(try_from = "crate::text::DbOptText")]
    pub last_error: Option<String>,
    pub last_status_code: Option<i64>,
    pub created_at: Millis,
    pub updated_at: Millis,
    pub delivered_at: Option<Millis>,
}

/// How a claimed attempt went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The receiver answered 2xx.
    Delivered { status_code: u16 },
    /// No 2xx answer (`status_code` is `None` when there was no answer at all). The delivery is
    /// tried again at `retry_at`, or is dead when that was its last attempt.
    Failed {
        error: String,
        status_code: Option<u16>,
        retry_at: Millis,
    },
}

/// A delivery to insert for an outbox row (`notifications/insert_delivery.sql`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeliveryRow<'a> {
    pub delivery_id: &'a str,
    pub outbox_id: i64,
    pub delivery: &'a NewDelivery,
    pub now: Millis,
}

/// What a claimed attempt writes (`notifications/record.sql`); a `None` keeps the column.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AttemptRow<'a> {
    pub id: i64,
    pub claim_token: i64,
    pub status: DeliveryStatus,
    pub next_attempt_at: Option<Millis>,
    pub error: Option<&'a str>,
    pub status_code: Option<i64>,
    pub delivered_at: Option<Millis>,
    pub now: Millis,
}

/// The statements of the outbox and its deliveries (`store/sql/<backend>/notifications/`).
pub(crate) trait NotificationStatements: Backend {
    /// `notifications/unexpanded.sql`: oldest first, of the agents in the JSON array `agents`.
    fn unexpanded_outbox(
        c: &mut Conn<Self>,
        agents: &str,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<OutboxEntry>>> + Send;
    /// `notifications/outbox_of_run.sql`.
    fn outbox_of_run(
        c: &mut Conn<Self>,
        run_id: &str,
    ) -> impl Future<Output = Result<Vec<OutboxEntry>>> + Send;
    /// `notifications/mark_expanded.sql`: whether this call took the row for expansion.
    fn mark_expanded(
        c: &mut Conn<Self>,
        outbox_id: i64,
        now: Millis,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// `notifications/insert_delivery.sql` (a second one for the same URL is ignored).
    fn insert_delivery(
        c: &mut Conn<Self>,
        row: DeliveryRow<'_>,
    ) -> impl Future<Output = Result<()>> + Send;
    /// `notifications/rescue.sql`: marks dead the deliveries whose last attempt's daemon
    /// died.
    fn rescue_deliveries(
        c: &mut Conn<Self>,
        now: Millis,
    ) -> impl Future<Output = Result<()>> + Send;
    /// `notifications/claim.sql`: claims up to `limit` due deliveries for `lease_ms`.
    fn claim_deliveries(
        c: &mut Conn<Self>,
        limit: i64,
        lease_ms: i64,
        now: Millis,
    ) -> impl Future<Output = Result<Vec<Notification>>> + Send;
    /// `notifications/record.sql`: whether the claim was still current.
    fn record_attempt(
        c: &mut Conn<Self>,
        row: AttemptRow<'_>,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// `notifications/get.sql`.
    fn get_notification(
        c: &mut Conn<Self>,
        delivery_id: &str,
    ) -> impl Future<Output = Result<Option<Notification>>> + Send;
    /// `notifications/redeliver.sql`: whether the delivery was dead and is pending again.
    fn redeliver(
        c: &mut Conn<Self>,
        delivery_id: &str,
        now: Millis,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// `notifications/note_check_run.sql`: whether `name` was added to the run's list.
    fn note_check_run(
        c: &mut Conn<Self>,
        run_id: &str,
        name: &str,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// `notifications/check_runs_of.sql`: the run's list as stored (a JSON array), if any.
    fn check_runs_of(
        c: &mut Conn<Self>,
        run_id: &str,
    ) -> impl Future<Output = Result<Option<String>>> + Send;
    /// `notifications/list.sql`: newest first, of one run and one status when given.
    fn list_notifications(
        c: &mut Conn<Self>,
        run_id: Option<&str>,
        status: Option<DeliveryStatus>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<Notification>>> + Send;
}

/// Takes outbox row `outbox_id` and makes its deliveries (`ids[i]` for `deliveries[i]`) in
/// one transaction; `false`, adding nothing, when another call took it first.
async fn expand<B: NotificationStatements>(
    b: &B,
    outbox_id: i64,
    deliveries: &[NewDelivery],
    ids: &[String],
    now: Millis,
) -> Result<bool> {
    let mut tx = b.begin().await?;
    if !B::mark_expanded(&mut tx, outbox_id, now).await? {
        B::rollback(tx).await?;
        return Ok(false);
    }
    for (delivery, delivery_id) in deliveries.iter().zip(ids) {
        let row = DeliveryRow {
            delivery_id,
            outbox_id,
            delivery,
            now,
        };
        B::insert_delivery(&mut tx, row).await?;
    }
    B::commit(tx).await?;
    Ok(true)
}

/// Marks dead the deliveries whose last attempt's daemon died, then claims due ones, in one
/// transaction.
async fn claim<B: NotificationStatements>(
    b: &B,
    limit: i64,
    lease_ms: i64,
    now: Millis,
) -> Result<Vec<Notification>> {
    let mut tx = b.begin().await?;
    B::rescue_deliveries(&mut tx, now).await?;
    let claimed = B::claim_deliveries(&mut tx, limit, lease_ms, now).await?;
    B::commit(tx).await?;
    Ok(claimed)
}

async fn unexpanded<B: NotificationStatements>(
    b: &B,
    agents: &str,
    limit: i64,
) -> Result<Vec<OutboxEntry>> {
    B::unexpanded_outbox(&mut *b.reader().await?, agents, limit).await
}

async fn outbox_of_run<B: NotificationStatements>(b: &B, run_id: &str) -> Result<Vec<OutboxEntry>> {
    B::outbox_of_run(&mut *b.reader().await?, run_id).await
}

async fn record<B: NotificationStatements>(b: &B, row: AttemptRow<'_>) -> Result<bool> {
    B::record_attempt(&mut *b.writer().await?, row).await
}

async fn get<B: NotificationStatements>(b: &B, delivery_id: &str) -> Result<Option<Notification>> {
    B::get_notification(&mut *b.reader().await?, delivery_id).await
}

async fn redeliver<B: NotificationStatements + AuditStatements>(
    b: &B,
    delivery_id: &str,
    now: Millis,
    audit: Option<&NewAudit<'_>>,
) -> Result<bool> {
    let mut tx = b.begin().await?;
    let sent_again = B::redeliver(&mut tx, delivery_id, now).await?;
    if sent_again {
        record_in::<B>(&mut tx, audit, now).await?;
    }
    B::commit(tx).await?;
    Ok(sent_again)
}

async fn list<B: NotificationStatements>(
    b: &B,
    run_id: Option<&str>,
    status: Option<DeliveryStatus>,
    limit: i64,
) -> Result<Vec<Notification>> {
    B::list_notifications(&mut *b.reader().await?, run_id, status, limit).await
}

async fn note_check_run<B: NotificationStatements>(
    b: &B,
    run_id: &str,
    name: &str,
) -> Result<bool> {
    B::note_check_run(&mut *b.writer().await?, run_id, name).await
}

async fn check_runs_of<B: NotificationStatements>(b: &B, run_id: &str) -> Result<Vec<String>> {
    let Some(stored) = B::check_runs_of(&mut *b.reader().await?, run_id).await? else {
        return Ok(Vec::new());
    };
    serde_json::from_str(&stored)
        .map_err(|e| Error::Corrupt(format!("runs.check_runs of {run_id}: {e}")))
}

impl Store {
    /// Records that `run_id` opens the GitHub check run `name` (before it asks GitHub to), so
    /// that its end completes that check run whatever the config says by then (see
    /// [`Store::check_runs_of`]). Whether the name was new; `false` also for an unknown run.
    pub async fn note_check_run(&self, run_id: &str, name: &str) -> Result<bool> {
        dispatch!(self, b => note_check_run(b, run_id, name))
    }

    /// The check runs `run_id` opened, in the order it opened them (none for an unknown run).
    pub async fn check_runs_of(&self, run_id: &str) -> Result<Vec<String>> {
        dispatch!(self, b => check_runs_of(b, run_id))
    }

    /// Terminal transitions not yet expanded into deliveries, oldest first, of `agents` only.
    pub async fn unexpanded_outbox(
        &self,
        agents: &[String],
        limit: i64,
    ) -> Result<Vec<OutboxEntry>> {
        let agents = serde_json::to_string(agents).expect("agent names serialise");
        dispatch!(self, b => unexpanded(b, &agents, limit.clamp(1, 10_000)))
    }

    /// A run's outbox rows (one once the run is terminal, none before).
    pub async fn run_outbox(&self, run_id: &str) -> Result<Vec<OutboxEntry>> {
        dispatch!(self, b => outbox_of_run(b, run_id))
    }

    /// Makes the deliveries of outbox row `outbox_id` (none is fine: the agent has no notify
    /// URLs). Returns `false`, adding nothing, when it was already expanded.
    pub async fn expand_outbox(&self, outbox_id: i64, deliveries: &[NewDelivery]) -> Result<bool> {
        check_deliveries(deliveries)?;
        let ids: Vec<String> = deliveries
            .iter()
            .map(|_| uuid::Uuid::now_v7().to_string())
            .collect();
        let now = self.now();
        dispatch!(self, b => expand(b, outbox_id, deliveries, &ids, now))
    }

    /// Claims up to `limit` due deliveries for one attempt each, for `lease` (after which an
    /// attempt whose outcome was not recorded is due again). First marks dead the deliveries
    /// whose last attempt's daemon died.
    pub async fn claim_notifications(
        &self,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<Notification>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let lease_ms = duration_millis(lease).max(1);
        let now = self.now();
        dispatch!(self, b => claim(b, limit, lease_ms, now))
    }

    /// Records how the attempt on the claimed `delivery` went. A failure of its last attempt
    /// makes it dead. Returns `false`, writing nothing, when the claim is no longer current
    /// (its lease ran out and another attempt was claimed).
    pub async fn record_attempt(
        &self,
        delivery: &Notification,
        outcome: &AttemptOutcome,
    ) -> Result<bool> {
        let row = attempt_row(delivery, outcome, self.now());
        dispatch!(self, b => record(b, row))
    }

    /// One delivery by its delivery id.
    pub async fn notification(&self, delivery_id: &str) -> Result<Option<Notification>> {
        dispatch!(self, b => get(b, delivery_id))
    }

    /// Sends a `dead` delivery again: a fresh set of attempts, the first due now, under the
    /// same delivery id. Any other delivery is refused with a conflict that says why.
    pub async fn redeliver(&self, delivery_id: &str) -> Result<()> {
        self.redeliver_recorded(delivery_id, None).await
    }

    /// [`Store::redeliver`], writing `audit` in its transaction when it sends again.
    pub(crate) async fn redeliver_recorded(
        &self,
        delivery_id: &str,
        audit: Option<&NewAudit<'_>>,
    ) -> Result<()> {
        let now = self.now();
        if dispatch!(self, b => redeliver(b, delivery_id, now, audit))? {
            return Ok(());
        }
        match self.notification(delivery_id).await? {
            None => Err(Error::NotFound {
                what: "delivery",
                id: delivery_id.to_string(),
            }),
            Some(d) => Err(Error::Conflict(format!(
                "delivery {delivery_id} is {}; only a dead delivery can be sent again",
                d.status
            ))),
        }
    }

    /// Deliveries, newest first, optionally of one run and in one status; at most `limit`
    /// (1-1000).
    pub async fn notifications(
        &self,
        run_id: Option<&str>,
        status: Option<DeliveryStatus>,
        limit: i64,
    ) -> Result<Vec<Notification>> {
        dispatch!(self, b => list(b, run_id, status, limit.clamp(1, 1000)))
    }
}
