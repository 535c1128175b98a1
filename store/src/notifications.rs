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

use std::time::Duration;

use crate::clock::{Millis, duration_millis};
use crate::states::RunStatus;
use crate::store::{Store, dispatch};
use crate::{Error, Result};

/// Where a delivery is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Not delivered yet; tried again at `next_attempt_at`.
    Pending,
    /// The receiver answered 2xx.
    Delivered,
    /// Out of attempts; `last_error` says why.
    Dead,
}

impl DeliveryStatus {
    /// The name stored in the database and shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Dead => "dead",
        }
    }
}

impl std::str::FromStr for DeliveryStatus {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "pending" => Ok(DeliveryStatus::Pending),
            "delivered" => Ok(DeliveryStatus::Delivered),
            "dead" => Ok(DeliveryStatus::Dead),
            other => Err(format!(
                "unknown delivery status '{other}'; expected one of: pending, delivered, dead"
            )),
        }
    }
}

impl TryFrom<String> for DeliveryStatus {
    type Error = String;
    fn try_from(s: String) -> std::result::Result<Self, String> {
        s.parse()
    }
}

impl std::fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
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

macro_rules! notification_operations {
    ($backend:ty, $dir:literal) => {
        macro_rules! notify_sql {
            ($name:literal) => {
                include_str!(concat!("../sql/", $dir, "/notifications/", $name, ".sql"))
            };
        }

        impl $backend {
            pub(crate) async fn unexpanded_outbox(
                &self,
                agents: &str,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::notifications::OutboxEntry>> {
                Ok(sqlx::query_as(notify_sql!("unexpanded"))
                    .bind(agents)
                    .bind(limit)
                    .fetch_all(&mut *self.reader().await?)
                    .await?)
            }

            pub(crate) async fn outbox_of_run(
                &self,
                run_id: &str,
            ) -> $crate::Result<Vec<$crate::notifications::OutboxEntry>> {
                Ok(sqlx::query_as(notify_sql!("outbox_of_run"))
                    .bind(run_id)
                    .fetch_all(&mut *self.reader().await?)
                    .await?)
            }

            pub(crate) async fn expand_outbox(
                &self,
                outbox_id: i64,
                deliveries: &[($crate::notifications::NewDelivery, String)],
                now: i64,
            ) -> $crate::Result<bool> {
                let mut tx = self.begin().await?;
                let taken: Option<i64> = sqlx::query_scalar(notify_sql!("mark_expanded"))
                    .bind(outbox_id)
                    .bind(now)
                    .fetch_optional(&mut *tx)
                    .await?;
                if taken.is_none() {
                    tx.rollback().await?;
                    return Ok(false);
                }
                for (d, delivery_id) in deliveries {
                    sqlx::query(notify_sql!("insert_delivery"))
                        .bind(delivery_id)
                        .bind(outbox_id)
                        .bind(&d.url)
                        .bind(&d.secret_env)
                        .bind(d.max_attempts)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(true)
            }

            pub(crate) async fn claim_notifications(
                &self,
                limit: i64,
                lease_ms: i64,
                now: i64,
            ) -> $crate::Result<Vec<$crate::notifications::Notification>> {
                let mut tx = self.begin().await?;
                sqlx::query(notify_sql!("rescue"))
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                let claimed = sqlx::query_as(notify_sql!("claim"))
                    .bind(now)
                    .bind(lease_ms)
                    .bind(limit)
                    .fetch_all(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(claimed)
            }

            #[allow(clippy::too_many_arguments)]
            pub(crate) async fn record_attempt(
                &self,
                id: i64,
                token: i64,
                status: &str,
                next_attempt_at: Option<i64>,
                error: Option<&str>,
                status_code: Option<i64>,
                delivered_at: Option<i64>,
                now: i64,
            ) -> $crate::Result<bool> {
                let updated: Option<i64> = sqlx::query_scalar(notify_sql!("record"))
                    .bind(id)
                    .bind(token)
                    .bind(status)
                    .bind(next_attempt_at)
                    .bind($crate::text::Text::opt(error))
                    .bind(status_code)
                    .bind(delivered_at)
                    .bind(now)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?;
                Ok(updated.is_some())
            }

            pub(crate) async fn notification(
                &self,
                delivery_id: &str,
            ) -> $crate::Result<Option<$crate::notifications::Notification>> {
                Ok(sqlx::query_as(notify_sql!("get"))
                    .bind(delivery_id)
                    .fetch_optional(&mut *self.reader().await?)
                    .await?)
            }

            pub(crate) async fn redeliver(
                &self,
                delivery_id: &str,
                now: i64,
            ) -> $crate::Result<Option<i64>> {
                Ok(sqlx::query_scalar(notify_sql!("redeliver"))
                    .bind(delivery_id)
                    .bind(now)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn list_notifications(
                &self,
                run_id: Option<&str>,
                status: Option<&str>,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::notifications::Notification>> {
                Ok(sqlx::query_as(notify_sql!("list"))
                    .bind(run_id)
                    .bind(status)
                    .bind(limit)
                    .fetch_all(&mut *self.reader().await?)
                    .await?)
            }
        }
    };
}

pub(crate) use notification_operations;

impl Store {
    /// Terminal transitions not yet expanded into deliveries, oldest first, of `agents` only.
    pub async fn unexpanded_outbox(
        &self,
        agents: &[String],
        limit: i64,
    ) -> Result<Vec<OutboxEntry>> {
        let agents = serde_json::to_string(agents).expect("agent names serialise");
        dispatch!(self, b => b.unexpanded_outbox(&agents, limit.clamp(1, 10_000)))
    }

    /// A run's outbox rows (one once the run is terminal, none before).
    pub async fn run_outbox(&self, run_id: &str) -> Result<Vec<OutboxEntry>> {
        dispatch!(self, b => b.outbox_of_run(run_id))
    }

    /// Makes the deliveries of outbox row `outbox_id` (none is fine: the agent has no notify
    /// URLs). Returns `false`, adding nothing, when it was already expanded.
    pub async fn expand_outbox(&self, outbox_id: i64, deliveries: &[NewDelivery]) -> Result<bool> {
        for d in deliveries {
            if d.max_attempts < 1 {
                return Err(Error::Invalid(format!(
                    "max_attempts must be at least 1 (got {} for a notify URL)",
                    d.max_attempts
                )));
            }
        }
        let with_ids: Vec<(NewDelivery, String)> = deliveries
            .iter()
            .map(|d| (d.clone(), uuid::Uuid::now_v7().to_string()))
            .collect();
        let now = self.now();
        dispatch!(self, b => b.expand_outbox(outbox_id, &with_ids, now))
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
        dispatch!(self, b => b.claim_notifications(limit, lease_ms, now))
    }

    /// Records how the attempt on the claimed `delivery` went. A failure of its last attempt
    /// makes it dead. Returns `false`, writing nothing, when the claim is no longer current
    /// (its lease ran out and another attempt was claimed).
    pub async fn record_attempt(
        &self,
        delivery: &Notification,
        outcome: &AttemptOutcome,
    ) -> Result<bool> {
        let now = self.now();
        let (status, next, error, code, delivered_at) = match outcome {
            AttemptOutcome::Delivered { status_code } => (
                DeliveryStatus::Delivered,
                None,
                None,
                Some(i64::from(*status_code)),
                Some(now),
            ),
            AttemptOutcome::Failed {
                error,
                status_code,
                retry_at,
            } => {
                let last = delivery.attempts >= delivery.max_attempts;
                (
                    if last {
                        DeliveryStatus::Dead
                    } else {
                        DeliveryStatus::Pending
                    },
                    (!last).then_some(*retry_at),
                    Some(error.as_str()),
                    status_code.map(i64::from),
                    None,
                )
            }
        };
        let (id, token) = (delivery.id, delivery.claim_token);
        dispatch!(self, b => b.record_attempt(id, token, status.as_str(), next, error, code, delivered_at, now))
    }

    /// One delivery by its delivery id.
    pub async fn notification(&self, delivery_id: &str) -> Result<Option<Notification>> {
        dispatch!(self, b => b.notification(delivery_id))
    }

    /// Sends a `dead` delivery again: a fresh set of attempts, the first due now, under the
    /// same delivery id. Any other delivery is refused with a conflict that says why.
    pub async fn redeliver(&self, delivery_id: &str) -> Result<()> {
        let now = self.now();
        if dispatch!(self, b => b.redeliver(delivery_id, now))?.is_some() {
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
        let status = status.map(DeliveryStatus::as_str);
        dispatch!(self, b => b.list_notifications(run_id, status, limit.clamp(1, 1000)))
    }
}
