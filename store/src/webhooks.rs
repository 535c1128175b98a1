//! Webhook deliveries: the durable record that makes webhook intake exactly-once.
//!
//! A delivery is one `(hook, delivery id)` row in `webhook_deliveries`. The intake (in the
//! scheduler) claims the row before it enqueues anything and marks it `done` with the runs it
//! made afterwards; a redelivery of a `done` delivery reads the original runs back. What these
//! operations guarantee:
//! - **One row per delivery.** Claiming is a single `INSERT … ON CONFLICT DO UPDATE`, so two
//!   copies of one delivery arriving at once find the same row (the second sees
//!   `received > 1`), on both backends.
//! - **Done is final.** [`Store::finish_webhook_delivery`] only moves `claimed → done`; the runs
//!   recorded first stay, and [`Store::release_webhook_delivery`] never removes a done row.
//! - **Every arrival is counted** in `received`, including redeliveries of done deliveries.
//!
//! The operations are written once ([`webhook_operations`]) and expanded per backend with the
//! SQL in `store/sql/<backend>/webhooks/`, like the queue operations in `backend.rs`.

use crate::clock::Millis;
use crate::store::{Store, dispatch};
use crate::{Error, Result};

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Accepted; its runs are being enqueued (or the process died while enqueuing them: the
    /// next copy of the delivery finishes the job, with the same idempotency keys).
    Claimed,
    /// Its runs are enqueued and recorded in `runs`.
    Done,
}

impl TryFrom<String> for DeliveryStatus {
    type Error = String;

    fn try_from(s: String) -> std::result::Result<Self, String> {
        match s.as_str() {
            "claimed" => Ok(DeliveryStatus::Claimed),
            "done" => Ok(DeliveryStatus::Done),
            other => Err(format!("unknown webhook delivery status '{other}'")),
        }
    }
}

/// A webhook delivery, as stored.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct WebhookDelivery {
    pub hook: String,
    #[sqlx(try_from = "crate::text::DbText")]
    pub delivery_id: String,
    #[sqlx(try_from = "crate::text::DbText")]
    pub event: String,
    #[sqlx(try_from = "String")]
    pub status: DeliveryStatus,
    /// What the delivery enqueued (a JSON array the intake wrote), once `done`.
    #[sqlx(try_from = "crate::text::DbOptText")]
    pub runs: Option<String>,
    /// How many times the delivery arrived.
    pub received: i64,
    pub first_received_at: Millis,
    pub last_received_at: Millis,
    pub finished_at: Option<Millis>,
}

