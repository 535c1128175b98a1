//! Webhook deliveries: the durable record that makes webhook intake exactly-once.
//!
//! A delivery is one `(hook, delivery id)` row in `webhook_deliveries`. The intake claims the
//! row, enqueues and marks it `done` with the runs it made, all in one transaction
//! ([`Store::take_webhook_delivery`], [`take`]; a batch of them on SQLite in three
//! statements, [`together`]); a redelivery of a `done` delivery reads the original runs
//! back. What these operations guarantee:
//! - **One row per delivery.** Claiming is a single `INSERT … ON CONFLICT DO UPDATE`, so two
//!   copies of one delivery arriving at once find the same row (the second sees
//!   `received > 1`), on both backends.
//! - **Done is final.** Finishing only moves `claimed → done` (`webhooks/finish.sql`); the runs
//!   recorded first stay.
//! - **Every arrival is counted** in `received`, including redeliveries of done deliveries.
//!
//! A backend supplies the statements ([`WebhookStatements`], one method per file of
//! `store/sql/<backend>/webhooks/`, bound by `webhook_statements!`); the checks and the
//! choice of connection are written once here, over that trait.

pub mod take;
pub(crate) mod together;

use std::future::Future;

use crate::backend::{Backend, Conn};
use crate::clock::Millis;
use crate::store::{Store, dispatch};
use crate::{Error, Result};

crate::states::string_enum! {
    /// Where a delivery stands.
    WebhookDeliveryStatus("webhook delivery status") {
        /// Accepted; its runs are being enqueued (or the process died while enqueuing them: the
        /// next copy of the delivery finishes the job, with the same idempotency keys).
        Claimed => "claimed",
        /// Its runs are enqueued and recorded in `runs`.
        Done => "done",
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
    pub status: WebhookDeliveryStatus,
    /// What the delivery enqueued (a JSON list of [`DeliveryRun`](crate::DeliveryRun)s the
    /// store wrote), once `done`; read it with [`WebhookDelivery::recorded_runs`].
    #[sqlx(try_from = "crate::text::DbOptText")]
    pub runs: Option<String>,
    /// How many times the delivery arrived.
    pub received: i64,
    pub first_received_at: Millis,
    pub last_received_at: Millis,
    pub finished_at: Option<Millis>,
}

impl WebhookDelivery {
    /// The runs its row records (none before it is `done`); a record that is not a list of
    /// [`DeliveryRun`](crate::DeliveryRun)s is [`Error::Corrupt`](crate::Error::Corrupt).
    pub fn recorded_runs(&self) -> crate::Result<Vec<crate::DeliveryRun>> {
        match self.runs.as_deref() {
            None => Ok(Vec::new()),
            Some(text) => serde_json::from_str(text)
                .map_err(|e| crate::Error::Corrupt(format!("webhook runs: {e}"))),
        }
    }
}

/// The statements of webhook deliveries (`store/sql/<backend>/webhooks/`).
pub(crate) trait WebhookStatements: Backend {
    /// `webhooks/redelivery.sql`: counts the arrival of a `done` delivery and returns it;
    /// `None`, changing nothing, for any other.
    fn webhook_redelivery(
        c: &mut Conn<Self>,
        hook: &str,
        delivery_id: &str,
        now: Millis,
    ) -> impl Future<Output = Result<Option<WebhookDelivery>>> + Send;
    /// `webhooks/claim.sql`: records the delivery as claimed or counts its arrival.
    fn claim_webhook_delivery(
        c: &mut Conn<Self>,
        arrival: Arrival<'_>,
    ) -> impl Future<Output = Result<WebhookDelivery>> + Send;
    /// `webhooks/finish.sql`: whether a claimed delivery became `done` with `runs`.
    fn finish_webhook_delivery(
        c: &mut Conn<Self>,
        hook: &str,
        delivery_id: &str,
        runs: &str,
        now: Millis,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// `webhooks/get.sql`.
    fn get_webhook_delivery(
        c: &mut Conn<Self>,
        hook: &str,
        delivery_id: &str,
    ) -> impl Future<Output = Result<Option<WebhookDelivery>>> + Send;
    /// `webhooks/list.sql`: newest first.
    fn list_webhook_deliveries(
        c: &mut Conn<Self>,
        hook: &str,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<WebhookDelivery>>> + Send;
}

/// One arrival of a delivery to claim (`webhooks/claim.sql`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrival<'a> {
    pub hook: &'a str,
    pub delivery_id: &'a str,
    pub event: &'a str,
    pub now: Millis,
}

/// Implements [`WebhookStatements`] for a backend from its SQL directory.
macro_rules! webhook_statements {
    ($backend:ty, $dir:literal) => {
        impl $crate::webhooks::WebhookStatements for $backend {
            async fn webhook_redelivery(
                c: &mut $crate::backend::Conn<Self>,
                hook: &str,
                delivery_id: &str,
                now: i64,
            ) -> $crate::Result<Option<$crate::webhooks::WebhookDelivery>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "webhooks/redelivery"))
                        .bind(hook)
                        .bind($crate::text::Text(delivery_id))
                        .bind(now)
                        .fetch_optional(c)
                        .await?,
                )
            }

            async fn claim_webhook_delivery(
                c: &mut $crate::backend::Conn<Self>,
                arrival: $crate::webhooks::Arrival<'_>,
            ) -> $crate::Result<$crate::webhooks::WebhookDelivery> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "webhooks/claim"))
                        .bind(arrival.hook)
                        .bind($crate::text::Text(arrival.delivery_id))
                        .bind($crate::text::Text(arrival.event))
                        .bind(arrival.now)
                        .fetch_one(c)
                        .await?,
                )
            }

            async fn finish_webhook_delivery(
                c: &mut $crate::backend::Conn<Self>,
                hook: &str,
                delivery_id: &str,
                runs: &str,
                now: i64,
            ) -> $crate::Result<bool> {
                let done = sqlx::query($crate::backend::sql!($dir, "webhooks/finish"))
                    .bind(hook)
                    .bind($crate::text::Text(delivery_id))
                    .bind($crate::text::Text(runs))
                    .bind(now)
                    .execute(c)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn get_webhook_delivery(
                c: &mut $crate::backend::Conn<Self>,
                hook: &str,
                delivery_id: &str,
            ) -> $crate::Result<Option<$crate::webhooks::WebhookDelivery>> {
                Ok(sqlx::query_as($crate::backend::sql!($dir, "webhooks/get"))
                    .bind(hook)
                    .bind($crate::text::Text(delivery_id))
                    .fetch_optional(c)
                    .await?)
            }

            async fn list_webhook_deliveries(
                c: &mut $crate::backend::Conn<Self>,
                hook: &str,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::webhooks::WebhookDelivery>> {
                Ok(sqlx::query_as($crate::backend::sql!($dir, "webhooks/list"))
                    .bind(hook)
                    .bind(limit)
                    .fetch_all(c)
                    .await?)
            }
        }
    };
}
pub(crate) use webhook_statements;

