//! [`ScheduleStatements`](super::ScheduleStatements) for a backend, from its SQL directory:
//! the binding of each statement's parameters and the reading of its rows, the same on both
//! backends. Nothing here decides anything.

/// Binds a [`ScheduleInsert`](super::ScheduleInsert) to `$query`, in the order both insert
/// statements take it.
macro_rules! bind_schedule_insert {
    ($query:expr, $row:expr) => {
        $query
            .bind($row.id)
            .bind(&$row.def.name)
            .bind($row.def.source.as_str())
            .bind(&$row.def.cron)
            .bind(&$row.def.timezone)
            .bind(&$row.def.agent)
            .bind($crate::text::Text(&$row.def.prompt))
            .bind($row.def.overlap.as_str())
            .bind($row.def.missed.as_str())
            .bind($row.def.enabled)
            .bind($row.def.next_fire_at)
            .bind($row.now)
    };
}
pub(crate) use bind_schedule_insert;

/// Implements [`ScheduleStatements`](super::ScheduleStatements) for a backend from its SQL
/// directory.
macro_rules! schedule_statements {
    ($backend:ty, $dir:literal) => {
        impl $crate::schedules::ScheduleStatements for $backend {
            async fn insert_schedule(
                c: &mut $crate::backend::Conn<Self>,
                row: $crate::schedules::ScheduleInsert<'_>,
            ) -> $crate::Result<Option<$crate::schedules::ScheduleRow>> {
                let query =
                    sqlx::query_as($crate::backend::sql!($dir, "schedules/insert_schedule"));
                Ok($crate::schedules::bind_schedule_insert!(query, row)
                    .fetch_optional(c)
                    .await?)
            }

            async fn apply_config_schedule(
                c: &mut $crate::backend::Conn<Self>,
                row: $crate::schedules::ScheduleInsert<'_>,
            ) -> $crate::Result<Option<$crate::schedules::ScheduleRow>> {
                let query = sqlx::query_as($crate::backend::sql!(
                    $dir,
                    "schedules/apply_config_schedule"
                ));
                Ok($crate::schedules::bind_schedule_insert!(query, row)
                    .fetch_optional(c)
                    .await?)
            }

            async fn update_schedule(
                c: &mut $crate::backend::Conn<Self>,
                update: $crate::schedules::ScheduleUpdate<'_>,
            ) -> $crate::Result<Option<$crate::schedules::ScheduleRow>> {
                let def = update.def;
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "schedules/update_schedule"))
                        .bind(&def.name)
                        .bind(&def.cron)
                        .bind(&def.timezone)
                        .bind(&def.agent)
                        .bind($crate::text::Text(&def.prompt))
                        .bind(def.overlap.as_str())
                        .bind(def.missed.as_str())
                        .bind(def.enabled)
                        .bind(update.rearm)
                        .bind(def.next_fire_at)
                        .bind(update.now)
                        .fetch_optional(c)
                        .await?,
                )
            }

            async fn delete_schedule(
                c: &mut $crate::backend::Conn<Self>,
                name: &str,
                source: $crate::schedules::ScheduleSource,
            ) -> $crate::Result<bool> {
                let gone: Option<String> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "schedules/delete_schedule"))
                        .bind(name)
                        .bind(source.as_str())
                        .fetch_optional(c)
                        .await?;
                Ok(gone.is_some())
            }

            async fn get_schedule(
                c: &mut $crate::backend::Conn<Self>,
                name: &str,
            ) -> $crate::Result<Option<$crate::schedules::ScheduleRow>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "schedules/get_schedule"))
                        .bind(name)
                        .fetch_optional(c)
                        .await?,
                )
            }

            async fn list_schedules(
                c: &mut $crate::backend::Conn<Self>,
            ) -> $crate::Result<Vec<$crate::schedules::ScheduleRow>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "schedules/list_schedules"))
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn due_schedules(
                c: &mut $crate::backend::Conn<Self>,
                now: i64,
                limit: i64,
            ) -> $crate::Result<Vec<$crate::schedules::ScheduleRow>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "schedules/due_schedules"))
                        .bind(now)
                        .bind(limit)
                        .fetch_all(c)
                        .await?,
                )
            }

            async fn next_schedule_fire(
                c: &mut $crate::backend::Conn<Self>,
            ) -> $crate::Result<Option<i64>> {
                Ok(
                    sqlx::query_scalar($crate::backend::sql!($dir, "schedules/next_schedule_fire"))
                        .fetch_one(c)
                        .await?,
                )
            }

            async fn advance_schedule(
                c: &mut $crate::backend::Conn<Self>,
                adv: &$crate::schedules::ScheduleAdvance,
                now: i64,
            ) -> $crate::Result<bool> {
                let (fired_at, run_id) = match &adv.fired {
                    Some((at, run)) => (Some(*at), Some(run.as_str())),
                    None => (None, None),
                };
                let fence = adv.fence.as_ref();
                let moved: Option<String> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "schedules/advance_schedule"))
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
                        .fetch_optional(c)
                        .await?;
                Ok(moved.is_some())
            }

            async fn record_fire(
                c: &mut $crate::backend::Conn<Self>,
                id: &str,
                fired_at: i64,
                run_id: &str,
                now: i64,
            ) -> $crate::Result<()> {
                sqlx::query($crate::backend::sql!($dir, "schedules/record_fire"))
                    .bind(id)
                    .bind(fired_at)
                    .bind(run_id)
                    .bind(now)
                    .execute(c)
                    .await?;
                Ok(())
            }

            async fn acquire_leader(
                c: &mut $crate::backend::Conn<Self>,
                name: &str,
                holder: &str,
                ttl_ms: i64,
                now: i64,
            ) -> $crate::Result<Option<$crate::schedules::LeaderLease>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "schedules/acquire_leader"))
                        .bind(name)
                        .bind(holder)
                        .bind(now)
                        .bind(ttl_ms)
                        .fetch_optional(c)
                        .await?,
                )
            }

            async fn get_leader(
                c: &mut $crate::backend::Conn<Self>,
                name: &str,
            ) -> $crate::Result<Option<$crate::schedules::LeaderLease>> {
                Ok(
                    sqlx::query_as($crate::backend::sql!($dir, "schedules/get_leader"))
                        .bind(name)
                        .fetch_optional(c)
                        .await?,
                )
            }

            async fn release_leader(
                c: &mut $crate::backend::Conn<Self>,
                name: &str,
                holder: &str,
                now: i64,
            ) -> $crate::Result<bool> {
                let released: Option<i64> =
                    sqlx::query_scalar($crate::backend::sql!($dir, "schedules/release_leader"))
                        .bind(name)
                        .bind(holder)
                        .bind(now)
                        .fetch_optional(c)
                        .await?;
                Ok(released.is_some())
            }
        }
    };
}
pub(crate) use schedule_statements;