/// Expands the webhook delivery operations for one backend; `$dir` names the SQL directory.
macro_rules! webhook_operations {
    ($backend:ty, $dir:literal) => {
        impl $backend {
            pub(crate) async fn webhook_redelivery(
                &self,
                hook: &str,
                delivery_id: &str,
                now: i64,
            ) -> $crate::Result<Option<$crate::webhooks::WebhookDelivery>> {
                let sql = include_str!(concat!("../sql/", $dir, "/webhooks/redelivery.sql"));
                Ok(sqlx::query_as(sql)
                    .bind(hook)
                    .bind($crate::text::Text(delivery_id))
                    .bind(now)
                    .fetch_optional(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn claim_webhook_delivery(
                &self,
                hook: &str,
                delivery_id: &str,
                event: &str,
                now: i64,
            ) -> $crate::Result<$crate::webhooks::WebhookDelivery> {
                let sql = include_str!(concat!("../sql/", $dir, "/webhooks/claim.sql"));
                Ok(sqlx::query_as(sql)
                    .bind(hook)
                    .bind($crate::text::Text(delivery_id))
                    .bind($crate::text::Text(event))
                    .bind(now)
                    .fetch_one(&mut *self.writer().await?)
                    .await?)
            }

            pub(crate) async fn finish_webhook_delivery(
                &self,
                hook: &str,
                delivery_id: &str,
                runs: &str,
                now: i64,
            ) -> $crate::Result<bool> {
                let sql = include_str!(concat!("../sql/", $dir, "/webhooks/finish.sql"));
                let done = sqlx::query(sql)
                    .bind(hook)
                    .bind($crate::text::Text(delivery_id))
                    .bind($crate::text::Text(runs))
                    .bind(now)
                    .execute(&mut *self.writer().await?)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            pub(crate) async fn release_webhook_delivery(
                &self,
                hook: &str,
                delivery_id: &str,
            ) -> $crate::Result<bool> {
                let sql = include_str!(concat!("../sql/", $dir, "/webhooks/release.sql"));
                let gone = sqlx::query(sql)
                    .bind(hook)
                    .bind($crate::text::Text(delivery_id))
                    .execute(&mut *self.writer().await?)
                    .await?;
                Ok(gone.rows_affected() == 1)
            }

            pub(crate) async fn webhook_delivery(
                &self,
                hook: &str,
                delivery_id: &str,
            ) -> $crate::Result<Option<$crate::webhooks::WebhookDelivery>> {
                let sql = include_str!(concat!("../sql/", $dir, "/webhooks/get.sql"));
                Ok(sqlx::query_as(sql)
                    .bind(hook)
                    .bind($crate::text::Text(delivery_id))
                    .fetch_optional(&mut *self.reader().await?)
                    .await?)
            }

            pub(crate) async fn webhook_deliveries(
                &self,
                hook: &str,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::webhooks::WebhookDelivery>> {
                let sql = include_str!(concat!("../sql/", $dir, "/webhooks/list.sql"));
                Ok(sqlx::query_as(sql)
                    .bind(hook)
                    .bind(limit)
                    .fetch_all(&mut *self.reader().await?)
                    .await?)
            }
        }
    };
}
pub(crate) use webhook_operations;

fn check_ids(hook: &str, delivery_id: &str) -> Result<()> {
    if hook.is_empty() || hook.len() > 64 {
        return Err(Error::Invalid("a hook name must be 1-64 bytes".into()));
    }
    if delivery_id.is_empty() || delivery_id.len() > 255 {
        return Err(Error::Invalid("a delivery id must be 1-255 bytes".into()));
    }
    Ok(())
}

impl Store {
    /// When `(hook, delivery_id)` is already `done`, counts this arrival and returns the row;
    /// otherwise (unknown, or still claimed) returns `None` and changes nothing.
    pub async fn webhook_redelivery(
        &self,
        hook: &str,
        delivery_id: &str,
    ) -> Result<Option<WebhookDelivery>> {
        check_ids(hook, delivery_id)?;
        let now = self.now();
        dispatch!(self, b => b.webhook_redelivery(hook, delivery_id, now))
    }

    /// Claims a delivery: records it as `claimed` or, when it is already recorded (claimed or
    /// done), counts the arrival. Returns the row; `received == 1` means this call made it.
    pub async fn claim_webhook_delivery(
        &self,
        hook: &str,
        delivery_id: &str,
        event: &str,
    ) -> Result<WebhookDelivery> {
        check_ids(hook, delivery_id)?;
        let now = self.now();
        dispatch!(self, b => b.claim_webhook_delivery(hook, delivery_id, event, now))
    }

    /// Marks a claimed delivery `done` with what it enqueued (`runs`, JSON). Returns false
    /// when it was already done (then the runs recorded first stay).
    pub async fn finish_webhook_delivery(
        &self,
        hook: &str,
        delivery_id: &str,
        runs: &str,
    ) -> Result<bool> {
        let now = self.now();
        dispatch!(self, b => b.finish_webhook_delivery(hook, delivery_id, runs, now))
    }

    /// Forgets a claimed delivery that enqueued nothing. A done delivery is never removed;
    /// returns whether a row was removed.
    pub async fn release_webhook_delivery(&self, hook: &str, delivery_id: &str) -> Result<bool> {
        dispatch!(self, b => b.release_webhook_delivery(hook, delivery_id))
    }

    /// One delivery of a hook.
    pub async fn webhook_delivery(
        &self,
        hook: &str,
        delivery_id: &str,
    ) -> Result<Option<WebhookDelivery>> {
        dispatch!(self, b => b.webhook_delivery(hook, delivery_id))
    }

    /// A hook's deliveries, newest first; at most `limit` (1-1000).
    pub async fn webhook_deliveries(&self, hook: &str, limit: i64) -> Result<Vec<WebhookDelivery>> {
        let limit = limit.clamp(1, 1000);
        dispatch!(self, b => b.webhook_deliveries(hook, limit))
    }
}