async fn redelivery<B: WebhookStatements>(
    b: &B,
    hook: &str,
    delivery_id: &str,
    now: Millis,
) -> Result<Option<WebhookDelivery>> {
    B::webhook_redelivery(&mut *b.writer().await?, hook, delivery_id, now).await
}

async fn claim<B: WebhookStatements>(b: &B, arrival: Arrival<'_>) -> Result<WebhookDelivery> {
    B::claim_webhook_delivery(&mut *b.writer().await?, arrival).await
}

async fn get<B: WebhookStatements>(
    b: &B,
    hook: &str,
    delivery_id: &str,
) -> Result<Option<WebhookDelivery>> {
    B::get_webhook_delivery(&mut *b.reader().await?, hook, delivery_id).await
}

async fn list<B: WebhookStatements>(b: &B, hook: &str, limit: i64) -> Result<Vec<WebhookDelivery>> {
    B::list_webhook_deliveries(&mut *b.reader().await?, hook, limit).await
}

pub(crate) fn check_ids(hook: &str, delivery_id: &str) -> Result<()> {
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
        dispatch!(self, b => redelivery(b, hook, delivery_id, now))
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
        let arrival = Arrival {
            hook,
            delivery_id,
            event,
            now: self.now(),
        };
        dispatch!(self, b => claim(b, arrival))
    }

    /// One delivery of a hook.
    pub async fn webhook_delivery(
        &self,
        hook: &str,
        delivery_id: &str,
    ) -> Result<Option<WebhookDelivery>> {
        dispatch!(self, b => get(b, hook, delivery_id))
    }

    /// A hook's deliveries, newest first; at most `limit` (1-1000).
    pub async fn webhook_deliveries(&self, hook: &str, limit: i64) -> Result<Vec<WebhookDelivery>> {
        let limit = limit.clamp(1, 1000);
        dispatch!(self, b => list(b, hook, limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_names_and_delivery_ids_are_bounded() {
        assert!(check_ids("github", "abc").is_ok());
        assert!(check_ids(&"h".repeat(64), &"d".repeat(255)).is_ok());
        for (hook, id) in [
            ("", "abc"),
            (&*"h".repeat(65), "abc"),
            ("github", ""),
            ("github", &*"d".repeat(256)),
        ] {
            assert!(
                matches!(check_ids(hook, id), Err(Error::Invalid(_))),
                "{} / {}",
                hook.len(),
                id.len()
            );
        }
    }
}
