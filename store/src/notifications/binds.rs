//! [`NotificationStatements`](super::NotificationStatements) for a backend, from its SQL
//! directory: the binding of each statement's parameters and the reading of its rows, the
//! same on both backends. Nothing here decides anything.

/// Implements [`NotificationStatements`](super::NotificationStatements) for a backend from its
/// SQL directory.
macro_rules! notification_statements {
    ($backend:ty, $dir:literal) => {
        impl $crate::notifications::NotificationStatements for $backend {
            async fn unexpanded_outbox(
                c: &mut $crate::backend::Conn<Self>,
                agents: &str,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::notifications::OutboxEntry>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "notifications/unexpanded"))
                        .bind(agents)
                        .bind(limit)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn outbox_of_run(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
            ) -> $crate::Result<Vec<$crate::notifications::OutboxEntry>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "notifications/outbox_of_run"))
                        .bind(run_id)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn mark_expanded(
                c: &mut $crate::backend::Conn<Self>,
                outbox_id: i64,
                now: i64,
            ) -> $crate::Result<bool> {
                let taken: Option<i64> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "notifications/mark_expanded"))
                        .bind(outbox_id)
                        .bind(now)
                        .fetch_optional(c)
                        .await?;
                Ok(taken.is_some())
            }

            async fn insert_delivery(
                c: &mut $crate::backend::Conn<Self>,
                row: $crate::notifications::DeliveryRow<'_>,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "notifications/insert_delivery"))
                    .bind(row.delivery_id)
                    .bind(row.outbox_id)
                    .bind(&row.delivery.url)
                    .bind(&row.delivery.secret_env)
                    .bind(row.delivery.max_attempts)
                    .bind(row.now)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn rescue_deliveries(
                c: &mut $crate::backend::Conn<Self>,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "notifications/rescue"))
                    .bind(now)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn claim_deliveries(
                c: &mut $crate::backend::Conn<Self>,
                limit: i64,
                lease_ms: i64,
                now: i64,
            ) -> $crate::Result<Vec<$crate::notifications::Notification>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "notifications/claim"))
                        .bind(now)
                        .bind(lease_ms)
                        .bind(limit)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn record_attempt(
                c: &mut $crate::backend::Conn<Self>,
                row: $crate::notifications::AttemptRow<'_>,
            ) -> $crate::Result<bool> {
                let updated: Option<i64> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "notifications/record"))
                        .bind(row.id)
                        .bind(row.claim_token)
                        .bind(row.status.as_str())
                        .bind(row.next_attempt_at)
                        .bind($crate::text::Text::opt(row.error))
                        .bind(row.status_code)
                        .bind(row.delivered_at)
                        .bind(row.now)
                        .fetch_optional(c)
                        .await?;
                Ok(updated.is_some())
            }

            async fn get_notification(
                c: &mut $crate::backend::Conn<Self>,
                delivery_id: &str,
            ) -> $crate::Result<Option<$crate::notifications::Notification>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "notifications/get"))
                        .bind(delivery_id)
                        .fetch_optional(c)
                        .await?,
                )
            }

            async fn redeliver(
                c: &mut $crate::backend::Conn<Self>,
                delivery_id: &str,
                now: i64,
            ) -> $crate::Result<bool> {
                let again: Option<i64> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "notifications/redeliver"))
                        .bind(delivery_id)
                        .bind(now)
                        .fetch_optional(c)
                        .await?;
                Ok(again.is_some())
            }

            async fn note_check_run(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
                name: &str,
            ) -> $crate::Result<bool> {
                let added: Option<String> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "notifications/note_check_run"))
                        .bind(run_id)
                        .bind(name)
                        .fetch_optional(c)
                        .await?;
                Ok(added.is_some())
            }

            async fn check_runs_of(
                c: &mut $crate::backend::Conn<Self>,
                run_id: &str,
            ) -> $crate::Result<Option<String>> {
                let stored: Option<Option<String>> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "notifications/check_runs_of"))
                        .bind(run_id)
                        .fetch_optional(c)
                        .await?;
                Ok(stored.flatten())
            }

            async fn list_notifications(
                c: &mut $crate::backend::Conn<Self>,
                run_id: Option<&str>,
                status: Option<$crate::notifications::DeliveryStatus>,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::notifications::Notification>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "notifications/list"))
                        .bind(run_id)
                        .bind(status.map($crate::notifications::DeliveryStatus::as_str))
                        .bind(limit)
                        .fetch_all(c)
                        .await?,
                )
            }
        }
    };
}
pub(crate) use notification_statements;
